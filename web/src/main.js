// The console page: wires the connection (rpc.js), the open session's state (store.js) and the views together,
// and turns the user's acts into protocol calls.
import { adoptKeyFromFragment, forgetPageKey, pageKey } from './page_key.js';
import { createActs } from './acts.js';
import { h, fill } from './dom.js';
import { Connection, OFFLINE, RpcError, socketUrl } from './rpc.js';
import { pickOf, snapshotDefault } from './selection.js';
import { applyEvents, applyOutputNotice, canRecall, createSession } from './store.js';
import { answeredByWords } from './who.js';
import { createApprovals } from './views/approvals.js';
import { createBanner } from './views/banner.js';
import { createChanges } from './views/changes.js';
import { createComposer } from './views/composer.js';
import { createPickers } from './views/pickers.js';
import { createHeader } from './views/header.js';
import { createSessionList } from './views/sessions.js';
import { createTranscript } from './views/transcript.js';
import { createTools } from './views/tools.js';

const VERSION = '0.1.0';
const LIST_REFRESH_MS = 5_000;
const APPROVALS_REFRESH_MS = 3_000;
/** Events after which the Changes view reads the session's changes again. */
const CHANGING_EVENTS = new Set(['run_completed', 'run_failed', 'run_cancelled', 'run_interrupted', 'run_changes_undone']);

const app = {
  status: 'connecting',
  retryInMs: null,
  snapshot: null,
  sessions: [],
  sessionsLoaded: false,
  filter: '',
  selectedId: null,
  meta: null,
  rootId: null,
  tree: null,
  mode: null,
  state: null,
  follow: null,
  approvals: new Map(),
  resolved: new Set(),
  presence: null,
  presenceSupported: true,
  presenceFor: null,
  /** Every connection id this page has had (`session.presence`'s `you`): an answer from one of them is "you". */
  myConnections: new Set(),
  /** Client names by connection id, from every presence list seen: who answered an approval. */
  clientNames: new Map(),
  /** Bumped when either of those grows: approval entries re-render their "by …". */
  whoVersion: 0,
  goal: null,
  /** The user's agent/model pick per session (it applies to that session only), by session id. */
  picks: new Map(),
  /** The pick made while no session is open: what a new session is created with. */
  draftPick: null,
  sidebarOpen: true,
  composerStatus: '',
  /** Bumped by each openSession; an open that is no longer the latest stops at its next step. */
  openToken: 0,
};

let conn;
let ctx;
let views;
let rootEl;

// ---- rendering ---------------------------------------------------------------------------------------------

let renderQueued = false;
function scheduleRender() {
  if (renderQueued) return;
  renderQueued = true;
  const run = () => {
    if (!renderQueued) return;
    renderQueued = false;
    render();
  };
  requestAnimationFrame(run);
  // Hidden tabs get no animation frames; the transcript must still keep up.
  setTimeout(run, 100);
}

function render() {
  if (app.status === 'signed-out') return;
  const { state } = app;
  views.banner.render(app.status, app.retryInMs);
  // A run that waits for an approval is not running: say so in the header and on the open session's rows.
  const awaiting = app.approvals.size > 0;
  views.sessions.render({ sessions: app.sessions, filter: app.filter, selectedId: app.selectedId, tree: app.tree, loaded: app.sessionsLoaded, awaiting: awaiting ? [app.selectedId, app.rootId] : [] });
  const changesOpen = views.changes.isOpen();
  views.header.render({ state, meta: app.meta, mode: app.mode, awaiting, presence: app.presenceSupported ? app.presence : null, goal: app.goal, selection: defaultSelection(app.meta, state), picked: app.selectedId ? app.picks.get(app.selectedId) ?? null : null, changesOpen });
  views.approvals.render(pendingApprovals(), app.selectedId);
  views.transcript.render(state, app.whoVersion);
  views.transcript.el.hidden = changesOpen;
  views.tools.render(app.snapshot?.mcp_servers);
  views.composer.render({
    open: Boolean(state) && app.status === 'online',
    active: Boolean(state?.activeRun),
    canRecall: canRecall(state),
    statusText: composerStatus(),
  });
  views.pickers.render(app.snapshot, currentSelection());
  rootEl.classList.toggle('sidebar-open', app.sidebarOpen);
  views.sidebarToggle.setAttribute('aria-expanded', String(app.sidebarOpen));
  views.main.hidden = !app.meta;
  views.welcome.hidden = Boolean(app.meta);
}

