// Tool calls: a row per call in its turn, unfolding to its arguments and
// output, and the whole output on demand.

import { announce } from './chrome.js';
import { button, el } from './dom.js';
import { rpc, RpcError } from './rpc.js';
import { app } from './state.js';
import { turnView } from './transcript.js';
import { callTime, kindWords, prettyJSON, size } from './words.js';

// A toolCall's status in words; a status this page does not know is
// spelt out as it comes.
const CALL_WORDS = {
  inProgress: 'running',
  completed: 'completed',
  failed: 'failed',
  rejected: 'rejected',
  timedOut: 'timed out',
  cancelled: 'cancelled',
};

/**
 * ToolView is one tool call: a compact row in its turn, between the
 * text of the step that asked for it and what follows, reading
 * "🔧 calculator · builtin · completed · 12 ms" (and why, when it did
 * not complete), that unfolds to its arguments and output. A call that
 * waits for a person has its ApprovalCard below the row, outside the
 * fold, so that the question shows while the row is folded; once
 * decided the card says how. A call's name, arguments, output and
 * failure are the tool's or the model's text: they are set as
 * textContent only, never parsed as HTML or Markdown.
 */
class ToolView {
  constructor() {
    this.item = { revision: 0, status: 'inProgress' };
    this.output = ''; // visibleOutput, and any output deltas after it
    this.whole = null; // {state, text, error, read}: "Show the whole output"
    this.approval = null; // the ApprovalCard, for a call that asked
    this.el = el('div', 'tool');
    this.details = el('details', 'tool-call');
    this.summary = el('summary', 'tool-summary');
    this.body = el('div', 'tool-body');
    this.details.append(this.summary, this.body);
    this.el.append(this.details);
  }

  /** set shows a revision of the call. */
  set(item) {
    this.item = item;
    if (typeof item.visibleOutput === 'string') this.output = item.visibleOutput;
    this.el.dataset.status = item.status;
    this.render();
  }

  render() {
    this.renderSummary();
    this.renderBody();
  }

  /** attach puts an approval card below the row. */
  attach(card) {
    this.approval = card;
    this.el.append(card.el);
    this.render();
  }

  /** waiting tells whether the call waits for a person's decision. */
  waiting() {
    return this.item.status === 'inProgress' && this.approval !== null && this.approval.state !== 'resolved';
  }

  appendOutput(delta) {
    if (this.item.status !== 'inProgress') return; // stale after the result
    this.output += delta;
    this.renderBody();
  }

  renderSummary() {
    const it = this.item;
    const icon = el('span', 'tool-icon'); // a wrench, drawn by the style sheet
    icon.setAttribute('aria-hidden', 'true');
    const parts = [
      el('span', 'visually-hidden', 'Tool call: '),
      icon,
      el('span', 'tool-name', it.tool || 'tool'),
    ];
    const sep = () => el('span', 'tool-sep', ' · ');
    if (it.server) parts.push(sep(), el('span', 'tool-server', it.server));
    const waiting = this.waiting();
    this.el.toggleAttribute('data-waiting', waiting);
    parts.push(sep(), el('span', 'tool-state', waiting ? 'waiting for approval' : CALL_WORDS[it.status] || kindWords(it.status)));
    if (it.status === 'inProgress' && !waiting) {
      const live = el('span', 'tool-live');
      live.setAttribute('aria-hidden', 'true');
      parts.push(live);
    }
    if (it.durationMs != null) parts.push(sep(), el('span', 'tool-time', callTime(it.durationMs)));
    const why = this.why();
    if (why) parts.push(el('span', 'visually-hidden', ': '), el('span', 'tool-why', why));
    this.summary.replaceChildren(...parts);
  }

  /**
   * why says why a call did not complete: its failureReason, and for a
   * tool's own error the first line of what it said.
   */
  why() {
    const it = this.item;
    if (it.status === 'completed' || it.status === 'inProgress') return '';
    let why = it.failureReason || '';
    if (it.failureKind === 'tool_error' && this.output.trim()) {
      let said = this.output.trim().split('\n')[0];
      if (said.length > 200) said = `${said.slice(0, 199)}…`;
      why = why ? `${why}: ${said}` : said;
    }
    return why;
  }

