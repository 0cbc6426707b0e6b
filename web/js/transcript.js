// The transcript: a turn (its messages, retry status and footer) and a
// message bubble, found by turnId or itemId in app; whether a turn runs;
// emptying the view for another chat.

import { catching } from './chrome.js';
import { compactNote, showContext, syncCompact } from './context.js';
import { showChatCost, showUsage } from './cost.js';
import { button, el, uuidv7 } from './dom.js';
import { copyButton } from './export.js';
import { resetFollow } from './follow.js';
import { Gallery } from './images.js';
import { renderMarkdown } from './markdown.js';
import { sessionModel } from './models.js';
import { outcome, techDetails } from './outcomes.js';
import { RetryStatus } from './retries.js';
import { showTimesOnTap, stamp } from './stamps.js';
import { app, ui } from './state.js';
import { linkVersion } from './versions.js';
import { plural, sameModel, shortModel, size } from './words.js';

/**
 * turnActions are what a turn's buttons do: Edit (sending.js's startEdit)
 * and Retry or Regenerate (sendAgain). main.js sets them: sending.js
 * makes turns, so this module cannot import it.
 */
export const turnActions = { edit: null, again: null };

/** TurnView is one turn: its messages, retry status and footer. */
export class TurnView {
  constructor(turnId, confirmed) {
    this.el = el('article', 'turn');
    this.el.dataset.turnId = turnId;
    this.turnId = turnId;
    this.confirmed = confirmed; // turnId is the server's, not a commandId
    this.user = null; // the user message's ItemView
    this.status = null; // the RetryStatus
    this.footer = null;
    this.asked = app.askedModel; // the session's model as the turn began, when its log said
    this.answeredBy = ''; // session/tokenUsage's modelId: the model that answered
    this.rerouted = false; // a fallback or a skipped provider moved the turn
    this.compaction = null; // the CompactionView of a compaction this turn ran
    this.answeredAt = ''; // the recordedAt of its latest ended answer, for the footer
    this.versions = null; // the Versions this turn is one of, once its message was regenerated
    this.pager = null; // its "‹ 2 / 3 ›" (versions.js)
    this.usage = null; // its session/tokenUsage sums (cost.js)
    ui.empty.hidden = true;
    ui.transcript.append(this.el);
  }

  /** add appends a node, keeping the versions' pager and the footer last. */
  add(node) {
    this.el.insertBefore(node, this.pager ? this.pager.el : this.footer);
  }

  /** placePager puts the versions' pager under the answer, above the footer. */
  placePager(node) {
    this.el.insertBefore(node, this.footer);
  }

  /** setUser shows the turn's user message, with its Edit action. */
  setUser(view) {
    this.user = view;
    view.turn = this;
    this.add(view.el);
    const actions = el('div', 'msg-actions');
    showTimesOnTap(actions);
    const edit = button('small edit', 'Edit', 'Edit this message in a new branch');
    edit.addEventListener('click', () => turnActions.edit(this));
    actions.append(edit);
    this.actions = actions;
    this.add(actions);
    stamp(actions, view.item.recordedAt);
  }

  /** stamp shows a message's recorded time in the row under it (stamps.js). */
  stamp(view) {
    const at = view.item.recordedAt;
    if (view.isUser) {
      stamp(this.actions, at);
    } else if (at && view.item.status !== 'inProgress' && at > this.answeredAt) {
      this.answeredAt = at;
      if (this.footer) stamp(this.footer.querySelector('.turn-actions'), at);
    }
  }

  retryStatus() {
    if (!this.status) this.status = new RetryStatus(this);
    return this.status;
  }

  /**
   * compactionOnly tells whether the turn is a session/compact's: no
   * message of its own, only its compaction (a divider, no exchange).
   */
  compactionOnly() {
    return !this.user && (this.compaction !== null || app.compactCommands.has(this.turnId));
  }

  /** markCompaction shows the turn as a compaction's: its divider, no footer. */
  markCompaction() {
    this.el.classList.toggle('compaction-turn', this.compactionOnly());
  }

  /** end shows the turn's terminal: what happened, and what to do next. */
  end(p) {
    this.terminal = p.terminal;
    if (this.status) this.status.end(p);
    if (this.compactionOnly() && this.compaction) {
      // The divider says how it went; a compaction has no answer to
      // regenerate and no message to retry.
      this.markCompaction();
      if (this.footer) this.footer.remove();
      this.footer = null;
      return;
    }
    const footer = el('footer', 'turn-footer');
    footer.dataset.terminal = p.terminal;
    const view = outcome(p, this);
    const line = el('p', 'turn-status', view.text);
    this.modelNote = el('span', 'turn-model');
    line.append(this.modelNote);
    footer.append(line);
    if (view.details) footer.append(techDetails('Details', view.details));
    const again = view.again && button('small again', view.again,
      view.again === 'Retry' ? 'Retry this message' : 'Regenerate the answer');
    const actions = el('div', 'turn-actions');
    if (again) {
      again.addEventListener('click', catching(() => turnActions.again(this)));
      // Why the server would not regenerate, in words, beside the button.
      this.againNote = el('p', 'again-note');
      this.againNote.hidden = true;
      actions.append(again, this.againNote);
    }
    const copy = copyButton(this);
    if (copy) actions.append(copy);
    stamp(actions, this.answeredAt);
    showTimesOnTap(footer);
    footer.append(actions);
    if (this.footer) this.footer.replaceWith(footer);
    else this.el.append(footer);
    this.footer = footer;
    this.renderModel();
    showUsage(this);
  }

