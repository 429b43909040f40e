import { displayDiff } from './diff.js';
// One session's transcript and run state, and how its events change them (the "reduction"). No DOM and no I/O
// here, so it is unit-tested with `node --test`. Views read `entries` in order; each entry has a stable `key`,
// the `seq` of the event that made it, a `kind` (the DOM contract's data-kind) and a `version` bumped on every
// change, so a view re-renders only what changed. Mirrors the TUI's reduction (src/tui/state.rs).

import { flushDecoders, outputGap, toolOutput } from './output.js';
import { visibleLine } from './shown.js';

export { applyOutputNotice } from './output.js';
export { toolOutput };

/** data-kind values of the DOM contract. */
export const KINDS = ['user', 'assistant', 'reasoning', 'tool', 'steer', 'run-start', 'run-end', 'error', 'approval', 'gap', 'other'];

export function createSession(meta) {
  const state = {
    sessionId: meta.session_id,
    meta,
    title: meta.title ?? null,
    cursor: 0,
    entries: [],
    byKey: new Map(),
    /** The active run: {runId, selection} or null. */
    activeRun: null,
    /** Tool calls of the active run that started and have not ended, oldest first. */
    runningTools: [],
    /** Steers admitted to the active run and not yet submitted or recalled, oldest first (input ids). */
    pendingSteers: [],
    /** Pending approvals asked in this session, by id (approval records). */
    approvals: new Map(),
    /** Tool names of the latest model turn's calls, by id (a call refused before it started is named from it). */
    turnCalls: new Map(),
    /** Approval ids by the tool call that asked them. */
    callApprovals: new Map(),
    /** The change an approval showed (`operation.diff`), by tool call, for the call's entry. */
    callFileDiffs: new Map(),
    /** Runs whose failed attempts have error entries already (their run-end does not repeat the details). */
    runsWithErrors: new Set(),
    /** Log lines the daemon could not load, shown as gaps where they were. */
    skipped: [...(meta.skipped_events ?? [])].sort((a, b) => a.seq - b.seq),
    lastSelection: meta.creation_selection ?? null,
    usage: { input: 0, output: 0, cost: 0, costKnown: false },
    runUsage: new Map(),
    /** Bumped when something other than entries changed (title, run state, approvals, goal). */
    version: 0,
    /** Set when an event says the goal changed; the page re-reads it with session.goal.get. */
    goalDirty: false,
    /** Set when the tree changed (delegation); the page re-reads session.tree. */
    treeDirty: false,
  };
  return state;
}

function addEntry(state, key, seq, kind, fields) {
  const entry = { key, seq, kind, version: 1, ...fields };
  state.entries.push(entry);
  state.byKey.set(key, entry);
  return entry;
}

function touch(entry) {
  entry.version += 1;
  return entry;
}

/** Applies events in seq order; events at or below the cursor were applied already and are skipped. */
/**
 * The model a `run_started` was asked for when the run starts on another (fallback stickiness: the fallback an
 * earlier run of the agent moved to), else null.
 */
export function stickyFrom(p) {
  const asked = p.requested_model;
  const model = p.selection?.model;
  if (!asked || !model) return null;
  return asked.model !== model.model || (asked.variant ?? null) !== (model.variant ?? null) ? asked.model : null;
}

export function applyEvents(state, events) {
  let changed = false;
  for (const event of events) {
    if (event.seq <= state.cursor) continue;
    flushSkipped(state, event.seq);
    state.cursor = event.seq;
    applyEvent(state, event);
    changed = true;
  }
  if (changed) state.version += 1;
  return changed;
}

/** Gap entries for the damaged log lines before `seq`, so that entries stay in seq order. */
function flushSkipped(state, seq) {
  while (state.skipped.length && state.skipped[0].seq < seq) {
    const skipped = state.skipped.shift();
    if (skipped.seq <= state.cursor) continue;
    addEntry(state, `skipped-${skipped.seq}`, skipped.seq, 'gap', { text: `Event ${skipped.seq} of this session's log could not be loaded (${skipped.reason}).` });
  }
}