function composerStatus() {
  const { state } = app;
  if (!state) return '';
  if (app.composerStatus) return app.composerStatus;
  if (!state.activeRun) return 'Idle';
  const running = state.runningTools.length;
  const model = state.activeRun.selection?.model?.model ?? '';
  return `Running ${model}${running ? ` · ${running} tool call${running > 1 ? 's' : ''} running` : ''}${state.pendingSteers.length ? ` · ${state.pendingSteers.length} steer queued` : ''}`;
}

function pendingApprovals() {
  return [...app.approvals.values()].sort((a, b) => (a.created_at < b.created_at ? -1 : a.created_at > b.created_at ? 1 : 0));
}

function notice(text) {
  views.notice.textContent = text;
  views.notice.hidden = !text;
  clearTimeout(notice.timer);
  if (text) notice.timer = setTimeout(() => notice(''), 10_000);
}

// ---- loading -----------------------------------------------------------------------------------------------

async function refreshSessions() {
  try {
    const result = await conn.call('session.list', {});
    app.sessions = result.sessions ?? [];
    app.sessionsLoaded = true;
    scheduleRender();
  } catch (error) {
    if (error.code !== OFFLINE) notice(`Could not list sessions: ${error.message}`);
  }
}

async function refreshTree() {
  const rootId = app.rootId;
  if (!rootId) return;
  try {
    const result = await conn.call('session.tree', { session_id: rootId });
    if (app.rootId !== rootId) return;
    app.tree = result.tree;
    if (result.permission_mode) app.mode = result.permission_mode;
    scheduleRender();
  } catch (error) {
    if (error.code !== OFFLINE) notice(`Could not read the session tree: ${error.message}`);
  }
}

async function refreshApprovals() {
  const rootId = app.rootId;
  if (!rootId) return;
  try {
    const result = await conn.call('approval.list', { root_session_id: rootId, status: 'pending' });
    if (app.rootId !== rootId) return;
    app.approvals = new Map((result.approvals ?? []).filter((a) => a.status === 'pending' && !app.resolved.has(a.approval_id)).map((a) => [a.approval_id, a]));
    scheduleRender();
  } catch (error) {
    if (error.code !== OFFLINE) notice(`Could not list approvals: ${error.message}`);
  }
}

async function refreshGoal() {
  const rootId = app.rootId;
  if (!rootId) return;
  try {
    const result = await conn.call('session.goal.get', { session_id: rootId });
    if (app.rootId === rootId) app.goal = result.goal ?? null;
  } catch {
    app.goal = null;
  }
  scheduleRender();
}

/** The presence list with this page's own connection marked (`session.presence` names it as `you`). */
function markYou(clients) {
  for (const client of clients ?? []) {
    if (client.name && app.clientNames.get(client.connection_id) !== client.name) {
      app.clientNames.set(client.connection_id, client.name);
      app.whoVersion += 1;
    }
  }
  return (clients ?? []).map((client) => ({ ...client, you: client.connection_id === app.presenceYou }));
}

async function watchPresence(sessionId) {
  if (!app.presenceSupported) return;
  if (app.presenceFor && app.presenceFor !== sessionId) {
    const previous = app.presenceFor;
    conn.call('session.presence_unsubscribe', { session_id: previous }).catch(() => {});
  }
  app.presenceFor = sessionId;
  try {
    const result = await conn.call('session.presence', { session_id: sessionId });
    app.presenceYou = result.you ?? null;
    if (result.you && !app.myConnections.has(result.you)) {
      app.myConnections.add(result.you);
      app.whoVersion += 1;
    }
    if (app.selectedId === sessionId) app.presence = markYou(result.clients);
  } catch (error) {
    if (error instanceof RpcError && (error.code === -32601 || error.typed === 'not_implemented')) {
      // This daemon has no presence extension: no list.
      app.presenceSupported = false;
      app.presence = null;
    }
  }
  scheduleRender();
}

/** Everything about the open session except its events (which the subscription keeps up to date). */
function refreshOpenSession() {
  if (!app.selectedId) return;
  refreshTree();
  refreshApprovals();
  refreshGoal();
  watchPresence(app.selectedId);
}