  /** refused says, beside Regenerate or Retry, why it was not done ('' clears it). */
  refused(text) {
    if (!this.againNote) return;
    this.againNote.textContent = text;
    this.againNote.hidden = !text;
  }

  /** answered notes the model that answered (session/tokenUsage). */
  answered(modelId) {
    if (!modelId) return;
    this.answeredBy = modelId;
    this.renderModel();
  }

  /**
   * renderModel names, in the footer, the model that answered when it
   * is not the session's: a fallback answered, or the chat's model was
   * another when the turn ran.
   */
  renderModel() {
    if (!this.modelNote) return;
    const asked = this.asked || sessionModel();
    const other = this.answeredBy && (this.rerouted ? true : asked ? !sameModel(this.answeredBy, asked) : false);
    this.modelNote.textContent = other ? ` · answered by ${shortModel(this.answeredBy)}` : '';
    this.modelNote.title = other ? this.answeredBy : '';
  }

  unqueued() {
    this.end({ terminal: 'unqueued' });
  }
}

export function turnView(turnId) {
  if (!turnId) return app.lastTurn || turnView(uuidv7());
  let tv = app.turns.get(turnId);
  if (!tv) {
    tv = new TurnView(turnId, true);
    app.turns.set(turnId, tv);
  }
  app.lastTurn = tv;
  return tv;
}

/** rekey files a turn shown under its commandId under its real turnId. */
export function rekey(commandId, turnId) {
  const tv = app.turns.get(commandId);
  if (!tv || !turnId || tv.confirmed) return;
  tv.confirmed = true;
  if (commandId === turnId || app.turns.has(turnId)) return;
  app.turns.delete(commandId);
  app.turns.set(turnId, tv);
  tv.turnId = turnId;
  tv.el.dataset.turnId = turnId;
}

// A user message longer than this folds to a preview and its size.
const FOLD_BYTES = 4096;

/** ItemView is one message bubble. */
export class ItemView {
  constructor(kind) {
    this.isUser = kind === 'userMessage';
    this.turn = null; // the TurnView it is shown in
    this.item = { revision: 0, status: 'inProgress' };
    this.note = ''; // about a message of ours: "not sent", …
    this.source = ''; // the text as the server has it
    this.el = el('div', `msg ${this.isUser ? 'user' : 'agent'}`);
    this.el.append(el('span', 'visually-hidden', this.isUser ? 'You: ' : 'Assistant: '));
    this.textEl = el('div', this.isUser ? 'text' : 'text md');
    this.tag = el('span', 'tag');
    this.tag.hidden = true;
    if (this.isUser) {
      this.gallery = new Gallery();
      this.el.append(this.gallery.el);
    }
    this.el.append(this.textEl, this.tag);
    this.timer = null;
    this.paintedAt = 0;
    this.cost = 0; // how long the last Markdown render took, in ms
  }

  setText(text) {
    this.source = text;
    this.paint();
  }

  append(delta) {
    this.source += delta;
    this.schedule();
  }

  /**
   * schedule repaints a streaming answer soon: at most every 50 ms, and
   * less often when rendering is slow, so a long answer stays smooth.
   */
  schedule() {
    if (this.timer) return;
    const wait = this.paintedAt + Math.max(50, 4 * this.cost) - performance.now();
    if (wait <= 0) this.paint();
    else this.timer = setTimeout(() => this.paint(), wait);
  }

  paint() {
    clearTimeout(this.timer);
    this.timer = null;
    const start = performance.now();
    if (this.isUser) this.paintUser();
    else this.textEl.replaceChildren(renderMarkdown(this.source));
    // Lay it out now, so that the cost that paces repaints counts
    // layout too: a long answer in a narrow window mostly costs that.
    void this.el.offsetHeight;
    this.paintedAt = performance.now();
    this.cost = this.paintedAt - start;
  }

  /** paintUser shows a message as typed, folding a long paste. */
  paintUser() {
    const text = this.source;
    this.textEl.hidden = text === '' && !this.gallery.el.hidden;
    const bytes = new TextEncoder().encode(text).length;
    if (bytes <= FOLD_BYTES) {
      this.textEl.textContent = text;
      return;
    }
    const lines = text.split('\n').length;
    let preview = text.slice(0, 280);
    const cut = preview.lastIndexOf('\n', 200);
    if (cut > 40) preview = preview.slice(0, cut);
    const fold = el('details', 'paste');
    fold.append(el('summary', null, `Show all · ${size(bytes)} · ${plural(lines, 'line')}`), el('pre', null, text));
    this.textEl.replaceChildren(el('p', 'paste-preview', `${preview.trimEnd()} …`), fold);
  }

