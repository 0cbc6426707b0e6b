// The chat list: starting and entering a chat, the list kept live
// (session/listChanged, or session/list), each fork under its origin,
// rename and delete in place, leaving a deleted chat.

import { announce, catching, closeDrawer, hideError, showError } from './chrome.js';
import { syncCompact } from './context.js';
import { button, el, uuidv7 } from './dom.js';
import { syncInstructionsButton } from './instructions.js';
import { loadModels } from './models.js';
import { setTabTitle, showInURL } from './route.js';
import { command, rpc, RpcError } from './rpc.js';
import { effortOf, setEffort, showApprovalMode, showEffort } from './settings.js';
import { app, ui } from './state.js';
import { resetTranscript } from './transcript.js';
import { ago } from './words.js';

/** enter makes a session just created here (started or forked) current. */
export function enter(session, viewCursor, instructions) {
  const previous = app.current;
  if (previous && previous !== session.sessionId) {
    rpc.call('view/unsubscribe', { sessionId: previous }).catch(() => {});
  }
  app.epoch++;
  app.buffer = null;
  app.current = session.sessionId;
  app.cursors.set(session.sessionId, viewCursor);
  app.stale = false;
  app.instructions = instructions || '';
  resetTranscript();
  showInURL(session.sessionId);
  upsertSession(session);
  syncInstructionsButton();
  syncCompact();
}

/** newChat starts a chat, with the next chat's instructions unless given others. */
export async function newChat(instructions = app.nextInstructions) {
  const params = { commandId: uuidv7() };
  if (instructions) params.config = { instructions };
  if (app.nextModel) {
    params.providerId = app.nextModel.providerId;
    params.modelId = app.nextModel.modelId;
  }
  if (app.nextApprovalMode) params.approvalMode = app.nextApprovalMode;
  // Not queued offline: the banner says so and nothing waits unseen.
  const res = await rpc.call('session/start', params);
  enter(res.session, res.viewCursor, instructions);
  // session/start takes no reasoning effort: the next chat's is set
  // before its first message.
  if (app.nextEffort) {
    await setEffort(res.session.sessionId, app.nextEffort);
    if (app.current === res.session.sessionId) showEffort(app.nextEffort);
  }
  loadModels().catch(() => {});
  closeDrawer();
  ui.input.focus();
  return res.session.sessionId;
}

let refreshTimer = null;

export function refreshSessionsSoon() {
  clearTimeout(refreshTimer);
  refreshTimer = setTimeout(() => refreshSessions().catch(() => {}), 250);
}

export async function refreshSessions() {
  const res = await rpc.call('session/list', { limit: 50 });
  const keep = new Map();
  for (const s of res.sessions) keep.set(s.sessionId, s);
  // The list may lag a session just created here: keep that one.
  if (app.current && app.sessions.has(app.current) && !keep.has(app.current)) {
    keep.set(app.current, app.sessions.get(app.current));
  }
  app.sessions = keep;
  renderSessions();
}

/** upsertSession takes a Session object the server sent. */
export function upsertSession(s) {
  if (!s || !s.sessionId) return;
  app.sessions.set(s.sessionId, s);
  if (s.sessionId === app.current && s.approvalMode) showApprovalMode(s.approvalMode.mode);
  if (s.sessionId === app.current) showEffort(effortOf(s));
  renderSessions();
}

/** patchSession changes a few fields of a known session. */
export function patchSession(sessionId, fields) {
  const s = app.sessions.get(sessionId);
  if (!s) return;
  app.sessions.set(sessionId, { ...s, ...fields });
  renderSessions();
}

const ownTitle = (s) => (s && (s.name || s.title || s.firstUserPrompt)) || 'New chat';

/**
 * titleOf is a chat's title as the page shows it. A fork copies its
 * origin's name and first prompt, so a fork still titled as its origin
 * (or whose origin is not listed here to compare) is marked "(branch)":
 * the mark comes from session.forkedFrom, so it holds after a reload and
 * in every tab, and a fork renamed to a title of its own shows just that.
 */
export function titleOf(s) {
  const own = ownTitle(s);
  const from = s && s.forkedFrom && s.forkedFrom.sessionId;
  if (!from) return own;
  const origin = app.sessions.get(from);
  return origin && ownTitle(origin) !== own ? own : `${own} (branch)`;
}

/**
 * renderSessions draws the chat list, newest first, each fork under the
 * chat it branched from. An open rename or delete form holds it still.
 */
