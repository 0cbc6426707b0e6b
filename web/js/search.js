// Search across chats: the box above the chat list asks the server —
// session/list with a filter, never what this page happens to have
// loaded — and while it holds a query its results replace the list.
//
// The server ANDs a filter's members, so one request with both text (the
// name) and content (the messages) would find only chats matching in
// both. A chat matching by name or by what was said is wanted: two
// requests go, each paged by its own cursor, and their rows are merged
// newest first (both come newest first), a chat found by both once,
// with its snippet. Rows are only shown up to the oldest row every
// stream with more pages has reached, so a later page never belongs
// above a row already shown.

import { announce, openDrawer, phone } from './chrome.js';
import { $, el } from './dom.js';
import { rpc } from './rpc.js';
import { openChat, titleOf } from './sessions.js';
import { app, ui } from './state.js';
import { ago } from './words.js';

const box = $('search');
const status = $('search-status');
const results = $('search-results');
const heading = $('sessions-heading');

// How long typing must pause before a search goes, and rows a page.
const DEBOUNCE_MS = 200;
const PAGE = 20;

/**
 * A query's state: idle (no query: the chat list shows), waiting (the
 * debounce runs), loading (a page is asked for), shown (rows are on
 * screen, maybe more to page), failed (the error is said).
 */
const State = { idle: 'idle', waiting: 'waiting', loading: 'loading', shown: 'shown', failed: 'failed' };

let search = { state: State.idle }; // the query on screen, replaced by each new one
let timer = null;

/** terms splits what was typed into the words the server matches as prefixes. */
export function terms(text) {
  return text.trim().split(/\s+/u).filter(Boolean);
}

/**
 * Stream is one of a query's two requests (by name, by content): its
 * rows not yet shown, and the cursor of its next page (null: no more).
 */
class Stream {
  constructor(filter) {
    this.filter = filter;
    this.buffer = [];
    this.cursor = undefined; // undefined: not asked yet
    this.applied = null; // the appliedFilter the server echoed
  }

  get more() {
    return this.cursor !== null;
  }

  async fetch() {
    const params = { filter: this.filter, limit: PAGE };
    if (this.cursor) params.cursor = this.cursor;
    const res = await rpc.call('session/list', params);
    this.buffer.push(...res.sessions);
    // A page that brings nothing and the same cursor would loop: stop.
    const next = res.nextCursor || null;
    this.cursor = !res.sessions.length && next === this.cursor ? null : next;
    this.applied = res.appliedFilter || this.filter;
  }
}

/** start begins a new query (or none), dropping the one on screen. */
function start(text) {
  clearTimeout(timer);
  const words = terms(text);
  if (!words.length) {
    search = { state: State.idle };
    show(false);
    return;
  }
  search = {
    state: State.waiting,
    text,
    streams: [
      new Stream({ text: { fields: ['name'], allOf: words } }),
      new Stream({ content: { allOf: words } }),
    ],
    shown: new Map(), // sessionId → its row's parts
    count: 0,
  };
  show(true);
  const q = search;
  timer = setTimeout(() => more(q).catch((err) => failed(q, err)), DEBOUNCE_MS);
}

/** show swaps the chat list for the results, or back. */
function show(searching) {
  results.hidden = !searching;
  status.hidden = !searching;
  ui.sessions.hidden = searching;
  heading.hidden = searching;
  if (!searching) {
    results.replaceChildren();
    status.textContent = '';
  }
}

/** more fetches the next pages a query needs and shows what they allow. */
async function more(q) {
  if (q !== search || q.state === State.loading) return;
  q.state = State.loading;
  if (!q.count) status.textContent = 'Searching…';
  for (;;) {
    const need = q.streams.filter((s) => s.more && !s.buffer.length);
    if (!need.length) break;
    await Promise.all(need.map((s) => s.fetch()));
    if (q !== search) return;
    if (drain(q)) break; // a row came: enough until the reader scrolls
  }
  drain(q);
  q.state = State.shown;
  sayCount(q);
  watchEnd(q);
}