  setTag(text) {
    this.tag.hidden = !text;
    this.tag.textContent = text || '';
  }

  render() {
    const { status } = this.item;
    this.el.dataset.status = status;
    this.el.classList.toggle('streaming', status === 'inProgress' && !this.isUser);
    this.setTag(status === 'inProgress' || status === 'completed' ? this.note : endedTag(this.item));
  }
}

// A message's tag by how it ended. A stopped answer has none: its
// turn's footer says "■ stopped", once.
const ENDED_TAGS = { failed: 'discarded attempt', cancelled: '', rejected: 'rejected', timedOut: 'timed out' };

/**
 * endedTag words how a message that did not complete ended, from the
 * item alone (as the log holds it), so a chat reads the same live and
 * rebuilt after a reload.
 */
function endedTag(item) {
  if (item.status === 'failed' && !item.text) return 'discarded attempt · cut off before any text was saved';
  return Object.hasOwn(ENDED_TAGS, item.status) ? ENDED_TAGS[item.status] : item.status;
}

/** upsertMessage shows a user or agent message, replacing an older revision of it. */
export function upsertMessage(item) {
  if (item.kind !== 'userMessage' && item.kind !== 'agentMessage') return;
  let view = app.items.get(item.itemId);
  if (view && item.revision <= view.item.revision) return;
  if (!view && item.kind === 'userMessage' && app.echoes.has(item.commandId)) {
    // Our own message, shown when it was sent: adopt it.
    view = app.echoes.get(item.commandId);
    app.echoes.delete(item.commandId);
    view.note = '';
    rekey(item.commandId, item.turnId);
  }
  if (!view) {
    view = new ItemView(item.kind);
    const tv = turnView(item.turnId);
    // A regenerate's message is the one it repeats: its turn is a version.
    if (item.regenerates) linkVersion(tv, item.regenerates);
    if (item.kind === 'userMessage') tv.setUser(view);
    else {
      view.turn = tv;
      tv.add(view.el);
      // A new answer attempt began: the retry before it ran.
      if (tv.status) tv.status.attemptBegan();
    }
  }
  view.el.dataset.itemId = item.itemId;
  app.items.set(item.itemId, view);
  const previous = view.item;
  view.item = item;
  if (typeof item.text === 'string') {
    // The item's text, as the log holds it, replaces what streamed: an
    // attempt cut by a crash keeps only what was saved (deltas are not
    // durable), as it reads after a reload.
    if (item.text !== view.source) view.setText(item.text);
    else if (view.timer) view.paint();
  } else if (previous.text == null && view.source !== '') view.setText('');
  if (view.isUser && Array.isArray(item.attachments) && item.attachments.length &&
      (!previous.attachments || previous.attachments.length !== item.attachments.length)) {
    view.gallery.setAttachments(item.attachments, app.current, item.itemId);
    view.paint();
  }
  view.render();
  if (view.turn) view.turn.stamp(view);
}

/**
 * discardOpenAnswers ends a turn's answers still streaming once the turn
 * has moved on (a retry notice, its terminal): their attempt is over.
 * The server closes such an answer itself, unless it died before saving
 * any of its text: then the log holds nothing of it. Until then it shows
 * as the log has it (what streamed was not saved), as after a reload. Its
 * revision stays, so that an item/completed the server does send still
 * replaces it.
 */
export function discardOpenAnswers(turnId) {
  for (const view of app.items.values()) {
    if (!view.isUser && view.item.turnId === turnId && view.item.status === 'inProgress') {
      view.item = { ...view.item, status: 'failed' };
      view.setText(view.item.text || '');
      view.render();
    }
  }
  for (const view of app.reasoning.values()) {
    if (view.item.turnId === turnId && view.item.status === 'inProgress') view.discard();
  }
}

export function setRunning(turnId) {
  app.running = turnId || null;
  if (app.stopping && app.stopping !== app.running) app.stopping = null;
  ui.stop.hidden = !app.running;
  ui.stop.disabled = !!app.stopping;
  if (!app.stopping) ui.stop.textContent = 'Stop';
  ui.transcript.setAttribute('aria-busy', app.running ? 'true' : 'false');
}

// What an empty transcript says, as index.html has it.
const EMPTY_TEXT = ui.empty.textContent;

/**
 * resetTranscript empties the view for a (re)loaded session; note, if
 * any, goes before what the empty view says (why the chat left).
 */
export function resetTranscript(note = '') {
  ui.transcript.replaceChildren(ui.empty);
  ui.empty.textContent = note ? `${note} ${EMPTY_TEXT}` : EMPTY_TEXT;
  ui.empty.hidden = false;
  app.turns.clear();
  app.items.clear();
  app.tools.clear();
  app.approvals.clear();
  app.echoes.clear();
  app.notices.clear();
  app.reasoning.clear();
  app.compactions.clear();
  app.lastTurn = null;
  app.askedModel = null;
  resetFollow();
  setRunning(null);
  showContext(null);
  showChatCost(null);
  compactNote('');
  syncCompact();
}
