// Compaction items: the divider where the conversation was compacted,
// unfolding to the summary the model reads in its place.

import { announce } from './chrome.js';
import { syncCompact } from './context.js';
import { el } from './dom.js';
import { renderMarkdown } from './markdown.js';
import { app } from './state.js';
import { turnView } from './transcript.js';
import { kindWords, tokenWords } from './words.js';

// A compaction's trigger in words.
const TRIGGER_WORDS = { auto: 'auto', manual: 'manual' };

/**
 * CompactionView is a compaction item: a divider in the transcript
 * where the conversation was compacted — after the turn its
 * summarizedThrough names — reading "Context compacted · 130k → 2.1k
 * tokens · auto", unfolding to the summary the model now reads in place
 * of the turns above it (which stay on screen as they were).
 * "Compacting…" while it runs; a failure says why.
 */
class CompactionView {
  constructor() {
    this.item = { revision: 0, status: 'inProgress' };
    this.el = el('div', 'compaction');
    this.details = el('details', 'compaction-fold');
    this.summary = el('summary', 'compaction-summary');
    this.body = el('div', 'compaction-body');
    this.details.append(this.summary, this.body);
    this.line = el('p', 'compaction-line');
    this.el.append(this.details, this.line);
  }

  set(item) {
    this.item = item;
    this.render();
  }

  /** words is what the divider reads. */
  words() {
    const it = this.item;
    const trigger = TRIGGER_WORDS[it.trigger] || (it.trigger ? kindWords(it.trigger) : '');
    const tail = trigger ? ` · ${trigger}` : '';
    const before = it.tokensBefore != null ? tokenWords(it.tokensBefore) : null;
    if (it.status === 'inProgress') return `Compacting the context…${before ? ` · ${before} tokens` : ''}${tail}`;
    const outcome = it.outcome || (it.status === 'completed' ? 'compacted' : it.status);
    switch (outcome) {
      case 'compacted': {
        const sizes = before && it.tokensAfter != null ? ` · ${before} → ${tokenWords(it.tokensAfter)} tokens` : '';
        return `Context compacted${sizes}${tail}`;
      }
      case 'noop': return `Nothing to compact yet${tail}`;
      case 'cancelled': return `Compaction stopped${tail}`;
      case 'failed': {
        const why = it.failureReason ? `: ${it.failureReason}` : '';
        return `Compaction failed${why}${tail} · the model still gets the whole conversation`;
      }
      default: return `Compaction ${kindWords(outcome)}${tail}`;
    }
  }

  render() {
    const it = this.item;
    const outcome = it.outcome || (it.status === 'completed' ? 'compacted' : it.status);
    this.el.dataset.status = it.status;
    this.el.dataset.outcome = it.status === 'inProgress' ? 'running' : outcome;
    const text = typeof it.text === 'string' && it.text.trim() !== '' ? it.text : '';
    const fold = it.status !== 'inProgress' && outcome === 'compacted' && text !== '';
    this.details.hidden = !fold;
    this.line.hidden = fold;
    const label = el('span', 'compaction-label', this.words());
    if (fold) {
      this.line.replaceChildren();
      this.summary.replaceChildren(el('span', 'visually-hidden', 'Divider: '), label);
      if (this.text !== text) {
        this.text = text;
        const md = el('div', 'compaction-text md');
        md.append(renderMarkdown(text));
        this.body.replaceChildren(
          el('p', 'compaction-note', 'What the model reads from here on, in place of the conversation above (which stays here as it was):'),
          md);
      }
    } else {
      const parts = [el('span', 'visually-hidden', 'Divider: '), label];
      if (it.status === 'inProgress') {
        const live = el('span', 'compaction-live');
        live.setAttribute('aria-hidden', 'true');
        parts.push(live);
      }
      this.summary.replaceChildren();
      this.line.replaceChildren(...parts);
    }
  }
}

/**
 * upsertCompaction shows a compaction item as a divider: in the turn
 * that ran it, before its message (the conversation before that turn
 * is what it summarises), or after the turn its summarizedThrough
 * names when that is elsewhere. A session/compact's own turn shows
 * the divider alone.
 */
export function upsertCompaction(item, live) {
  let view = app.compactions.get(item.itemId);
  if (view && item.revision <= view.item.revision) return;
  const tv = turnView(item.turnId);
  if (!view) {
    view = new CompactionView();
    view.el.dataset.itemId = item.itemId;
    app.compactions.set(item.itemId, view);
    tv.compaction = view;
    // Before the turn's message, after any compaction it ran before.
    const first = [...tv.el.children].find((c) => !c.classList.contains('compaction'));
    tv.el.insertBefore(view.el, first || null);
    tv.markCompaction();
  }
  const was = view.item.status;
  view.set(item);
  const through = item.summarizedThrough && app.turns.get(item.summarizedThrough);
  if (through && through !== tv && through.el.isConnected) {
    const next = through.el.nextElementSibling;
    // Right after the turn summarised: where its turn begins, or on its
    // own between two turns.
    if (next === tv.el) {
      if (view.el.parentNode !== tv.el) tv.el.insertBefore(view.el, [...tv.el.children].find((c) => !c.classList.contains('compaction')) || null);
    } else if (next !== view.el) {
      through.el.after(view.el);
    }
  }
  syncCompact();
  if (live && was === 'inProgress' && item.status !== 'inProgress') announce(`${view.words()}.`);
}
