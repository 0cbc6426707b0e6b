// Retries: a turn's retry status — the countdown to the next attempt, a
// fallback or a skipped provider — and the ticker that counts down.

import { el } from './dom.js';
import { app } from './state.js';
import { breakerWords, duration, fallbackWords, kindWords, skippedWords } from './words.js';

/**
 * RetryStatus is a turn's one retry status: "retrying in 3 s · attempt
 * 2 of 5 · rate limited", counting down; then "retried" once the next
 * attempt has started, "retry cancelled" when Stop ended the wait.
 * Each notice's technical detail is one click away.
 */
export class RetryStatus {
  constructor(tv) {
    this.tv = tv;
    this.state = 'waiting'; // → due → retried | cancelled | notRun
    this.el = el('div', 'retry');
    const line = el('div', 'retry-line');
    const icon = el('span', 'retry-icon', '⟳');
    icon.setAttribute('aria-hidden', 'true');
    this.textEl = el('span', 'retry-text');
    this.list = el('ul');
    this.details = el('details', 'tech');
    this.details.append(el('summary', null, 'details'), this.list);
    line.append(icon, this.textEl, this.details);
    this.el.append(line);
    this.last = null;
  }

  /**
   * schedule shows a new notice (model: turn/modelRetryScheduled); the
   * one before it, if any, ran, since this one follows its attempt.
   */
  schedule(p, model, emittedAtMs) {
    if (model && p.fallback) {
      this.reroute(p, fallbackWords(p), `Attempt ${p.attempt} of ${p.maxAttempts} failed (${[p.system && `system ${p.system}`,
        p.errorKind && `errorKind ${p.errorKind}`, p.httpStatus && `HTTP ${p.httpStatus}`].filter(Boolean).join(', ')}); ` +
        `the turn left ${p.system || 'its provider'}${p.fallbackReason ? ` (${p.fallbackReason})` : ''}: ` +
        `attempt ${p.nextAttempt} goes to ${p.nextProviderId}${p.nextModelId ? ` · ${p.nextModelId}` : ''} at once.`);
      return;
    }
    const now = Date.now();
    let deadline = now + p.retryDelayMs;
    // Live, the server said when it scheduled the wait; a clock that
    // disagrees never makes the wait longer or negative.
    if (emittedAtMs) deadline = Math.min(deadline, Math.max(now, emittedAtMs + p.retryDelayMs));
    const why = model ? kindWords(p.errorKind) : p.reason;
    this.last = { ...p, model, why, deadline };
    this.state = 'waiting';
    const tech = model
      ? [p.system && `system ${p.system}`, p.errorKind && `errorKind ${p.errorKind}`, p.httpStatus && `HTTP ${p.httpStatus}`]
      : [`reason: ${p.reason}`];
    this.list.append(el('li', null,
      `Attempt ${p.attempt} of ${p.maxAttempts} failed (${tech.filter(Boolean).join(', ')}); ` +
      `attempt ${p.nextAttempt} after ${duration(p.retryDelayMs)}.`));
    // The status follows the attempt that failed.
    this.tv.add(this.el);
    this.render();
    tickSoon();
  }

  /**
   * reroute shows a fallback or a skipped provider: who answers now,
   * with no countdown (the next provider is asked at once).
   */
  reroute(p, text, detail) {
    this.last = { ...p, rerouted: true, text };
    this.state = 'rerouted';
    this.tv.rerouted = true;
    this.list.append(el('li', null, detail));
    this.tv.add(this.el);
    this.render();
    this.tv.renderModel();
  }

  /** skipped shows turn/providerSkipped. */
  skipped(p) {
    this.reroute(p, skippedWords(p), `${p.providerId}${p.system && p.system !== p.providerId ? ` (${p.system})` : ''}` +
      `${p.modelId ? ` · ${p.modelId}` : ''} was skipped without a request: its ${breakerWords(p.breaker)}; ` +
      `${p.nextProviderId}${p.nextModelId ? ` · ${p.nextModelId}` : ''} answers.`);
  }

  /** attemptBegan: the next attempt's answer started. */
  attemptBegan() {
    if (this.state === 'waiting' || this.state === 'due') {
      this.state = 'retried';
      this.render();
    }
  }

  /** end settles a wait the turn's terminal cut short. */
  end(p) {
    if (this.state !== 'waiting' && this.state !== 'due') return;
    const ran = p.attempts && p.attempts.count >= this.last.nextAttempt;
    if (ran) this.state = 'retried';
    else this.state = p.terminal === 'cancelled' ? 'cancelled' : 'notRun';
    this.render();
  }

  /** tick counts down; it says whether the wait still runs. */
  tick() {
    if (this.state !== 'waiting') return false;
    if (this.last.deadline <= Date.now()) this.state = 'due';
    this.render();
    return this.state === 'waiting';
  }

  render() {
    const n = this.last;
    this.el.querySelector('.retry-icon').textContent = n.rerouted ? '↪' : '⟳';
    if (n.rerouted) {
      this.el.dataset.state = 'rerouted';
      this.textEl.textContent = n.text;
      return;
    }
    const left = Math.max(0, n.deadline - Date.now());
    const when = {
      waiting: `retrying in ${Math.max(1, Math.ceil(left / 1000))} s`,
      due: 'retrying now',
      retried: 'retried',
      cancelled: 'retry cancelled',
      notRun: 'retry did not run',
    }[this.state];
    this.el.dataset.state = this.state;
    this.textEl.textContent = `${when} · attempt ${n.nextAttempt} of ${n.maxAttempts} · ${n.why}`;
  }
}

let ticker = null;

function tickSoon() {
  if (!ticker) ticker = setInterval(tick, 250);
}

/** tick refreshes every counting-down status. */
function tick() {
  let waiting = 0;
  for (const tv of app.turns.values()) if (tv.status && tv.status.tick()) waiting++;
  if (!waiting) {
    clearInterval(ticker);
    ticker = null;
  }
}
