// Copying and exporting: Copy in an answer's footer puts the answer's
// Markdown on the clipboard as the model wrote it (the source each
// ItemView keeps, not the rendered text); the header's Export menu saves
// the chat on screen as Markdown, or its durable log as the server gives
// it (every page of view/page, one JSON array). Files are downloads of
// Blob URLs made here, revoked once used; nothing is parsed as HTML.

import { announce, catching } from './chrome.js';
import { $, button } from './dom.js';
import { copyText } from './markdown.js';
import { rpc } from './rpc.js';
import { app, ui } from './state.js';

const menu = $('export');
const note = $('export-note');
const toMarkdown = $('export-md');
const toJSON = $('export-json');

// Answers whose text the reader was given: a discarded attempt's is not.
const KEPT = new Set(['completed', 'cancelled']);

/** answerSource is a turn's answer as the model wrote it: its kept messages' Markdown. */
export function answerSource(tv) {
  const parts = [];
  for (const m of tv.el.querySelectorAll('.msg.agent[data-item-id]')) {
    const view = app.items.get(m.dataset.itemId);
    if (view && KEPT.has(view.item.status) && view.source.trim()) parts.push(view.source);
  }
  return parts.join('\n\n');
}

/**
 * copyButton is the footer's Copy for a turn with an answer (null
 * without one): it copies the answer's Markdown and says so, aloud too.
 */
export function copyButton(tv) {
  if (!answerSource(tv)) return null;
  const copy = button('small copy-answer', 'Copy', 'Copy the answer as Markdown');
  let reset = null;
  copy.addEventListener('click', catching(async () => {
    const ok = await copyText(answerSource(tv));
    copy.textContent = ok ? 'Copied' : 'Copy failed';
    announce(ok ? 'Answer copied.' : 'The browser did not allow copying.');
    clearTimeout(reset);
    reset = setTimeout(() => { copy.textContent = 'Copy'; }, 2000);
  }));
  return copy;
}

/** readLog reads a session's whole durable log, page by page. */
export async function readLog(sessionId) {
  const events = [];
  let cursor;
  for (;;) {
    const params = { sessionId, limit: 200 };
    if (cursor) params.cursor = cursor;
    const page = await rpc.call('view/page', params);
    events.push(...page.events);
    if (page.nextCursor == null || !page.events.length || page.nextCursor === cursor) return events;
    cursor = page.nextCursor;
  }
}

