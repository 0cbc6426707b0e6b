// The context window: the meter under the message box
// (session/contextUsage) and Compact (session/compact).

import { announce } from './chrome.js';
import { el, uuidv7 } from './dom.js';
import { command } from './rpc.js';
import { app, ui } from './state.js';
import { kindWords, tokenWords } from './words.js';

// How full the context window is, by pressure, in words (colour only
// repeats them).
const PRESSURE_WORDS = { warning: 'nearly full', blocked: 'full' };

/**
 * showContext shows session/contextUsage (or session/resume's
 * contextUsage) in the meter beside the composer: "1.7k / 2.0k tokens ·
 * nearly full", a bar coloured by pressure. null hides it (a chat with
 * no usage yet). live: a change of pressure is said aloud.
 */
export function showContext(u, live = false) {
  const before = app.contextUsage;
  app.contextUsage = u && typeof u.usedTokens === 'number' ? { usedTokens: u.usedTokens, windowTokens: u.windowTokens, pressure: u.pressure || 'normal' } : null;
  const c = app.contextUsage;
  ui.context.hidden = !c;
  if (!c) return;
  const known = typeof c.windowTokens === 'number' && c.windowTokens > 0;
  const words = PRESSURE_WORDS[c.pressure] || (c.pressure !== 'normal' ? kindWords(c.pressure) : '');
  const pct = known ? Math.min(100, (c.usedTokens / c.windowTokens) * 100) : 0;
  ui.context.dataset.pressure = c.pressure;
  ui.contextFill.style.width = `${pct.toFixed(1)}%`;
  ui.contextFill.parentElement.hidden = !known;
  // "tokens" goes on a narrow screen (the meter's value text keeps it).
  ui.contextText.replaceChildren(`${tokenWords(c.usedTokens)}${known ? ` / ${tokenWords(c.windowTokens)}` : ''}`,
    el('span', 'context-unit', ' tokens'), words ? ` · ${words}` : '');
  ui.context.setAttribute('aria-valuenow', String(c.usedTokens));
  if (known) ui.context.setAttribute('aria-valuemax', String(c.windowTokens));
  else ui.context.removeAttribute('aria-valuemax');
  const used = `${c.usedTokens.toLocaleString('en')}${known ? ` of ${c.windowTokens.toLocaleString('en')} (${Math.round(pct)}%)` : ''} tokens of the model's context used`;
  const advice = c.pressure === 'normal' ? '' : '; the older conversation will be compacted before the next message';
  ui.context.setAttribute('aria-valuetext', `${used}${words ? `: ${words}` : ''}${advice}`);
  ui.context.title = `${used}${words ? `: ${words}` : ''}${advice}.`;
  if (live && before && before.pressure !== c.pressure && c.pressure !== 'normal') {
    announce(`The chat's context is ${words || c.pressure}: the older conversation will be compacted before the next message.`);
  }
}

/** compactNote says (or, with no text, clears) what the Compact control has to say, aloud too. */
export function compactNote(text) {
  ui.compactNote.textContent = text || '';
  if (text) announce(text);
}

/** syncCompact shows Compact for an open chat, off while a compaction of its runs. */
export function syncCompact() {
  ui.compact.hidden = !app.current;
  const running = [...app.compactions.values()].some((v) => v.item.status === 'inProgress');
  ui.compact.disabled = running || !!ui.compact.dataset.sending;
}

/**
 * compactChat sends session/compact: a turn of its own summarises the
 * conversation, shown as a divider; noop (nothing finished since the
 * chat began or was last compacted) is said in words.
 */
export async function compactChat() {
  const sessionId = app.current;
  if (!sessionId || ui.compact.disabled) return;
  const commandId = uuidv7();
  app.compactCommands.add(commandId);
  ui.compact.dataset.sending = 'true';
  syncCompact();
  compactNote('Compacting…');
  try {
    const ack = await command('session/compact', { commandId, sessionId }, () => compactNote('Offline: compacting as soon as the connection is back.'));
    if (sessionId !== app.current) return;
    if (ack.status === 'noop') {
      compactNote('Nothing to compact yet: no exchange has finished since the chat began or was last compacted.');
    } else if (app.running && app.running !== commandId) {
      compactNote('Compaction queued: it runs once the answer under way is done.');
    } else {
      compactNote('');
    }
  } catch (err) {
    compactNote('');
    throw err;
  } finally {
    delete ui.compact.dataset.sending;
    syncCompact();
  }
}
