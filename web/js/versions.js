// Versions of an answer: the turns that Regenerate and Retry made of one
// message (mspd's turn/start regenerate, whose turn/started and
// userMessage say which turn they regenerate; docs/sessions.md). They
// show as one slot: one version's turn at a time — its message, answer,
// tool rows, reasoning and footer — under a pager "‹ 2 / 3 ›". Each
// version keeps its own <article class="turn">, side by side in the
// transcript, the others hidden, so that every module that fills a turn
// goes on filling its own.

import { announce } from './chrome.js';
import { button, el } from './dom.js';
import { app } from './state.js';

/** Versions is one slot: the turns answering one message, oldest first. */
class Versions {
  constructor(first) {
    this.turns = [first];
    first.versions = this;
  }

  /** add makes tv the newest version, placed after the others, and shows it. */
  add(tv) {
    this.turns[this.turns.length - 1].el.after(tv.el);
    this.turns.push(tv);
    tv.versions = this;
    this.show(tv);
  }

  /** remove takes back a version the server refused, showing the one before. */
  remove(tv) {
    const at = this.turns.indexOf(tv);
    if (at < 0) return;
    this.turns.splice(at, 1);
    tv.versions = null;
    this.show(this.turns[Math.max(0, at - 1)]);
  }

  /** newest is the latest version: the one a regenerate names. */
  newest() {
    return this.turns[this.turns.length - 1];
  }

  /** show shows tv's version alone, each pager saying which it is. */
  show(tv) {
    const n = this.turns.length;
    this.turns.forEach((t, i) => {
      t.el.hidden = t !== tv;
      pagerOf(t).render(i + 1, n);
    });
  }

  /**
   * step shows the version by (−1 or +1) from tv's, keeping the focus on
   * the pager (on its other button when this one ends the row), and says
   * which version it is.
   */
  step(tv, by) {
    const i = this.turns.indexOf(tv) + by;
    const to = this.turns[i];
    if (!to) return;
    this.show(to);
    const pager = pagerOf(to);
    const same = by < 0 ? pager.prev : pager.next;
    (same.disabled ? (by < 0 ? pager.next : pager.prev) : same).focus();
    announce(`Version ${i + 1} of ${this.turns.length}`);
  }
}

/** Pager is a turn's "‹ 2 / 3 ›", above its footer. */
class Pager {
  constructor(tv) {
    this.el = el('div', 'versions');
    this.el.setAttribute('role', 'group');
    this.el.setAttribute('aria-label', 'Versions of this answer');
    this.prev = button('small version-prev', '‹', 'Previous version');
    this.count = el('span', 'version-count');
    this.next = button('small version-next', '›', 'Next version');
    this.prev.addEventListener('click', () => tv.versions && tv.versions.step(tv, -1));
    this.next.addEventListener('click', () => tv.versions && tv.versions.step(tv, +1));
    this.el.append(this.prev, this.count, this.next);
    tv.placePager(this.el);
  }

  render(i, n) {
    this.el.hidden = n < 2;
    this.count.textContent = `${i} / ${n}`;
    this.prev.disabled = i <= 1;
    this.next.disabled = i >= n;
  }
}

function pagerOf(tv) {
  if (!tv.pager) tv.pager = new Pager(tv);
  return tv.pager;
}

/**
 * linkVersion files tv, a turn that regenerates the turn regenerates, as
 * the newest version of that turn's slot, and shows it: live (the pager
 * jumps to a new version) and when a chat's log is replayed. A turn the
 * page does not show (before a fork's cut) stays a turn of its own.
 */
export function linkVersion(tv, regenerates) {
  if (!tv || !regenerates || tv.versions) return;
  const prev = app.turns.get(regenerates);
  if (!prev || prev === tv) return;
  (prev.versions || new Versions(prev)).add(tv);
}

/** unlinkVersion takes a refused regenerate's turn out of its slot. */
export function unlinkVersion(tv) {
  if (tv.versions) tv.versions.remove(tv);
}

/** sameSlot tells whether two turns are versions of one message. */
export function sameSlot(a, b) {
  return a === b || (!!a.versions && a.versions === b.versions);
}