function renderSessions() {
  ui.title.textContent = app.current ? titleOf(app.sessions.get(app.current)) : 'New chat';
  ui.title.title = ui.title.textContent; // a long one is cut short on screen
  setTabTitle(ui.title.textContent);
  if (app.listHold) {
    app.listDirty = true;
    return;
  }
  app.listDirty = false;
  const children = new Map(); // parent sessionId ('' for roots) → Sessions
  for (const s of app.sessions.values()) {
    const from = s.forkedFrom && s.forkedFrom.sessionId;
    const parent = from && app.sessions.has(from) ? from : '';
    if (!children.has(parent)) children.set(parent, []);
    children.get(parent).push(s);
  }
  // A tree sorts by its newest member, so a busy fork lifts its origin.
  const newest = (s) => (children.get(s.sessionId) || [])
    .reduce((m, c) => (newest(c) > m ? newest(c) : m), s.updatedAt || '');
  const build = (parent) => (children.get(parent) || [])
    .map((s) => [newest(s), s])
    .sort((a, b) => b[0].localeCompare(a[0]))
    .map(([, s]) => {
      const li = sessionEntry(s);
      if (children.has(s.sessionId)) {
        const ul = el('ul');
        ul.setAttribute('aria-label', `Branches of ${titleOf(s)}`);
        ul.append(...build(s.sessionId));
        li.append(ul);
      }
      return li;
    });
  const focused = document.activeElement;
  const row = focused && focused.closest && focused.closest('#sessions [data-row]');
  const restore = row && [row.dataset.row, focused.dataset.role];
  ui.sessions.replaceChildren(...build(''));
  markCurrent();
  if (restore) {
    const again = ui.sessions.querySelector(`[data-row="${CSS.escape(restore[0])}"] [data-role="${restore[1]}"]`);
    if (again) again.focus();
  }
}

/**
 * chatListActions are what the chat list does beyond itself: open a chat
 * (view.js's openSession). main.js sets it: view.js keeps this list up to
 * date, so this module cannot import it.
 */
export const chatListActions = { open: null };

/** openChat opens a chat picked from the list or the search results. */
export function openChat(sessionId) {
  hideError();
  closeDrawer();
  chatListActions.open(sessionId).catch(showError);
}

function sessionEntry(s) {
  const li = el('li');
  const row = el('div', 'session-row');
  row.dataset.row = s.sessionId;
  const open = el('button', 'session');
  open.type = 'button';
  open.dataset.sessionId = s.sessionId;
  open.dataset.role = 'open';
  const title = titleOf(s);
  open.append(el('span', 'session-title', title));
  const meta = el('span', 'session-meta', ago(s.updatedAt));
  if (s.forkedFrom) meta.prepend('branch · ');
  if (s.status === 'running') meta.prepend(el('span', 'dot', '● '));
  open.append(meta);
  open.title = title;
  open.addEventListener('click', () => openChat(s.sessionId));
  const rename = button('row-action rename', '', `Rename “${title}”`);
  rename.dataset.role = 'rename';
  rename.addEventListener('click', () => startRename(row, s));
  const del = button('row-action delete', '', `Delete “${title}”`);
  del.dataset.role = 'delete';
  del.addEventListener('click', () => confirmDelete(row, s));
  row.append(open, rename, del);
  li.append(row);
  return li;
}

export function markCurrent() {
  // The drawer's rows: the chat list's and the search results'.
  for (const row of ui.drawer.querySelectorAll('[data-row]')) {
    const current = row.dataset.row === app.current;
    row.toggleAttribute('data-current', current);
    const open = row.querySelector('button.session');
    if (current) open.setAttribute('aria-current', 'page');
    else open.removeAttribute('aria-current');
  }
}

/** holdRow swaps a list row's content for a form until done() is called. */
function holdRow(row, form, focus) {
  const saved = [...row.childNodes];
  app.listHold = row;
  row.replaceChildren(form);
  focus.focus();
  return (refocus) => {
    app.listHold = null;
    row.replaceChildren(...saved);
    if (app.listDirty) renderSessions();
    if (refocus) {
      const target = ui.sessions.querySelector(`[data-row="${CSS.escape(row.dataset.row)}"] [data-role="${refocus}"]`);
      if (target) target.focus();
    }
  };
}