function applyEvent(state, event) {
  const p = event.payload ?? {};
  const seq = event.seq;
  switch (p.type) {
    case 'session_created':
      break;
    case 'session_title_committed':
      state.title = p.title ?? null;
      break;
    case 'run_started': {
      state.activeRun = { runId: event.run_id, selection: p.selection, announced: false, chain: (p.model_chain ?? []).map((m) => m.model ?? m), origin: event.origin ?? null, stickyFrom: stickyFrom(p) };
      // What was asked for: a start on a sticky fallback is noted on the run's header, never taken as the
      // session's own model.
      state.lastSelection = p.requested_model ? { ...p.selection, model: p.requested_model } : p.selection;
      state.runningTools = [];
      state.pendingSteers = [];
      // One entry per event (data-seq is unique): the input here, the run's header at its first model attempt.
      addEntry(state, `user-${seq}`, seq, 'user', { text: p.input ?? '', attachments: p.attachments ?? [], timestamp: event.timestamp, origin: event.origin ?? null });
      break;
    }
    case 'user_input_admitted':
      state.pendingSteers.push(p.input_id);
      addEntry(state, `steer-${p.input_id}`, seq, 'steer', { inputId: p.input_id, text: p.input, attachments: p.attachments ?? [], state: 'admitted' });
      break;
    case 'user_input_submitted':
    case 'user_input_recalled': {
      const next = p.type === 'user_input_submitted' ? 'submitted' : 'recalled';
      state.pendingSteers = state.pendingSteers.filter((id) => id !== p.input_id);
      const entry = state.byKey.get(`steer-${p.input_id}`);
      if (entry) {
        entry.state = next;
        touch(entry);
      } else {
        // Input that was never admitted as a steer (a producer's message) enters as it is submitted.
        addEntry(state, `steer-${p.input_id}`, seq, 'steer', { inputId: p.input_id, text: p.input, attachments: p.attachments ?? [], state: next });
      }
      break;
    }
    case 'model_attempt_started': {
      const run = state.activeRun;
      if (run && !run.announced && run.runId === event.run_id) {
        run.announced = true;
        addEntry(state, `run-start-${event.run_id}`, seq, 'run-start', {
          runId: event.run_id,
          agent: run.selection?.agent,
          model: p.model,
          chain: run.chain,
          origin: run.origin,
          stickyFrom: run.stickyFrom,
          timestamp: event.timestamp,
        });
      }
      break;
    }
    case 'text_delta':
    case 'reasoning_delta': {
      const kind = p.type === 'text_delta' ? 'assistant' : 'reasoning';
      const key = `${kind}-${p.attempt_id}`;
      const entry = state.byKey.get(key);
      if (entry && state.entries[state.entries.length - 1] === entry) {
        entry.text += p.text;
        touch(entry);
      } else if (entry) {
        // Text that resumes after something else (a reasoning block) continues in a new block.
        const part = (entry.parts = (entry.parts ?? 1) + 1);
        addEntry(state, `${key}-${part}`, seq, kind, { attemptId: p.attempt_id, text: p.text, streaming: true, continuation: true });
        state.byKey.set(key, state.entries[state.entries.length - 1]);
      } else {
        addEntry(state, key, seq, kind, { attemptId: p.attempt_id, text: p.text, streaming: true });
      }
      break;
    }
    case 'model_turn_committed': {
      state.turnCalls = new Map((p.tool_calls ?? []).map((call) => [call.tool_call_id, call]));
      const reasoning = state.byKey.get(`reasoning-${p.attempt_id}`);
      const assistant = state.byKey.get(`assistant-${p.attempt_id}`);
      for (const entry of [reasoning, assistant]) {
        if (entry?.streaming) {
          entry.streaming = false;
          entry.model = p.model;
          touch(entry);
        }
      }
      if (!assistant && (p.text || (!reasoning && p.reasoning))) {
        // A turn that was not streamed: one entry, with its reasoning (if that was not streamed either) inside.
        addEntry(state, `assistant-${p.attempt_id}`, seq, 'assistant', {
          attemptId: p.attempt_id,
          text: p.text ?? '',
          reasoning: reasoning ? null : p.reasoning ?? null,
          streaming: false,
          model: p.model,
        });
      }
      break;
    }
    case 'attempt_abandoned':
      if (event.run_id) state.runsWithErrors.add(event.run_id);
      addEntry(state, `error-${seq}`, seq, 'error', {
        title: `${p.model}: ${p.error?.message ?? 'the request failed'}${p.will_retry ? ' (retrying)' : ''}`,
        modelError: p.error ?? null,
      });
      closeStreaming(state, p.attempt_id);
      break;
    case 'model_fallback':
      addEntry(state, `error-${seq}`, seq, 'error', {
        title: `${p.from} failed; falling back to ${p.to}`,
        modelError: p.error ?? null,
      });
      break;
    case 'model_usage_recorded': {
      const usage = state.usage;
      usage.input += p.input_tokens ?? 0;
      usage.output += p.output_tokens ?? 0;
      if (typeof p.estimated_cost_usd === 'number') {
        usage.cost += p.estimated_cost_usd;
        usage.costKnown = true;
      }
      if (event.run_id) {
        const run = state.runUsage.get(event.run_id) ?? { input: 0, output: 0, cost: 0, costKnown: false, requests: 0 };
        run.input += p.input_tokens ?? 0;
        run.output += p.output_tokens ?? 0;
        run.requests += 1;
        if (typeof p.estimated_cost_usd === 'number') {
          run.cost += p.estimated_cost_usd;
          run.costKnown = true;
        }
        state.runUsage.set(event.run_id, run);
      }
      break;
    }
    case 'tool_call_started': {
      const entry = callEntry(state, p.tool_call_id, seq, p.tool, p.arguments, p.resource, p.action);
      entry.started = true;
      entry.tool = p.tool;
      entry.arguments = p.arguments;
      entry.resource = p.resource;
      entry.action = p.action;
      entry.diff = editDiff(p.tool, p.arguments);
      entry.approvalId ??= state.callApprovals.get(p.tool_call_id) ?? null;
      touch(entry);
      if (!state.runningTools.includes(p.tool_call_id)) state.runningTools.push(p.tool_call_id);
      break;
    }
    case 'tool_call_progress':
      toolOutput(state, p.tool_call_id, p.stream, p.offset, new TextEncoder().encode(p.text ?? ''));
      break;
    case 'tool_output_elided': {
      const entry = state.byKey.get(`tool-${p.tool_call_id}`);
      if (entry) outputGap(entry, p.stream, null, `${p.elided_bytes} more bytes of ${p.stream} were not kept; the result below has the output`);
      break;
    }
    case 'tool_stdin_submitted': {
      const entry = state.byKey.get(`tool-${p.tool_call_id}`);
      if (entry) {
        entry.stdin.push({ bytes: p.bytes, eof: p.eof });
        if (p.eof) entry.stdinClosed = true;
        touch(entry);
      }
      break;
    }
    case 'tool_call_terminated': {
      state.runningTools = state.runningTools.filter((id) => id !== p.tool_call_id);
      const call = state.turnCalls.get(p.tool_call_id);
      const entry = callEntry(state, p.tool_call_id, seq, call?.tool ?? 'tool', call?.arguments, '', null);
      entry.result = p.result;
      entry.resultDiff = displayDiff(p.result?.display);
      entry.ended = true;
      flushDecoders(entry);
      touch(entry);
      break;
    }
    case 'approval_requested': {
      const approval = p.approval;
      state.approvals.set(approval.approval_id, approval);
      state.callApprovals.set(approval.tool_call_id, approval.approval_id);
      if (approval.operation?.diff) {
        state.callFileDiffs.set(approval.tool_call_id, approval.operation.diff);
        const call = state.byKey.get(`tool-${approval.tool_call_id}`);
        if (call) {
          call.fileDiff = approval.operation.diff;
          touch(call);
        }
      }
      // The call's own entry comes with its start (or its end, when it never starts).
      addEntry(state, `approval-${approval.approval_id}`, seq, 'approval', {
        approvalId: approval.approval_id,
        toolCallId: approval.tool_call_id,
        operation: approval.operation,
        status: 'pending',
        decision: null,
        feedback: null,
        answeredBy: null,
      });
      break;
    }
    case 'approval_user_decision_recorded': {
      state.approvals.delete(p.approval_id);
      const entry = state.byKey.get(`approval-${p.approval_id}`);
      if (entry) {
        entry.decision = p.decision;
        entry.feedback = p.feedback ?? null;
        entry.answeredBy = p.answered_by;
        touch(entry);
      }
      break;
    }
    case 'approval_finalized':
    case 'approval_cancelled': {
      state.approvals.delete(p.approval_id);
      const entry = state.byKey.get(`approval-${p.approval_id}`);
      if (entry) {
        entry.status = p.type === 'approval_cancelled' ? 'cancelled' : p.status;
        if (p.reason) entry.reason = p.reason;
        touch(entry);
      }
      break;
    }
    case 'tree_approval_grant_committed':
      addEntry(state, `other-${seq}`, seq, 'other', { text: `Allowed in every session of this tree: ${p.grant?.action ?? ''} ${visibleLine(p.grant?.resource ?? '', 200)}`.trim() });
      break;
    case 'run_completed':
    case 'run_failed':
    case 'run_cancelled':
    case 'run_interrupted': {
      const status = p.type.slice(4);
      for (const entry of state.entries) {
        if (entry.streaming) {
          entry.streaming = false;
          touch(entry);
        }
      }
      const runId = event.run_id;
      addEntry(state, `run-end-${runId ?? seq}`, seq, 'run-end', {
        runId,
        status,
        reason: p.reason ?? null,
        error: p.type === 'run_failed' ? { message: p.error, modelError: p.model_error ?? null, resolvedModel: p.resolved_model ?? null, detailsShown: state.runsWithErrors.has(runId) } : null,
        finalText: p.final_text ?? null,
        usage: runId ? state.runUsage.get(runId) ?? null : null,
        timestamp: event.timestamp,
      });
      for (const id of state.pendingSteers) {
        const steer = state.byKey.get(`steer-${id}`);
        if (steer && steer.state === 'admitted') {
          steer.state = 'voided';
          touch(steer);
        }
      }
      state.activeRun = null;
      state.lastRunStatus = status;
      state.runningTools = [];
      state.pendingSteers = [];
      break;
    }
    case 'delegate_started':
      state.treeDirty = true;
      addEntry(state, `delegate-${p.tool_call_id}`, seq, 'other', {
        delegate: { childSessionId: p.child_session_id, agent: p.agent, task: p.task, status: 'running' },
        text: `Delegated to ${p.agent}: ${p.task}`,
      });
      break;
    case 'delegate_finished': {
      state.treeDirty = true;
      const entry = state.byKey.get(`delegate-${p.tool_call_id}`);
      if (entry) {
        entry.delegate.status = p.status;
        entry.delegate.summary = p.summary;
        touch(entry);
      }
      break;
    }
    case 'goal_activated':
    case 'goal_checklist_revised':
    case 'goal_lifecycle_changed':
      state.goalDirty = true;
      addEntry(state, `other-${seq}`, seq, 'other', { text: goalLine(p) });
      break;
    case 'compaction_started':
      addEntry(state, `compaction-${p.compaction_id}`, seq, 'other', { text: `Compacting the context (${p.trigger}) with ${p.model}…` });
      break;
    case 'compaction_ended': {
      const entry = state.byKey.get(`compaction-${p.compaction_id}`);
      if (entry) {
        entry.text = `Context compaction ${p.outcome}${p.reason ? `: ${p.reason}` : ''}`;
        touch(entry);
      }
      break;
    }
    case 'session_reverted':
      addEntry(state, `other-${seq}`, seq, 'other', { text: `Reverted to event ${p.through_seq}` });
      break;
    case 'session_forked':
      addEntry(state, `other-${seq}`, seq, 'other', { text: `Forked from session ${p.source_session_id} at event ${p.through_seq}` });
      break;
    case 'plugin_event_added':
      addEntry(state, `other-${seq}`, seq, 'other', { text: `Plugin ${p.plugin}: ${p.name}`, json: p.payload });
      break;
    default:
      // Bookkeeping events (producer claims, context checkpoints, …) and kinds this page does not know.
      break;
  }
}

