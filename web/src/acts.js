// What the user does, as protocol calls: start or steer a run, recall, cancel, stdin, rename, permission mode,
// approval answers, new sessions, and the agent/model choice. Each act rejects with the daemon's error (an
// RpcError) for the view that asked to show.
import { newKey } from './dom.js';
import { activeRunId } from './store.js';
import { refusalAdvice } from './views/pickers.js';

/**
 * `ctx`: {conn, app, scheduleRender, notice, refreshSessions, refreshApprovals, openSession, currentSelection,
 * updateListedTitle}; `conn` may be set on it after this is called.
 */
export function createActs(ctx) {
  const { app, scheduleRender, notice, refreshSessions, refreshApprovals, openSession, currentSelection, updateListedTitle } = ctx;

  function runSelection() {
    const sel = currentSelection();
    if (!sel?.agent || !sel?.model) throw new Error('Pick an agent and a model first.');
    return { agent: sel.agent, model: { model: sel.model, variant: null }, preset: null };
  }

  /**
   * `call` refused because its model cannot run says what to do in the console's words (pick another model, or
   * connect the provider), instead of the daemon's (which speaks of setup_values and provider.connect).
   */
  async function withModelAdvice(selection, call) {
    try {
      return await call();
    } catch (error) {
      // Only a refusal about the model (not, say, a working directory that does not exist) gets the advice.
      const aboutModel = typeof error.code === 'number' && /model|provider|script/i.test(error.message ?? '');
      const advice = aboutModel ? refusalAdvice(selection.model.model, app.snapshot) : null;
      if (!advice) throw error;
      const explained = new Error(advice);
      explained.cause = error;
      throw explained;
    }
  }

  /** `attachments`: `[{name, mime_type, data}]`, sent only when there are some (the reference's shape otherwise). */
  async function sendPrompt(text, attachments = []) {
    const files = attachments.length ? { attachments } : {};
    const state = app.state;
    if (!state) throw new Error('Open a session first.');
    const runId = activeRunId(state);
    if (runId) {
      try {
        const result = await ctx.conn.call('run.steer', { run_id: runId, input: text, ...files });
        if (result.accepted === false) throw new Error('The run did not take the steer.');
        return;
      } catch (error) {
        // The run ended meanwhile: the text starts the next one instead.
        if (error.typed !== 'run_not_active') throw error;
      }
    }
    const selection = runSelection();
    // The daemon starts a run on any model and fails it at its first request: say what to do before that.
    const advice = refusalAdvice(selection.model.model, app.snapshot);
    if (advice) throw new Error(advice);
    await withModelAdvice(selection, () => ctx.conn.call('run.start', { session_id: state.sessionId, client_run_id: newKey('web'), selection, input: text, ...files }));
  }

  async function recallSteer() {
    const runId = activeRunId(app.state);
    if (!runId) return null;
    const result = await ctx.conn.call('run.recall_steer', { run_id: runId });
    return result.recalled ?? null;
  }

  async function cancelRun() {
    const runId = activeRunId(app.state);
    if (!runId) return;
    await ctx.conn.call('run.cancel', { run_id: runId });
  }

  async function sendStdin(toolCallId, data, eof) {
    const runId = activeRunId(app.state);
    if (!runId) return false;
    const params = { run_id: runId, tool_call_id: toolCallId, eof };
    if (data) params.data = data;
    const result = await ctx.conn.call('run.tool_stdin', params);
    return result.accepted;
  }

  async function rename(title) {
    const sessionId = app.selectedId;
    const change = title ? { type: 'set', title } : { type: 'clear' };
    const result = await ctx.conn.call('session.rename', { session_id: sessionId, client_rename_id: newKey('rename'), change });
    if (app.state?.sessionId === sessionId) app.state.title = result.session.title;
    updateListedTitle(sessionId, result.session.title);
    scheduleRender();
  }

  async function setMode(mode) {
    await ctx.conn.call('session.set_permission_mode', { session_id: app.selectedId, mode });
    app.mode = mode;
    scheduleRender();
  }

  async function respond(record, decision, feedback) {
    const params = {
      session_id: record.session_id,
      approval_id: record.approval_id,
      request_revision: record.revision,
      operation_fingerprint: record.operation_fingerprint,
      client_response_id: newKey('answer'),
      decision,
    };
    if (decision === 'reject' && feedback) params.feedback = { message: feedback };
    try {
      await ctx.conn.call('approval.respond', params);
    } catch (error) {
      if (['approval_not_pending', 'approval_not_found'].includes(error.typed)) {
        notice('Another client answered this approval first.');
      } else {
        if (error.typed === 'approval_revision_conflict' || error.typed === 'operation_fingerprint_mismatch') refreshApprovals();
        throw error;
      }
    }
    app.resolved.add(record.approval_id);
    app.approvals.delete(record.approval_id);
    scheduleRender();
  }

  async function createNewSession(cwd) {
    const params = { selection: runSelection() };
    if (cwd) params.cwd = cwd;
    const result = await withModelAdvice(params.selection, () => ctx.conn.call('session.create', params));
    await refreshSessions();
    await openSession(result.session.session_id);
  }

  /** The user's pick: it applies to the open session only (or, with none open, to the next new session). */
  function pick({ agent, model }) {
    let chosen = { agent, model };
    if (!model) {
      const info = app.snapshot?.agents?.find((a) => a.agent === agent);
      chosen = { agent, model: info?.models?.[0]?.model ?? currentSelection()?.model ?? null };
    }
    if (app.selectedId) app.picks.set(app.selectedId, chosen);
    else app.draftPick = chosen;
    scheduleRender();
  }

  return { sendPrompt, recallSteer, cancelRun, sendStdin, rename, setMode, respond, createNewSession, pick };
}
