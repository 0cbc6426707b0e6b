// Reasoning items: the "Thinking…" / "Thought for 4 s" block above an
// answer, unfolding to its summary parts.

import { el } from './dom.js';
import { renderMarkdown } from './markdown.js';
import { app } from './state.js';
import { turnView } from './transcript.js';
import { plural, thoughtTime } from './words.js';

/** at reads an RFC 3339 time as milliseconds; null when absent or unreadable. */
function at(iso) {
  const t = iso ? Date.parse(iso) : NaN;
  return Number.isNaN(t) ? null : t;
}

/**
 * ReasoningView is a reasoning item: a collapsed block above the answer
 * of its step, reading "Thinking…" while the model reasons (with a
 * live mark, and the last words of the reasoning beside it), then
 * "Thought for 4 s". It unfolds (a <details>: Tab, Enter and screen
 * readers know it) to the summary parts, each rendered as the answers
 * are (Markdown without raw HTML, sanitized). Reasoning the provider
 * did not show (an empty summary) reads "Reasoned (hidden by the
 * provider)" and unfolds to nothing.
 *
 * How long it thought is measured between the item's durable records:
 * the recordedAt of its opening revision (item/started, written when
 * the reasoning began) and of the revision that ended it. Both come
 * from the log, so a reloaded chat says the same. When the opening is
 * missing (an item first seen by its deltas after a gap), the page's
 * own clock runs from the first delta it saw to the end it saw.
 */
class ReasoningView {
  constructor() {
    this.item = { revision: 0, status: 'inProgress' };
    this.parts = []; // the summary parts, as streamed or as the item holds them
    this.opened = null; // {rec, local}: when the reasoning began, by the log and by this page's clock
    this.closed = null;
    this.timer = null;
    this.el = el('div', 'reasoning');
    this.details = el('details', 'reasoning-fold');
    this.summary = el('summary', 'reasoning-summary');
    this.body = el('div', 'reasoning-body');
    this.details.append(this.summary, this.body);
    this.line = el('p', 'reasoning-line'); // the hidden reasoning's one line
    this.line.hidden = true;
    this.el.append(this.details, this.line);
    this.details.addEventListener('toggle', () => {
      if (this.details.open) this.paintBody();
    });
  }

  /** set shows a revision of the item. */
  set(item) {
    this.item = item;
    const t = at(item.recordedAt);
    if (!this.opened && (item.status === 'inProgress' || item.revision === 1)) {
      this.opened = { rec: t, local: Date.now() };
    } else if (this.opened && this.opened.rec == null && item.revision === 1) {
      this.opened.rec = t;
    }
    if (item.status !== 'inProgress' && !this.closed) this.closed = { rec: t, local: Date.now() };
    if (Array.isArray(item.summary)) this.parts = item.summary.map((x) => String(x == null ? '' : x));
    else if (item.status !== 'inProgress') this.parts = []; // the item's word: nothing shown
    this.render();
  }

  /** append adds a streamed delta to part n. */
  append(n, delta) {
    if (!this.opened) this.opened = { rec: null, local: Date.now() };
    while (this.parts.length <= n) this.parts.push('');
    this.parts[n] += delta;
    this.renderSummary();
    if (this.details.open) this.schedule();
  }

  /** discard ends a reasoning whose attempt is over (the server sent no end). */
  discard() {
    this.item = { ...this.item, status: 'failed' };
    if (!this.closed) this.closed = { rec: null, local: Date.now() };
    this.render();
  }

  /** shown tells whether any of the reasoning is there to read. */
  shown() {
    return this.parts.some((x) => x.trim() !== '');
  }

  /** duration is how long the model reasoned, in ms, or null when unknown. */
  duration() {
    const o = this.opened;
    const c = this.closed;
    if (!o || !c) return null;
    if (o.rec != null && c.rec != null) return Math.max(0, c.rec - o.rec);
    return Math.max(0, c.local - o.local); // this page saw both ends
  }

  /** words is what the block reads, folded. */
  words() {
    const { status } = this.item;
    if (status === 'inProgress') return 'Thinking…';
    const ms = this.duration();
    const thought = ms == null ? 'Thought' : `Thought for ${thoughtTime(ms)}`;
    if (status === 'completed') return this.shown() ? thought : 'Reasoned (hidden by the provider)';
    if (status === 'cancelled') return this.shown() ? `${thought} · stopped` : 'Thinking stopped';
    return this.shown() ? `${thought} · discarded attempt` : 'Thinking cut off · discarded attempt';
  }

  render() {
    const { status } = this.item;
    this.el.dataset.status = status;
    const hidden = status !== 'inProgress' && !this.shown();
    this.el.dataset.state = status === 'inProgress' ? 'streaming' : hidden ? 'hidden' : 'done';
    this.details.hidden = hidden;
    this.line.hidden = !this.details.hidden;
    this.line.textContent = this.details.hidden ? this.words() : '';
    this.renderSummary();
    // Folded, it is painted once it ends (a reopened chat's is the same);
    // unfolded, as it streams.
    if (this.details.open || status !== 'inProgress') this.paintBody();
  }

  renderSummary() {
    const streaming = this.item.status === 'inProgress';
    const parts = [el('span', 'visually-hidden', 'Reasoning: '), el('span', 'reasoning-label', this.words())];
    if (streaming) {
      const live = el('span', 'reasoning-live');
      live.setAttribute('aria-hidden', 'true');
      parts.push(live);
      // The last words streamed, beside the label, while it is folded.
      const last = this.parts.length ? this.parts[this.parts.length - 1].trim() : '';
      if (last) {
        const preview = el('span', 'reasoning-preview', last.length > 160 ? `…${last.slice(-159)}` : last);
        preview.setAttribute('aria-hidden', 'true');
        parts.push(preview);
      }
    } else if (this.item.status === 'completed' && this.shown() && this.parts.length > 1) {
      parts.push(el('span', 'reasoning-count', ` · ${plural(this.parts.filter((x) => x.trim() !== '').length, 'part')}`));
    }
    this.summary.replaceChildren(...parts);
  }

  schedule() {
    if (this.timer) return;
    this.timer = setTimeout(() => this.paintBody(), 80);
  }

  /** paintBody renders the parts, each as Markdown through the answers' sanitizing path. */
  paintBody() {
    clearTimeout(this.timer);
    this.timer = null;
    const shown = this.parts.filter((x) => x.trim() !== '');
    const key = `${this.item.status}\n${JSON.stringify(shown)}`;
    if (key === this.painted) return;
    this.painted = key;
    if (!shown.length) {
      this.body.replaceChildren(el('p', 'reasoning-empty', this.item.status === 'inProgress' ? 'Nothing shown yet…' : 'Nothing shown.'));
      return;
    }
    this.body.replaceChildren(...shown.map((x) => {
      const part = el('div', 'reasoning-part md');
      part.append(renderMarkdown(x));
      return part;
    }));
  }
}

/** upsertReasoning shows a reasoning item, replacing an older revision of it. */
export function upsertReasoning(item) {
  let view = app.reasoning.get(item.itemId);
  if (view && item.revision <= view.item.revision) return;
  if (!view) {
    view = new ReasoningView();
    view.el.dataset.itemId = item.itemId;
    app.reasoning.set(item.itemId, view);
    const tv = turnView(item.turnId);
    // Above the answer of its step: it opens before the answer does.
    tv.add(view.el);
    // A new attempt's output began: the retry before it ran.
    if (tv.status) tv.status.attemptBegan();
  }
  view.set(item);
}