/** fence is a code fence longer than any run of backticks in text. */
function fence(text) {
  const longest = Math.max(0, ...(text.match(/`+/g) || []).map((r) => r.length));
  return '`'.repeat(Math.max(3, longest + 1));
}

const fenced = (text, lang = '') => {
  const f = fence(text);
  return `${f}${lang}\n${text.replace(/\n$/, '')}\n${f}`;
};

/** when words a recorded time for the export: "2026-05-01 14:05:03 UTC". */
const when = (iso) => (iso ? ` · ${iso.replace('T', ' ').replace(/\.\d+Z$|Z$/, '')} UTC` : '');

/**
 * chatMarkdown writes a chat's log as Markdown: the title, then each
 * message in order — "**You:**" and "**Assistant (model):**" with the
 * time it was recorded, then its text as written — and each tool call
 * as fenced blocks of its arguments and output. A regenerated answer is
 * marked as another version of the one before; discarded attempts are
 * left out, as the page shows them struck through.
 */
export function chatMarkdown(title, session, events) {
  const items = new Map(); // itemId → its latest revision, in order of first appearance
  const models = new Map(); // turnId → the model that answered
  let model = session.modelId || '';
  const asked = new Map(); // turnId → the session's model when the turn began
  for (const { method, params } of events) {
    if (method === 'session/modelChanged') model = params.modelId || model;
    if (method === 'turn/started' && !asked.has(params.turnId)) asked.set(params.turnId, model);
    if (method === 'session/tokenUsage' && params.turnId && params.modelId) models.set(params.turnId, params.modelId);
    const item = params.item;
    if (!item || !item.itemId) continue;
    const had = items.get(item.itemId);
    if (!had || item.revision >= had.revision) items.set(item.itemId, item);
  }
  const out = [`# ${title}`, ''];
  const regenerated = new Set();
  for (const item of items.values()) {
    const who = models.get(item.turnId) || asked.get(item.turnId) || model;
    switch (item.kind) {
      case 'userMessage':
        if (item.regenerates) {
          regenerated.add(item.turnId);
          break;
        }
        out.push(`**You:**${when(item.recordedAt)}`, '', item.text || '', '');
        break;
      case 'agentMessage':
        if (!KEPT.has(item.status) || !(item.text || '').trim()) break;
        out.push(`**Assistant${who ? ` (${who})` : ''}:**${when(item.recordedAt)}${regenerated.has(item.turnId) ? ' · another version' : ''}${item.status === 'cancelled' ? ' · stopped' : ''}`,
          '', item.text, '');
        break;
      case 'toolCall':
        out.push(`Tool call: ${item.tool || 'tool'}${item.server ? ` (${item.server})` : ''} · ${item.status}${when(item.recordedAt)}`, '');
        if (item.args != null) out.push(fenced(item.args, 'json'), '');
        if (item.visibleOutput != null) out.push(fenced(item.visibleOutput), '');
        if (item.failureReason) out.push(`Failed: ${item.failureReason}`, '');
        break;
      default:
    }
  }
  return `${out.join('\n').trimEnd()}\n`;
}

/** fileName makes a download's name from a chat's title. */
function fileName(title, ext) {
  const slug = title.toLowerCase().normalize('NFKD').replace(/[^\p{L}\p{N}]+/gu, '-').replace(/^-|-$/g, '').slice(0, 60);
  return `${slug || 'chat'}.${ext}`;
}

/** download saves text as a file through a Blob URL. */
function download(text, type, name) {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = document.createElement('a');
  a.href = url;
  a.download = name;
  a.hidden = true;
  document.body.append(a);
  a.click();
  a.remove();
  // The download has its bytes once the click is handled.
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

/** exportChat saves the chat on screen in one of the two forms. */
async function exportChat(kind) {
  const sessionId = app.current;
  const session = app.sessions.get(sessionId) || { sessionId };
  // The header names the chat on screen as the list does.
  const title = ui.title.textContent;
  say('Reading the chat…');
  const events = await readLog(sessionId);
  if (movedOn(sessionId)) return;
  if (kind === 'md') download(chatMarkdown(title, session, events), 'text/markdown;charset=utf-8', fileName(title, 'md'));
  else download(`${JSON.stringify(events, null, 2)}\n`, 'application/json', fileName(title, 'log.json'));
  say(kind === 'md' ? 'Saved as Markdown.' : `Saved the log: ${events.length} events.`);
  announce(note.textContent);
}

/** movedOn tells whether another chat was opened while one was read. */
function movedOn(sessionId) {
  if (app.current === sessionId) return false;
  say('');
  return true;
}

function say(text) {
  note.textContent = text;
  note.hidden = !text;
}

/** startExport wires the header's Export menu. */
export function startExport() {
  menu.addEventListener('toggle', () => {
    if (!menu.open) return;
    const none = !app.current;
    toMarkdown.disabled = none;
    toJSON.disabled = none;
    say(none ? 'Open a chat to export it.' : '');
  });
  const run = (kind) => catching(async () => {
    try {
      await exportChat(kind);
    } catch (err) {
      say('');
      throw err;
    }
  });
  toMarkdown.addEventListener('click', run('md'));
  toJSON.addEventListener('click', run('json'));
  // Esc closes an open menu, wherever focus is (and stops nothing else:
  // main.js's Esc handler, added after this one, sees it handled).
  document.addEventListener('keydown', (ev) => {
    if (ev.key !== 'Escape' || !menu.open || ev.defaultPrevented) return;
    ev.preventDefault();
    menu.open = false;
    menu.querySelector('summary').focus();
  });
  // A click elsewhere closes the menu, as menus do (not the download's
  // own click, which the menu stays open through to say it is saved).
  document.addEventListener('click', (ev) => {
    if (menu.open && ev.isTrusted && !menu.contains(ev.target)) menu.open = false;
  });
}