/**
 * drain shows the merged rows the streams allow: while every stream
 * with more pages still holds a row, the newest head goes next. It
 * returns how many rows it added.
 */
function drain(q) {
  let added = 0;
  for (;;) {
    if (q.streams.some((s) => s.more && !s.buffer.length)) break;
    const heads = q.streams.filter((s) => s.buffer.length);
    if (!heads.length) break;
    const next = heads.reduce((a, b) => ((b.buffer[0].updatedAt || '') > (a.buffer[0].updatedAt || '') ? b : a));
    if (addRow(q, next.buffer.shift())) added++;
  }
  return added;
}

/** addRow shows a found chat, or adds a snippet to its row; true when new. */
function addRow(q, s) {
  const names = nameTerms(q);
  const contents = contentTerms(q);
  const snippet = s.match && s.match.snippet;
  const had = q.shown.get(s.sessionId);
  if (had) {
    if (snippet && !had.snippet.textContent) {
      had.snippet.replaceChildren(...marked(snippet, contents));
      had.snippet.hidden = false;
    }
    return false;
  }
  const li = el('li');
  const row = el('div', 'session-row');
  row.dataset.row = s.sessionId;
  const open = el('button', 'session result');
  open.type = 'button';
  open.dataset.sessionId = s.sessionId;
  open.dataset.role = 'open';
  const title = el('span', 'session-title');
  title.append(...marked(titleOf(s), names));
  const snip = el('span', 'result-snippet');
  snip.hidden = !snippet;
  if (snippet) snip.append(...marked(snippet, contents));
  open.append(title, snip, el('span', 'session-meta', ago(s.updatedAt)));
  open.title = titleOf(s);
  open.addEventListener('click', () => openChat(s.sessionId));
  row.append(open);
  li.append(row);
  if (s.sessionId === app.current) row.toggleAttribute('data-current', true);
  if (s.sessionId === app.current) open.setAttribute('aria-current', 'page');
  results.append(li);
  q.shown.set(s.sessionId, { row, snippet: snip });
  q.count++;
  return true;
}

// The canonical terms the server applied (its appliedFilter), which the
// marks follow; what was typed until it answered.
const nameTerms = (q) => {
  const f = q.streams[0].applied || q.streams[0].filter;
  return (f.text && f.text.allOf) || [];
};
const contentTerms = (q) => {
  const f = q.streams[1].applied || q.streams[1].filter;
  return (f.content && (f.content.allOf || f.content.anyOf)) || [];
};

// A token is letters, digits and their marks, as the server splits text.
const TOKEN = /[\p{L}\p{N}\p{M}]+/gu;
const canonical = (s) => s.trim().toLowerCase().normalize('NFC');

/**
 * marked splits text into nodes, each word a term begins in a <mark>:
 * text nodes and textContent only, never markup. A term of several words
 * marks each word that one of its words begins (the server matched them
 * in a row; marking each is close enough to show why).
 */
export function marked(text, words) {
  const heads = words.flatMap((w) => canonical(w).match(TOKEN) || []);
  const out = [];
  let last = 0;
  for (const m of text.matchAll(TOKEN)) {
    const token = canonical(m[0]);
    if (!heads.some((h) => token.startsWith(h))) continue;
    if (m.index > last) out.push(document.createTextNode(text.slice(last, m.index)));
    out.push(el('mark', null, m[0]));
    last = m.index + m[0].length;
  }
  if (last < text.length) out.push(document.createTextNode(text.slice(last)));
  return out;
}

/** sayCount words the results: how many, and whether more may follow. */
function sayCount(q) {
  const more = q.streams.some((s) => s.more);
  if (!q.count) status.textContent = 'No chats match';
  else if (more) status.textContent = `${q.count}+ chats match · scroll for more`;
  else status.textContent = q.count === 1 ? '1 chat matches' : `${q.count} chats match`;
}