function startRename(row, s) {
  const form = el('form', 'row-form');
  const input = el('input');
  input.value = titleOf(s);
  input.maxLength = 200;
  input.setAttribute('aria-label', 'Chat name');
  const save = el('button', 'small primary', 'Save');
  save.type = 'submit';
  const cancel = button('small', 'Cancel');
  form.append(input, save, cancel);
  const done = holdRow(row, form, input);
  // Select it all with the caret at the start, so that a long name shows
  // its first words rather than its last.
  input.setSelectionRange(0, input.value.length, 'backward');
  input.scrollLeft = 0;
  form.addEventListener('submit', catching(async (ev) => {
    ev.preventDefault();
    const name = input.value.trim();
    if (!name || name === titleOf(s)) return done('rename');
    save.disabled = true;
    try {
      const res = await command('session/rename', { commandId: uuidv7(), sessionId: s.sessionId, name });
      done('rename');
      patchSession(s.sessionId, { name: res.name || name });
    } catch (err) {
      save.disabled = false;
      throw err;
    }
  }));
  cancel.addEventListener('click', () => done('rename'));
  form.addEventListener('keydown', (ev) => {
    if (ev.key === 'Escape') {
      ev.preventDefault();
      done('rename');
    }
  });
}

function confirmDelete(row, s) {
  const form = el('form', 'row-form');
  form.append(el('p', null, `Delete “${titleOf(s)}”? This cannot be undone.`));
  const yes = el('button', 'small danger', 'Delete');
  yes.type = 'submit';
  const no = button('small', 'Cancel');
  form.append(yes, no);
  const done = holdRow(row, form, no);
  form.addEventListener('submit', catching(async (ev) => {
    ev.preventDefault();
    yes.disabled = true;
    no.disabled = true;
    yes.textContent = 'Deleting…';
    // session/deleteCompleted settles it (see deleteCompleted), even
    // before the admission's answer arrives.
    app.deleting.set(s.sessionId, done);
    try {
      await command('session/delete', { commandId: uuidv7(), sessionId: s.sessionId });
    } catch (err) {
      app.deleting.delete(s.sessionId);
      done('delete');
      throw err;
    }
  }));
  no.addEventListener('click', () => done('delete'));
  form.addEventListener('keydown', (ev) => {
    if (ev.key === 'Escape' && !yes.disabled) {
      ev.preventDefault();
      done('delete');
    }
  });
}

/**
 * deleteCompleted ends a deletion: the chat goes, or says why not. A
 * deletion made elsewhere (another tab, window or client) just removes
 * the chat from the list; if it was the chat on screen, the page says so
 * and shows a new chat.
 */
export function deleteCompleted(p) {
  const done = app.deleting.get(p.sessionId);
  app.deleting.delete(p.sessionId);
  const title = titleOf(app.sessions.get(p.sessionId));
  const deleted = p.outcome === 'completed';
  if (!deleted && !done) return; // another tab's failure is that tab's to say
  if (deleted) app.sessions.delete(p.sessionId);
  if (done) done(deleted ? null : 'delete');
  if (deleted) {
    // A rename form open on the chat has nothing left to rename.
    if (app.listHold && app.listHold.dataset.row === p.sessionId) app.listHold = null;
    if (app.current === p.sessionId) leaveSession(done ? '' : DELETED_ELSEWHERE);
    renderSessions();
    if (done) {
      announce(`Deleted “${title}”.`);
      ui.newChat.focus();
    } else if (!app.current) {
      announce(DELETED_ELSEWHERE);
    }
    return;
  }
  // Any outcome but completed (failed, or one this page does not know)
  // leaves the chat in place.
  showError(new RpcError(`deleting “${title}” failed${p.reason ? `: ${p.reason}` : ''}`, p.reason, 'session/delete'));
}

// What the page says when the chat on screen was deleted somewhere else.
const DELETED_ELSEWHERE = 'This chat was deleted in another tab or window.';

/**
 * leaveSession shows a new chat in place of the current one, which was
 * deleted or is not there; note, if any, says why in the empty transcript.
 */
export function leaveSession(note) {
  app.epoch++;
  app.buffer = null;
  app.current = null;
  showInURL(null, true);
  app.instructions = '';
  syncInstructionsButton();
  resetTranscript(note);
  renderSessions();
  showApprovalMode(app.nextApprovalMode || 'promptUnmatched');
  showEffort(app.nextEffort);
  syncCompact();
  loadModels().catch(() => {});
}
