// Approvals: the card under a tool call that waits for a person, its
// choices and how it was resolved; server requests (approval/request).

import { announce } from './chrome.js';
import { button, el, uuidv7 } from './dom.js';
import { command, rpc } from './rpc.js';
import { app, ui } from './state.js';
import { upsertTool } from './tools.js';
import { kindWords, prettyJSON } from './words.js';

// The choices mspd offers, as this page words them (the request's own
// labels say "session"; here a session is a chat).
const CHOICE_WORDS = {
  approve: 'Approve once',
  approveForSession: 'Approve for this chat',
  deny: 'Deny',
};

/** resolutionWords words how an approval was resolved, as its card says it. */
function resolutionWords(decision, resolvedBy, feedback) {
  switch (decision) {
    case 'approved': return { mark: '✓', text: 'Approved once' };
    case 'approvedForSession': return { mark: '✓', text: 'Approved for this chat' };
    case 'denied':
      if (resolvedBy === 'policy') return { mark: '✗', text: "Denied: this chat's approval setting denies the tool" };
      return { mark: '✗', text: feedback ? `Denied: ${feedback}` : 'Denied' };
    case 'timedOut': return { mark: '✗', text: 'Timed out: nobody decided in time' };
    case 'abort': return { mark: '■', text: 'Stopped: the answer was stopped before anyone decided' };
    default: return { mark: '·', text: `Decided: ${kindWords(decision)}` };
  }
}

/**
 * ApprovalCard is a pending approval of one tool call: what the tool is
 * (its name, server and arguments, as text), and the choices — Approve
 * once, Approve for this chat, Deny (with an optional word for the
 * model). Once resolved, by anyone anywhere, it turns into the outcome.
 * It is a labelled group; screen readers hear it arrive through the
 * page's live region.
 */
class ApprovalCard {
  constructor(req, tool) {
    this.req = req;
    this.tool = tool;
    this.state = 'pending'; // → sending → resolved
    this.feedback = ''; // what this tab sent with a denial
    this.announced = false;
    this.el = el('section', 'approval');
    this.el.dataset.approvalId = req.approvalId;
    this.el.setAttribute('role', 'group');
    this.el.tabIndex = -1;
    this.render();
  }

  /** names are the tool and its server, from the call's item when known. */
  names() {
    const it = this.tool.item;
    return { tool: it.tool || this.req.toolName || 'tool', server: it.server || '' };
  }

  choices() {
    const offered = Array.isArray(this.req.availableChoices) ? this.req.availableChoices : [];
    return offered.filter((c) => c && typeof c.choiceId === 'string');
  }

  render() {
    const { tool, server } = this.names();
    const title = el('p', 'approval-title');
    title.id = `approval-${this.req.approvalId}`;
    title.append(el('span', 'approval-tool', tool), ' needs your approval');
    this.el.setAttribute('aria-labelledby', title.id);
    const what = el('p', 'approval-what');
    what.append(server ? `Server ${server}` : 'Server unknown', ` · asked as ${this.req.toolName || tool} · arguments:`);
    const args = this.req.rawArgs;
    const argsEl = args == null || args === '' ? el('p', 'tool-empty', 'none') : el('pre', 'approval-args', prettyJSON(args));
    const actions = el('div', 'approval-actions');
    for (const c of this.choices()) {
      const words = CHOICE_WORDS[c.choiceId] || c.label || c.choiceId;
      const cls = { approve: 'small primary', deny: 'small danger' }[c.choiceId] || 'small';
      const b = button(`${cls} choice`, words);
      b.dataset.choice = c.choiceId;
      if (c.acceptsFeedback) b.setAttribute('aria-expanded', 'false');
      b.addEventListener('click', () => {
        if (this.state !== 'pending') return; // a decision is on its way
        if (c.acceptsFeedback) this.openFeedback(c, b);
        else this.decide(c, '');
      });
      actions.append(b);
    }
    this.status = el('p', 'approval-status');
    this.status.hidden = true;
    this.el.replaceChildren(title, what, argsEl, actions, this.status);
    this.actions = actions;
  }