/**
 * A session's own agent/model: its last run's (from its events, `state`), else its creation selection; with no
 * session, the snapshot's first agent and its first model.
 */
function defaultSelection(meta, state) {
  return pickOf(state?.lastSelection) ?? pickOf(meta?.creation_selection) ?? snapshotDefault(app.snapshot);
}

/**
 * What the pickers show and the next run (or a new session) starts with: the open session's pick, else its own
 * selection. A pick never carries over to another session, so Send runs the model the pickers show for it.
 */
function currentSelection() {
  if (app.selectedId) return app.picks.get(app.selectedId) ?? defaultSelection(app.meta, app.state);
  return app.draftPick ?? defaultSelection(null, null);
}

async function openSession(sessionId) {
  if (!sessionId) return;
  if (app.selectedId === sessionId && app.state) {
    app.sidebarOpen = false;
    scheduleRender();
    return;
  }
  if (app.follow) {
    // The daemon cannot end one subscription: a fresh connection leaves the old session behind for good.
    app.follow.stop();
    app.follow = null;
    conn.recycle();
  }
  const token = ++app.openToken;
  views.sessions.clearCreateError();
  views.changes.hide();
  app.selectedId = sessionId;
  app.sidebarOpen = false;
  app.state = null;
  app.goal = null;
  app.presence = app.presenceSupported ? [] : null;
  if (location.hash !== `#session=${sessionId}`) history.replaceState(null, '', `#session=${sessionId}`);
  scheduleRender();
  let meta;
  try {
    meta = (await conn.call('session.get', { session_id: sessionId })).session;
  } catch (error) {
    if (token !== app.openToken) return;
    if (error.code === OFFLINE) {
      // The reconnect opens it (onReady).
      app.openToken += 1;
      return;
    }
    notice(`Could not open the session: ${error.message}`);
    if (error.typed === 'session_not_found') closeSession();
    return;
  }
  if (token !== app.openToken) return;
  app.meta = meta;
  const rootId = meta.origin?.type === 'delegated' ? meta.origin.root_session_id : meta.session_id;
  if (app.rootId !== rootId) {
    app.rootId = rootId;
    app.tree = null;
    app.mode = null;
    app.approvals = new Map();
    app.resolved = new Set();
    views.approvals.clear();
  }
  app.state = createSession(meta);
  follow(meta.session_id);
  refreshOpenSession();
  scheduleRender();
}

function closeSession() {
  views.changes.hide();
  app.follow?.stop();
  app.follow = null;
  app.selectedId = null;
  app.meta = null;
  app.state = null;
  app.rootId = null;
  app.tree = null;
  app.sidebarOpen = true;
  history.replaceState(null, '', location.pathname + location.search);
  document.title = 'troupe console';
  scheduleRender();
}

function follow(sessionId) {
  const consumer = {
    events(events) {
      const state = app.state;
      if (!state || state.sessionId !== sessionId) return;
      applyEvents(state, events);
      for (const event of events) approvalEvent(event);
      if (state.treeDirty) {
        state.treeDirty = false;
        refreshTree();
      }
      if (state.goalDirty) {
        state.goalDirty = false;
        refreshGoal();
      }
      if (state.title !== app.meta?.title) updateListedTitle(sessionId, state.title);
      // A run that ended may have changed files, and an undo (from any client) put some back.
      if (events.some((e) => CHANGING_EVENTS.has(e.payload?.type))) views.changes.changed();
      if (events.some((e) => e.payload?.type?.startsWith('run_'))) {
        // The list shows the run's state at once; the daemon's index catches up a moment later.
        const status = state.activeRun ? 'running' : state.lastRunStatus;
        const last = events[events.length - 1].timestamp;
        app.sessions = app.sessions.map((s) => (s.session_id === sessionId ? { ...s, status: status ?? s.status, last_activity_at: last ?? s.last_activity_at } : s));
        setTimeout(refreshSessions, 1000);
      }
      scheduleRender();
    },
    reset() {
      if (app.state?.sessionId === sessionId) app.state = createSession(app.meta);
      scheduleRender();
    },
    lost(error) {
      if (app.selectedId !== sessionId) return;
      notice(`Stopped following this session: ${error.message}`);
      if (error.typed === 'session_not_found') {
        closeSession();
        refreshSessions();
      }
    },
  };
  app.follow = conn.follow(sessionId, 0, consumer);
}

