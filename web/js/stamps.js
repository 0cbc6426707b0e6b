// Message times: when a message was recorded, from its item's recordedAt
// in the session's log (the user's message: when the server took it; an
// answer: when it ended), so a reloaded chat shows the same times. The
// time sits in the row under its message — the user's beside Edit, the
// answer's in the turn's footer — and shows on hover, on keyboard focus
// in that row, and on a tap on the row (touch screens have no hover).

import { el } from './dom.js';

const clock = new Intl.DateTimeFormat(undefined, { hour: 'numeric', minute: '2-digit' });
const day = new Intl.DateTimeFormat(undefined, { day: 'numeric', month: 'short', hour: 'numeric', minute: '2-digit' });
const full = new Intl.DateTimeFormat(undefined, { dateStyle: 'full', timeStyle: 'long' });

/** timeWords words a recorded time: "14:05" today, "3 May, 14:05" before. */
export function timeWords(date, now = new Date()) {
  return date.toDateString() === now.toDateString() ? clock.format(date) : day.format(date);
}

/**
 * stamp shows a recorded time in a message's row: a <time> with the
 * instant in datetime and the full date in its title. A row keeps one;
 * a later time (an answer's next step) replaces it.
 */
export function stamp(row, recordedAt) {
  const date = new Date(recordedAt);
  if (!row || !recordedAt || Number.isNaN(date.getTime())) return;
  let t = row.querySelector(':scope > time.msg-time');
  if (!t) {
    t = el('time', 'msg-time');
    row.append(t);
  }
  t.dateTime = recordedAt;
  t.textContent = timeWords(date);
  t.title = full.format(date);
}

/**
 * showTimesOnTap lets a tap on a message's row (not on one of its
 * controls) show or hide its time, where there is no hover.
 */
export function showTimesOnTap(row) {
  row.addEventListener('click', (ev) => {
    if (ev.target.closest('button, a, summary, details[open] > :not(summary)')) return;
    row.toggleAttribute('data-times');
  });
}
