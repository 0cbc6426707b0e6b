// The chat on screen: opening it (session/resume) and replaying its log
// (view/page), then applying its live view events in order, filling any
// gap; the notifications that are not a chat's (the list's) are handed on.

import { approvalResolved, showApproval, showPending } from './approvals.js';
import { announce, showError } from './chrome.js';
import { upsertCompaction } from './compaction.js';
import { showContext, syncCompact } from './context.js';
import { countUsage } from './cost.js';
import { uuidv7 } from './dom.js';
import { jumpToEnd } from './follow.js';
import { syncInstructionsButton } from './instructions.js';
import { loadModels, refreshModelsSoon, selectModel } from './models.js';
import { upsertReasoning } from './reasoning.js';
import { showInURL } from './route.js';
import { rpc } from './rpc.js';
import { deleteCompleted, leaveSession, markCurrent, patchSession, refreshSessionsSoon, upsertSession } from './sessions.js';
import { showApprovalMode, showEffort } from './settings.js';
import { app, ui } from './state.js';
import { upsertTool } from './tools.js';
import { discardOpenAnswers, rekey, resetTranscript, setRunning, turnView, upsertMessage } from './transcript.js';
import { linkVersion } from './versions.js';
import { fallbackWords, kindWords, plural, sentence, skippedWords } from './words.js';

/** upsertItem shows an item, replacing an older revision of it. */
function upsertItem(item, live) {
  if (item.kind === 'toolCall') {
    upsertTool(item);
    return;
  }
  if (item.kind === 'reasoning') {
    upsertReasoning(item);
    return;
  }
  if (item.kind === 'compaction') {
    upsertCompaction(item, live);
    return;
  }
  upsertMessage(item);
}

function appendDelta(p) {
  if (p.field === 'output') {
    // A tool call's output, streamed (MSP's visibleOutput delta).
    const tool = app.tools.get(p.itemId);
    if (tool) tool.appendOutput(p.delta);
    return;
  }
  const part = /^summary\.(\d{1,4})$/.exec(p.field || '');
  if (part) {
    // Part n of a reasoning item's summary.
    if (!app.reasoning.has(p.itemId)) {
      // Its item/started was lost (a gap): open it now, below any real revision.
      upsertReasoning({ itemId: p.itemId, kind: 'reasoning', revision: 0.5, status: 'inProgress', turnId: app.running });
    }
    const view = app.reasoning.get(p.itemId);
    // Deltas after the authoritative end are stale.
    if (view.item.status === 'inProgress') view.append(Number(part[1]), p.delta);
    return;
  }
  if (p.field && p.field !== 'text') return;
  if (!app.items.has(p.itemId)) {
    // Its item/started was lost (a gap): open it now, below any real
    // revision, so that the item's own events still replace it.
    upsertItem({ itemId: p.itemId, kind: 'agentMessage', revision: 0.5, status: 'inProgress', turnId: app.running });
  }
  const view = app.items.get(p.itemId);
  // Deltas after the authoritative item/completed are stale.
  if (view.item.status === 'inProgress') view.append(p.delta);
}

/**
 * onRequest answers a server request: approval/request of the chat on
 * screen gets its receipt (an empty result) and its card; anything else
 * is refused, and stays pending for another client.
 */
export function onRequest(method, params) {
  if (method !== 'approval/request') {
    throw Object.assign(new Error(`${method} is not supported by this client`), { code: -32601, kind: 'methodNotFound' });
  }
  if (params.sessionId !== app.current) {
    throw Object.assign(new Error('that chat is not on screen here'), { code: -32603, kind: 'internal' });
  }
  if (app.buffer) app.buffer.push([method, params]);
  else apply(method, params, false);
  return {};
}

function addRetry(p, model, emittedAtMs) {
  if (p.viewCursor && app.notices.has(p.viewCursor)) return; // a replay
  if (p.viewCursor) app.notices.add(p.viewCursor);
  discardOpenAnswers(p.turnId);
  const tv = turnView(p.turnId);
  tv.retryStatus().schedule(p, model, emittedAtMs);
  if (model && p.fallback) {
    if (emittedAtMs) { // live: say it, and show the breakers as they are now
      announce(`${fallbackWords(p).replace(' · a', '. A')}.`);
      refreshModelsSoon();
    }
    return;
  }
  const why = model ? kindWords(p.errorKind) : p.reason;
  if (emittedAtMs) { // live: say it
    const secs = Math.max(1, Math.ceil(p.retryDelayMs / 1000));
    announce(`${sentence(why)}. Retrying in ${plural(secs, 'second')}, attempt ${p.nextAttempt} of ${p.maxAttempts}.`);
  }
}