function updateListedTitle(sessionId, title) {
  if (app.meta && app.meta.session_id === sessionId) app.meta = { ...app.meta, title };
  app.sessions = app.sessions.map((s) => (s.session_id === sessionId ? { ...s, title } : s));
}

function approvalEvent(event) {
  const p = event.payload ?? {};
  switch (p.type) {
    case 'approval_requested':
      if (p.approval.status === 'pending' && !app.resolved.has(p.approval.approval_id)) app.approvals.set(p.approval.approval_id, p.approval);
      break;
    case 'approval_user_decision_recorded':
    case 'approval_finalized':
    case 'approval_cancelled':
      app.resolved.add(p.approval_id);
      app.approvals.delete(p.approval_id);
      break;
    default:
  }
}

// ---- connection ----------------------------------------------------------------------------------------------

function onStatus(status, detail) {
  if (status === 'signed-out') {
    app.status = status;
    showSignedOut();
    return;
  }
  // The first dial is not "offline" yet; a failed one is.
  app.status = status === 'connecting' ? 'connecting' : status;
  app.retryInMs = detail?.retryInMs ?? null;
  scheduleRender();
}

function onReady() {
  // The daemon may have been upgraded while the page was away: ask for presence again.
  app.presenceSupported = true;
  app.presenceFor = null;
  refreshSessions();
  if (app.selectedId && !app.state) openSession(app.selectedId);
  else refreshOpenSession();
}

function onNotification(method, params) {
  switch (method) {
    case 'runtime.changed':
      app.snapshot = params.snapshot;
      // Whether the goal's automatic runs wait (`blocked`) depends on the runtime.
      if (app.goal) refreshGoal();
      scheduleRender();
      break;
    case 'events.tool_output_snapshot':
    case 'events.tool_output_delta':
    case 'events.tool_output_gap':
      if (app.state && applyOutputNotice(app.state, method, params)) scheduleRender();
      break;
    case 'session.presence_changed':
      if (params.session_id === app.selectedId) {
        app.presence = markYou(params.clients);
        scheduleRender();
      }
      break;
    default:
  }
}

function showSignedOut() {
  const screen = h(
    'main',
    { class: 'signed-out', 'data-testid': 'signed-out', role: 'alert' },
    h('h1', null, 'You are signed out'),
    h('p', null, 'This browser’s console sign-in has expired or was revoked.'),
    h('p', null, 'Run ', h('code', null, 'troupe open'), ' on the daemon’s machine for a new sign-in link.'),
    h('p', null, h('a', { href: './' }, 'Reload')),
  );
  fill(document.getElementById('root'), screen);
}

// ---- boot ----------------------------------------------------------------------------------------------------