function goalLine(p) {
  switch (p.type) {
    case 'goal_activated':
      return `Goal set: ${p.objective}`;
    case 'goal_checklist_revised': {
      const done = (p.items ?? []).filter((item) => item.finished).length;
      return `Goal checklist: ${done}/${(p.items ?? []).length} done`;
    }
    default:
      return `Goal ${p.status}${p.reason ? `: ${p.reason}` : ''}`;
  }
}

function closeStreaming(state, attemptId) {
  for (const kind of ['assistant', 'reasoning']) {
    const entry = state.byKey.get(`${kind}-${attemptId}`);
    if (entry?.streaming) {
      entry.streaming = false;
      touch(entry);
    }
  }
}

/** The entry of tool call `id`, made (at the end) when it has none yet. */
function callEntry(state, id, seq, tool, args, resource, action) {
  const key = `tool-${id}`;
  let entry = state.byKey.get(key);
  if (!entry) {
    entry = addEntry(state, key, seq, 'tool', {
      toolCallId: id,
      tool: tool ?? 'tool',
      arguments: args ?? null,
      resource: resource ?? '',
      action: action ?? null,
      started: false,
      ended: false,
      result: null,
      diff: editDiff(tool, args),
      approvalId: state.callApprovals.get(id) ?? null,
      fileDiff: state.callFileDiffs.get(id) ?? null,
      resultDiff: null,
      chunks: [],
      received: { stdout: 0, stderr: 0 },
      decoders: {},
      stdin: [],
      stdinClosed: false,
    });
  }
  return entry;
}

/**
 * What an edit tool's arguments show before the daemon described the change: `edit_file`'s replaced fragment as a
 * before/after; `write_file`'s content alone (the file's earlier content is not in them).
 */
export function editDiff(tool, args) {
  if (!args || typeof args !== 'object') return null;
  const path = args.path ?? args.file_path;
  if (typeof path !== 'string') return null;
  if (tool === 'edit_file' && typeof args.old_string === 'string' && typeof args.new_string === 'string') {
    return { path, before: args.old_string, after: args.new_string };
  }
  // What the file held is not in the arguments: the content alone, until an approval or the result says what changed.
  if (tool === 'write_file' && typeof args.content === 'string') {
    return { path, content: args.content };
  }
  return null;
}

/** The run a steer, recall or cancel goes to. */
export function activeRunId(state) {
  return state?.activeRun?.runId ?? null;
}

/** The running tool call that stdin goes to: the newest one. */
export function stdinTarget(state) {
  return state?.runningTools[state.runningTools.length - 1] ?? null;
}

export function canRecall(state) {
  return Boolean(state?.activeRun && state.pendingSteers.length > 0);
}