/** addSkip shows turn/providerSkipped on its turn's status. */
function addSkip(p, emittedAtMs) {
  if (p.viewCursor && app.notices.has(p.viewCursor)) return; // a replay
  if (p.viewCursor) app.notices.add(p.viewCursor);
  turnView(p.turnId).retryStatus().skipped(p);
  if (emittedAtMs) {
    announce(`${skippedWords(p).replace(' · a', '. A')}.`);
    refreshModelsSoon();
  }
}

function completeTurn(p) {
  discardOpenAnswers(p.turnId);
  const tv = turnView(p.turnId);
  tv.end(p);
  if (app.running === p.turnId) setRunning(null);
  // A session/compact's turn has no footer: its divider says how it
  // went, and was announced as it ended.
  if (tv.footer) announce(p.terminal === 'completed' ? 'Answer complete.' : tv.footer.querySelector('.turn-status').textContent);
  if (!app.listStream) refreshSessionsSoon();
}

// View notifications of the current session, by method. Each is
// idempotent (items replace by revision, retry notices are keyed by
// cursor, footers are set), so a replayed event does no harm.
const handlers = {
  'turn/started': (p) => {
    rekey(p.commandId, p.turnId);
    turnView(p.turnId).markCompaction();
    if (p.regenerates) linkVersion(turnView(p.turnId), p.regenerates); // a new version of an answer
    setRunning(p.turnId);
  },
  'item/started': (p, at) => upsertItem(p.item, !!at),
  'item/updated': (p, at) => upsertItem(p.item, !!at),
  'item/completed': (p, at) => upsertItem(p.item, !!at),
  'item/delta': appendDelta,
  'turn/modelRetryScheduled': (p, at) => addRetry(p, true, at),
  'turn/retryScheduled': (p, at) => addRetry(p, false, at),
  'turn/providerSkipped': addSkip,
  'session/tokenUsage': (p) => {
    if (!p.turnId) return;
    const tv = turnView(p.turnId);
    tv.answered(p.modelId);
    countUsage(tv, p);
  },
  'turn/completed': completeTurn,
  'turn/unqueued': (p) => turnView(p.turnId).unqueued(),
  'session/nameChanged': (p) => patchSession(p.sessionId, { name: p.name }),
  'session/modelChanged': (p) => {
    app.askedModel = p.modelId || null;
    patchSession(p.sessionId, { modelId: p.modelId, providerId: p.providerId ?? null });
    selectModel(p.providerId, p.modelId);
  },
  'session/reasoningEffortChanged': (p) => {
    const s = app.sessions.get(p.sessionId);
    if (s) app.sessions.set(p.sessionId, { ...s, reasoningEffort: { reasoningEffort: p.reasoningEffort, source: p.source } });
    showEffort(p.reasoningEffort);
  },
  'session/contextUsage': (p, at) => showContext(p, !!at),
  'session/approvalModeChanged': (p) => {
    const s = app.sessions.get(p.sessionId);
    if (s) app.sessions.set(p.sessionId, { ...s, approvalMode: { ...s.approvalMode, mode: p.mode, source: p.source } });
    showApprovalMode(p.mode);
  },
  'approval/requested': (p) => showApproval(p, false),
  // The server presents a pending approval (live, and again to each
  // subscription): its params are approval/requested's.
  'approval/request': (p) => showApproval(p, true),
  'approval/resolved': approvalResolved,
};

/** apply renders one view event; live ones advance the session's cursor. */
function apply(method, params, live = true, emittedAtMs = undefined) {
  // approval/request repeats an event's params, cursor and all: it
  // moves no cursor.
  if (live && params.viewCursor && method !== 'approval/request') app.cursors.set(params.sessionId, params.viewCursor);
  const handler = handlers[method];
  // Keeping the end in view as the transcript grows is follow.js's.
  if (handler) handler(params, live ? emittedAtMs : undefined);
}

export function onNotification(method, params, emittedAtMs) {
  switch (method) {
    case 'session/started':
    case 'session/listChanged':
      upsertSession(params.session);
      return;
    case 'session/deleteCompleted':
      deleteCompleted(params);
      return;
    case 'session/statusChanged':
    case 'session/closed':
      if (!app.listStream) refreshSessionsSoon();
      break;
    default:
  }
  if (params.sessionId !== app.current) return;
  if (app.buffer) {
    app.buffer.push([method, params, emittedAtMs]);
  } else if (method === 'view/gap') {
    app.buffer = [[method, params]];
    drain(app.epoch).catch(showError);
  } else {
    apply(method, params, true, emittedAtMs);
  }
}

/** drain applies held events in order, filling any gap among them. */
async function drain(epoch) {
  while (epoch === app.epoch && app.buffer && app.buffer.length) {
    const [method, params, emittedAtMs] = app.buffer.shift();
    if (method !== 'view/gap') {
      apply(method, params, true, emittedAtMs);
    } else if (!(await fillGap(params, epoch))) {
      return;
    }
  }
  if (epoch === app.epoch) app.buffer = null;
}