function build() {
  ctx = { conn: null, app, scheduleRender, notice, refreshSessions, refreshApprovals, openSession, currentSelection, updateListedTitle };
  const { sendPrompt, recallSteer, cancelRun, sendStdin, rename, setMode, respond, createNewSession, pick } = createActs(ctx);
  const sidebar = h('aside', { class: 'sidebar', id: 'sidebar' });
  const sidebarToggle = h('button', { type: 'button', class: 'sidebar-toggle secondary small', 'aria-controls': 'sidebar', 'aria-expanded': 'true' }, 'Sessions');
  sidebarToggle.addEventListener('click', () => {
    app.sidebarOpen = !app.sidebarOpen;
    if (app.sidebarOpen && window.matchMedia('(max-width: 760px)').matches) {
      // At phone width the list replaces the page: keyboard focus goes into it (the open session's row).
      render();
      sessions.focusList();
    } else {
      scheduleRender();
    }
  });
  const signOut = h(
    'form',
    { method: 'post', action: 'logout', class: 'sign-out' },
    h('button', { type: 'submit', class: 'secondary small', 'data-testid': 'sign-out' }, 'Sign out'),
  );
  signOut.addEventListener('submit', () => {
    forgetPageKey();
    conn.stop();
  });
  const banner = createBanner(() => conn.retryNow());
  const sessions = createSessionList({
    open: (id) => {
      // The list may hide (narrow screens): keyboard focus moves on to the opened session.
      openSession(id).then(() => {
        if (!document.activeElement || document.activeElement === document.body || sidebar.contains(document.activeElement)) {
          if (window.matchMedia('(max-width: 760px)').matches) views.header.focusTitle();
        }
      });
    },
    create: createNewSession,
    filter: (text) => {
      app.filter = text;
      scheduleRender();
    },
  });
  const header = createHeader({ rename, setMode, openParent: openSession, toggleChanges });
  const changes = createChanges({ call: (method, params) => conn.call(method, params), close: () => showTranscript() });
  const tools = createTools();
  const approvals = createApprovals({ respond, focusPrompt: () => views.composer.focus() });
  const transcript = createTranscript({
    stdin: sendStdin,
    open: openSession,
    who: (answeredBy) => answeredByWords(answeredBy, app.myConnections, app.clientNames),
    attachment: (path) => conn.call('session.attachment', { session_id: app.state?.sessionId, path }),
  });
  const composer = createComposer({
    send: sendPrompt,
    recall: recallSteer,
    cancel: cancelRun,
    listFiles: (dir) => conn.call('session.files', { session_id: app.state?.sessionId, dir }),
    readFile: (path) => conn.call('session.file', { session_id: app.state?.sessionId, path }),
  });
  const pickers = createPickers({ pick });
  const noticeEl = h('p', { class: 'notice', role: 'alert', hidden: true });
  const welcome = h('div', { class: 'welcome' }, h('h1', null, 'troupe'), h('p', null, 'Pick a session on the left, or start a new one.'));
  const main = h('main', { class: 'main', id: 'main' }, header.el, approvals.el, transcript.el, changes.el, composer.el);
  sidebar.appendChild(sessions.el);
  rootEl = h(
    'div',
    { class: 'app', 'data-testid': 'app' },
    h('header', { class: 'topbar' }, sidebarToggle, h('span', { class: 'brand' }, 'troupe'), pickers.el, h('span', { class: 'spacer' }), tools.button, signOut),
    banner.el,
    noticeEl,
    tools.el,
    h('div', { class: 'layout' }, sidebar, h('div', { class: 'content' }, welcome, main)),
  );
  rootEl.addEventListener('keydown', (event) => {
    if (event.key === 'Escape' && app.sidebarOpen && app.meta && window.matchMedia('(max-width: 760px)').matches) {
      app.sidebarOpen = false;
      scheduleRender();
      sidebarToggle.focus();
    }
  });
  fill(document.getElementById('root'), rootEl);
  views = { banner, sessions, header, approvals, transcript, changes, tools, composer, pickers, notice: noticeEl, sidebarToggle, main, welcome };
}

/** The Changes view in place of the transcript (the header's "Changes"), or back. */
function toggleChanges() {
  if (views.changes.isOpen()) showTranscript();
  else if (app.selectedId) {
    views.changes.open(app.selectedId);
    // At once, not at the next frame: the button says "pressed" as the view appears (a screen reader reads both).
    render();
  }
}

function showTranscript() {
  views.changes.hide();
  render();
  views.header.focusChanges();
}

function sessionFromHash() {
  const match = /^#session=([0-9a-zA-Z-]+)$/.exec(location.hash);
  return match ? match[1] : null;
}

function boot() {
  adoptKeyFromFragment();
  build();
  conn = new Connection({
    url: socketUrl(location.href),
    sessionUrl: new URL('console/session', location.href).href,
    clientInfo: { name: 'web console', version: VERSION },
    handlers: { status: onStatus, ready: onReady, notification: onNotification },
    pageKey,
  });
  ctx.conn = conn;
  const initial = sessionFromHash();
  if (initial) {
    app.selectedId = initial;
    app.sidebarOpen = false;
  }
  window.addEventListener('hashchange', () => {
    const id = sessionFromHash();
    if (id && id !== app.selectedId) openSession(id);
  });
  setInterval(() => {
    if (app.status !== 'online' || document.hidden) return;
    refreshSessions();
    // The tree's permission mode lives only in the daemon's memory and no event carries it: another client's change
    // shows at the next read, as in the TUI.
    refreshTree();
    if (app.state?.activeRun) refreshApprovals();
  }, LIST_REFRESH_MS);
  setInterval(() => {
    // Approvals of delegated children are not in this session's events: the list catches them.
    if (app.status === 'online' && app.tree?.children?.length && app.state?.activeRun) refreshApprovals();
  }, APPROVALS_REFRESH_MS);
  render();
  conn.start();
}

boot();