// The end of the results: when it scrolls into view the next pages come.
const end = el('li', 'search-end');
end.setAttribute('aria-hidden', 'true');
const watcher = new IntersectionObserver((entries) => {
  if (entries.some((e) => e.isIntersecting) && search.state === State.shown && search.streams.some((s) => s.more)) {
    const q = search;
    more(q).catch((err) => failed(q, err));
  }
});

/** watchEnd puts the end marker last; observing anew reports it at once. */
function watchEnd(q) {
  if (q !== search) return;
  watcher.unobserve(end);
  if (!q.streams.some((s) => s.more)) {
    end.remove();
    return;
  }
  results.append(end);
  watcher.observe(end);
}

/** failed says why a search failed, in words, in place of its results. */
function failed(q, err) {
  if (q !== search) return;
  q.state = State.failed;
  status.textContent = searchError(err);
  announce(status.textContent);
}

/** searchError words a failed session/list by its error kind. */
export function searchError(err) {
  switch (err && err.kind) {
    case 'disconnected': return 'Offline: the search runs again once reconnected.';
    case 'invalidParams': return 'That search is too long: use at most 16 words, each under 128 letters.';
    case 'unauthorized': case 'forbidden': return 'The server refused the search: sign in again.';
    case 'overloaded': case 'backpressured': return 'The server is busy: the search did not run. Try again in a moment.';
    default: return `The search failed: ${(err && err.message) || String(err)}${err && err.kind ? ` (${err.kind})` : ''}.`;
  }
}

/** searchAgain reruns the query on screen (after a reconnect). */
export function searchAgain() {
  if (search.state === State.idle) return;
  start(box.value);
}

/** focusSearch brings the search box up (out of the drawer on a phone). */
function focusSearch() {
  if (phone.matches && ui.app.dataset.drawer !== 'open') openDrawer();
  box.focus();
  box.select();
}

/** typing tells whether a key press is going into a text field. */
function typing(target) {
  return target instanceof HTMLElement && (target.isContentEditable ||
    target.matches('textarea, select, input:not([type=button], [type=checkbox], [type=radio], [type=submit])'));
}

/** resultButtons are the result rows' buttons, in order. */
const resultButtons = () => [...results.querySelectorAll('button.session')];

/** startSearch wires the search box and its keys. */
export function startSearch() {
  box.addEventListener('input', () => start(box.value));
  box.addEventListener('keydown', (ev) => {
    if (ev.key === 'Escape' && box.value) {
      // Esc clears the query first; an empty box lets Esc through (to
      // close the drawer, or stop an answer).
      ev.preventDefault();
      box.value = '';
      start('');
    } else if (ev.key === 'ArrowDown') {
      const first = resultButtons()[0];
      if (first) {
        ev.preventDefault();
        first.focus();
      }
    } else if (ev.key === 'Enter') {
      ev.preventDefault();
      const first = resultButtons()[0];
      if (first) first.focus();
    }
  });
  results.addEventListener('keydown', (ev) => {
    if (ev.key !== 'ArrowDown' && ev.key !== 'ArrowUp') return;
    const all = resultButtons();
    const i = all.indexOf(document.activeElement);
    if (i < 0) return;
    ev.preventDefault();
    if (ev.key === 'ArrowUp' && i === 0) box.focus();
    else (all[ev.key === 'ArrowDown' ? Math.min(i + 1, all.length - 1) : i - 1]).focus();
  });
  document.addEventListener('keydown', (ev) => {
    if (ev.defaultPrevented || ev.altKey) return;
    const slash = ev.key === '/' && !ev.ctrlKey && !ev.metaKey && !typing(ev.target);
    const k = (ev.key === 'k' || ev.key === 'K') && (ev.ctrlKey || ev.metaKey) && !ev.shiftKey;
    if (!slash && !k) return;
    if (document.querySelector('dialog[open]')) return;
    ev.preventDefault();
    focusSearch();
  });
}