  /** openFeedback shows the box for a word to the model with a denial. */
  openFeedback(choice, opener) {
    if (this.form) {
      this.form.querySelector('textarea').focus();
      return;
    }
    const form = el('form', 'approval-feedback');
    const area = el('textarea');
    area.id = `approval-feedback-${this.req.approvalId}`;
    area.rows = 2;
    area.maxLength = 2000;
    const label = el('label', null, 'Tell the model why (optional)');
    label.htmlFor = area.id;
    const send = el('button', 'small danger', 'Deny');
    send.type = 'submit';
    send.setAttribute('aria-label', 'Deny the call');
    const cancel = button('small', 'Cancel');
    const buttons = el('div', 'approval-actions');
    buttons.append(send, cancel);
    form.append(label, area, buttons);
    this.form = form;
    opener.setAttribute('aria-expanded', 'true');
    this.el.insertBefore(form, this.status);
    area.focus();
    const close = () => {
      if (this.state !== 'pending') return;
      form.remove();
      this.form = null;
      opener.setAttribute('aria-expanded', 'false');
      opener.focus();
    };
    cancel.addEventListener('click', close);
    form.addEventListener('keydown', (ev) => {
      if (ev.key === 'Escape') {
        ev.preventDefault(); // not the page's Esc, which stops the answer
        close();
      } else if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing && ev.target === area) {
        ev.preventDefault();
        form.requestSubmit();
      }
    });
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      if (this.state === 'pending') this.decide(choice, area.value.trim());
    });
  }

  /**
   * setBusy marks the card's controls inactive while a decision is on
   * its way — aria-disabled, not disabled, so that the focused button
   * keeps focus (a disabled one drops it to the page) and the outcome
   * can take it over.
   */
  setBusy(busy) {
    for (const b of this.el.querySelectorAll('button')) b.setAttribute('aria-disabled', String(busy));
    const area = this.el.querySelector('textarea');
    if (area) area.readOnly = busy;
  }

  say(text, failed = false) {
    this.status.hidden = !text;
    this.status.textContent = text;
    this.status.classList.toggle('failed', failed);
  }

  /** decide sends approval/decide with a fresh commandId. */
  async decide(choice, feedback) {
    if (this.state !== 'pending') return;
    this.state = 'sending';
    this.focused = this.el.contains(document.activeElement); // the outcome takes focus over
    this.setBusy(true);
    this.say('Sending…');
    const params = {
      commandId: uuidv7(),
      sessionId: this.req.sessionId,
      approvalId: this.req.approvalId,
      choiceId: choice.choiceId,
      requirementId: this.req.currentRequirementId,
    };
    if (feedback) params.feedback = feedback;
    if (choice.choiceId === 'deny') this.feedback = feedback;
    try {
      await command('approval/decide', params, () => this.say('Offline: the decision goes as soon as the connection is back.'));
      // approval/resolved, which every tab gets, turns the card.
      if (this.state === 'sending') this.say('Decided; waiting for the server…');
    } catch (err) {
      this.refused(err);
    }
  }

  /** refused shows, in words, why a decision was not taken. */
  refused(err) {
    if (this.state === 'resolved') return;
    if (err.kind === 'approvalAlreadyResolved' && err.data.resolution) {
      const r = err.data.resolution;
      this.resolve(r.decision, r.resolvedBy, 'Already decided elsewhere: ');
      return;
    }
    const words = {
      approvalNotFound: 'The server does not know this approval any more.',
      approvalChoiceInvalid: 'The server does not offer that choice any more; reload the chat.',
      approvalRequirementStale: 'The approval changed meanwhile; reload the chat to see it again.',
    }[err.kind];
    this.state = 'pending';
    this.setBusy(false);
    const text = words || `The decision was not taken: ${err.message}${err.kind ? ` (${err.kind})` : ''}. Try again.`;
    this.say(text, true);
    announce(text);
  }

  /** resolve turns the card into the outcome. */
  resolve(decision, resolvedBy, prefix = '') {
    const a = document.activeElement;
    const within = this.el.contains(a) || (this.focused && (!a || a === document.body));
    this.state = 'resolved';
    this.form = null;
    const words = resolutionWords(decision, resolvedBy, decision === 'denied' ? this.feedback : '');
    const line = el('p', 'approval-outcome');
    const mark = el('span', 'approval-mark', words.mark);
    mark.setAttribute('aria-hidden', 'true');
    line.append(mark, ` ${prefix}${words.text}`);
    line.tabIndex = -1;
    this.el.dataset.decision = decision;
    this.el.classList.add('resolved');
    this.el.removeAttribute('aria-labelledby');
    this.el.setAttribute('aria-label', `Approval of ${this.names().tool}`);
    this.el.replaceChildren(line);
    this.tool.render();
    if (within) {
      line.focus();
      announce(`${this.names().tool}: ${prefix}${words.text}.`);
    }
  }
}

/**
 * showApproval shows a pending approval (approval/requested from the
 * log, approval/request from the server, approval/listPending) on its
 * call's row. asked: the server presents it now, so it is said aloud,
 * once, and focus moves to it unless the person is typing.
 */
export function showApproval(req, asked) {
  if (!req || !req.approvalId || !req.itemId) return;
  let card = app.approvals.get(req.approvalId);
  if (!card) {
    let tool = app.tools.get(req.itemId);
    if (!tool) {
      // Its item/started is not here (a gap): show the call from the
      // approval, below any real revision of its item.
      upsertTool({ itemId: req.itemId, kind: 'toolCall', revision: 0, status: 'inProgress', turnId: req.turnId,
        tool: req.toolName, args: req.rawArgs, callId: req.toolCallId });
      tool = app.tools.get(req.itemId);
    }
    card = new ApprovalCard(req, tool);
    app.approvals.set(req.approvalId, card);
    tool.attach(card);
  }
  if (asked && card.state === 'pending' && !card.announced) {
    card.announced = true;
    announce(`${card.names().tool} needs your approval.`);
    const a = document.activeElement;
    const typing = a && (a.tagName === 'TEXTAREA' || a.tagName === 'INPUT' || a.tagName === 'SELECT' || a.isContentEditable);
    const busy = a && a.closest && a.closest('.approval, #drawer, .edit-form, .row-form');
    if (!typing && !busy && !ui.main.inert) card.el.focus({ preventScroll: true });
    card.el.scrollIntoView({ block: 'nearest' });
  }
}

/** approvalResolved turns an approval's card into its outcome. */
export function approvalResolved(p) {
  let card = app.approvals.get(p.approvalId);
  if (!card) {
    const tool = app.tools.get(p.itemId);
    if (!tool) return;
    // Its request is not here (a gap): the outcome alone.
    card = new ApprovalCard({ approvalId: p.approvalId, itemId: p.itemId, sessionId: p.sessionId, availableChoices: [] }, tool);
    app.approvals.set(p.approvalId, card);
    tool.attach(card);
  }
  if (card.state !== 'resolved') card.resolve(p.decision, p.resolvedBy);
}

/** showPending asks for a session's pending approvals and shows them. */
export async function showPending(sessionId, epoch) {
  const res = await rpc.call('approval/listPending', { sessionId });
  if (epoch !== app.epoch) return;
  for (const req of res.approvals || []) showApproval(req, true);
}