  renderBody() {
    const it = this.item;
    const rows = [el('p', 'tool-label', 'Arguments')];
    rows.push(it.args == null || it.args === '' ? el('p', 'tool-empty', 'none') : el('pre', 'tool-args', prettyJSON(it.args)));
    const whole = this.whole && this.whole.state === 'shown';
    rows.push(el('p', 'tool-label', whole ? 'Output (whole)' : 'Output'));
    const text = whole ? this.whole.text : this.output;
    if (text !== '') rows.push(el('pre', 'tool-output', text));
    else rows.push(el('p', 'tool-empty', it.status === 'inProgress' ? (this.waiting() ? 'not run yet: it waits for approval' : 'waiting for the result…') : 'no output'));
    if (whole) {
      const note = it.outputRef && it.outputRef.truncated
        ? `The whole output as kept: its first ${size(this.whole.read)}; the server keeps no more.`
        : `The whole output: ${size(this.whole.read)}.`;
      rows.push(el('p', 'tool-note', note));
    } else if (it.truncated) {
      rows.push(el('p', 'tool-note', 'Output truncated: only its beginning was kept.'));
    }
    if (it.outputRef && !whole) rows.push(this.wholeControl());
    const facts = [it.failureKind && `failure ${it.failureKind}`, it.callId && `call ${it.callId}`].filter(Boolean);
    if (facts.length) rows.push(el('p', 'tool-facts', facts.join(' · ')));
    this.body.replaceChildren(...rows);
  }

  /** wholeControl is "Show the whole output", or how reading it goes. */
  wholeControl() {
    const w = this.whole || { state: 'idle' };
    const box = el('div', 'tool-whole');
    const ref = this.item.outputRef;
    const show = button('small show-whole', w.state === 'failed' ? 'Try again' : 'Show the whole output');
    if (ref.byteLen) show.setAttribute('aria-label', `Show the whole output, ${size(ref.byteLen)}`);
    show.disabled = w.state === 'reading';
    show.addEventListener('click', () => this.readWhole());
    box.append(show);
    if (w.state === 'reading') {
      box.append(el('span', 'tool-whole-state', ref.byteLen ? `reading… ${size(w.read)} of ${size(ref.byteLen)}` : 'reading…'));
    } else if (w.state === 'failed') {
      box.append(el('span', 'tool-whole-state failed', `Could not read the whole output: ${w.error}`));
    } else if (ref.byteLen) {
      box.append(el('span', 'tool-whole-state', size(ref.byteLen)));
    }
    return box;
  }

  /**
   * readWhole pages item/readOutput from the start to eof and shows
   * the whole output as text in place of its first 32 KiB.
   */
  async readWhole() {
    const it = this.item;
    const ref = it.outputRef;
    const sessionId = app.current;
    const epoch = app.epoch;
    this.whole = { state: 'reading', text: '', read: 0, error: '' };
    this.renderBody();
    const focusBack = () => {
      const b = this.body.querySelector('.show-whole');
      (b || this.summary).focus();
    };
    try {
      let offset = 0;
      const parts = [];
      for (;;) {
        const res = await rpc.call('item/readOutput', { sessionId, itemId: it.itemId, outputRef: ref.id, offsetBytes: offset, lengthBytes: READ_PART });
        if (epoch !== app.epoch) return;
        if (res.encoding && res.encoding !== 'utf8') throw new RpcError('the output is not text', 'notText', 'item/readOutput');
        parts.push(res.content);
        offset = res.offsetBytes + res.byteLen;
        this.whole.read = offset;
        if (res.eof) break;
        if (res.byteLen <= 0) throw new RpcError('the server made no progress', 'noProgress', 'item/readOutput');
        this.renderBody();
      }
      this.whole = { state: 'shown', text: parts.join(''), read: offset, error: '' };
      this.renderBody();
      announce(`The whole output of ${it.tool || 'the tool'} is shown: ${size(offset)}.`);
      const out = this.body.querySelector('.tool-output');
      if (out) {
        out.tabIndex = -1;
        out.focus();
      }
    } catch (err) {
      if (epoch !== app.epoch) return;
      this.whole = { state: 'failed', text: '', read: 0, error: err.message || String(err) };
      this.renderBody();
      focusBack();
    }
  }
}

// "Show the whole output" reads it in parts of this many bytes, so that
// a long one shows its progress (and no frame nears the server's limit).
const READ_PART = 1 << 20;

/** upsertTool shows a tool call, replacing an older revision of it. */
export function upsertTool(item) {
  let view = app.tools.get(item.itemId);
  if (view && item.revision <= view.item.revision) return;
  if (!view) {
    view = new ToolView();
    view.el.dataset.itemId = item.itemId;
    app.tools.set(item.itemId, view);
    // In the order the calls began: after the text of the step that
    // asked for them, before the answer made of their results.
    turnView(item.turnId).add(view.el);
  }
  view.set(item);
}