/**
 * fillGap pages the durable events the server could not deliver, from
 * after up to next, and applies them in order. When that fails the view
 * is rebuilt from a fresh resume.
 */
async function fillGap({ sessionId, after, next }, epoch) {
  let cursor = after;
  try {
    for (;;) {
      const page = await rpc.call('view/page', { sessionId, cursor, limit: 200 });
      if (epoch !== app.epoch) return false;
      for (const ev of page.events) {
        apply(ev.method, ev.params, false);
        if (ev.params.viewCursor === next) return true;
      }
      if (page.nextCursor == null) return true;
      if (!page.events.length || page.nextCursor === cursor) throw new Error('view/page made no progress');
      cursor = page.nextCursor;
    }
  } catch (err) {
    if (epoch !== app.epoch) return false;
    app.stale = true;
    if (rpc.ready) openSession(sessionId); // otherwise on reconnect
    return false;
  }
}

/**
 * pageHistory replays a whole session's durable view through the live
 * handlers (all idempotent), so a reopened chat shows what a watcher saw:
 * messages, retry statuses and turn footers.
 */
async function pageHistory(sessionId, epoch) {
  let cursor;
  for (;;) {
    const params = { sessionId, limit: 200 };
    if (cursor) params.cursor = cursor;
    const page = await rpc.call('view/page', params);
    if (epoch !== app.epoch) return;
    page.events.forEach((ev) => apply(ev.method, ev.params, false));
    if (page.nextCursor == null || !page.events.length || page.nextCursor === cursor) return;
    cursor = page.nextCursor;
  }
}

/**
 * openSession shows a session: without a cursor it renders the history
 * afresh; with one (a reconnect) the server replays exactly what was
 * missed after it.
 */
export async function openSession(sessionId, cursor) {
  const epoch = ++app.epoch;
  const previous = app.current;
  if (previous && previous !== sessionId) {
    rpc.call('view/unsubscribe', { sessionId: previous }).catch(() => {});
  }
  app.current = sessionId;
  app.buffer = []; // live events wait until the history is in place
  markCurrent();
  showInURL(sessionId);
  const params = { commandId: uuidv7(), sessionId };
  if (cursor) params.cursor = cursor;
  else {
    // The transcript is rebuilt from the log itself (below), so that old
    // turns keep their retry statuses and footers: no inline items needed.
    params.excludeItems = true;
    resetTranscript();
  }
  let res;
  try {
    res = await rpc.call('session/resume', params);
  } catch (err) {
    if (epoch !== app.epoch) return;
    app.buffer = null;
    if (err.kind === 'disconnected') {
      app.stale = app.stale || !cursor; // the next connection resumes
    } else if (cursor) {
      openSession(sessionId); // the cursor cannot be served: start over
    } else if (err.kind === 'sessionNotFound' || err.kind === 'invalidParams') {
      missingChat();
    } else {
      showError(err);
    }
    return;
  }
  if (epoch !== app.epoch) return;
  app.instructions = (res.config && res.config.instructions) || '';
  syncInstructionsButton();
  upsertSession(res.session);
  showContext(res.contextUsage || null);
  syncCompact();
  if (!cursor) loadModels().catch(() => {});
  await showHistory(sessionId, res, !cursor, epoch);
  // The approvals waiting for a person, as the server lists them (the
  // history shows them too, and the server presents each again).
  if (epoch === app.epoch && (res.pendingRequests || []).some((r) => r.kind === 'approval')) {
    await showPending(sessionId, epoch);
  }
}

/**
 * missingChat leaves a chat the server does not know for this reader (an
 * address from another account, a deleted chat, a mistyped id): mspd
 * answers the same for a chat that never was and for another's, and so
 * does the page, falling back to New chat.
 */
function missingChat() {
  leaveSession();
  showError(new Error('This chat does not exist or is not yours.'));
}

/**
 * leaveChat shows no chat (Back to the page's own address): the chat
 * left stops streaming here.
 */
export function leaveChat() {
  if (app.current && rpc.ready) rpc.call('view/unsubscribe', { sessionId: app.current }).catch(() => {});
  leaveSession();
}

/**
 * showHistory renders a freshly opened (resumed or forked) session from
 * its log, then lets the held live events through.
 */
export async function showHistory(sessionId, res, fresh, epoch) {
  try {
    if (fresh) {
      app.cursors.set(sessionId, res.viewCursor);
      await pageHistory(sessionId, epoch);
      jumpToEnd();
    }
  } catch (err) {
    if (epoch !== app.epoch) return;
    // Live events must not wait on a history that will not come: let
    // them through, and reopen from scratch on the next connection.
    app.buffer = null;
    app.stale = true;
    if (err.kind !== 'disconnected') showError(err);
    return;
  }
  app.stale = false;
  setRunning(res.session.activeTurnId);
  await drain(epoch);
}
