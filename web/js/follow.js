// Following the answer: while the reader is at the end of the transcript
// it stays at the end, whatever grows it (a streamed delta, Markdown
// rendered again, an image loading, a tool row, a reasoning block, the
// message box growing); once the reader scrolls up it stays where they
// left it, and "↓ New reply below" takes them back and follows again.
//
// Why a ResizeObserver: a delta's text is painted later (transcript.js
// paces repaints), so the height is not known when an event is applied.
// Watching every turn's box catches each change in height after layout
// and before paint, whoever made it.

import { announce } from './chrome.js';
import { app, ui } from './state.js';

// How close to the end counts as "at the end", in CSS pixels: subpixel
// layout leaves a pixel or so after a scroll to the very end.
const SLACK = 4;

// How long after a reader's wheel, touch or key a scroll is theirs, in
// ms; a scroll with no such input near it is the page's own.
const INTENT_MS = 1000;

// Keys that scroll the transcript when it (or something in it) has focus.
const SCROLL_KEYS = new Set(['ArrowUp', 'ArrowDown', 'PageUp', 'PageDown', 'Home', 'End', ' ', 'Tab']);

/**
 * follow is the transcript's scrolling state: 'following' keeps it at the
 * end; 'reading' leaves it where the reader scrolled. grewBelow tells
 * that something came below a reader, to word the button and say it once;
 * userAt is when the reader last wheeled, touched or pressed a key;
 * setTop is where the page last put the transcript.
 */
const follow = { mode: 'following', userAt: -Infinity, grewBelow: false, setTop: 0 };

const atEnd = () => {
  const t = ui.transcript;
  return t.scrollHeight - t.scrollTop - t.clientHeight <= SLACK;
};

/** toEnd scrolls the transcript to its end, as the page (not the reader). */
function toEnd() {
  const t = ui.transcript;
  t.scrollTop = t.scrollHeight;
  follow.setTop = t.scrollTop;
}

function setMode(mode) {
  follow.mode = mode;
  if (mode === 'following') follow.grewBelow = false;
  syncJump();
}

/** syncJump shows the button while the reader is away from the end. */
function syncJump() {
  const away = follow.mode === 'reading';
  ui.jump.hidden = !away;
  ui.jump.textContent = follow.grewBelow || app.running ? '↓ New reply below' : '↓ Back to the latest';
}

/** grew runs after any change in the transcript's layout. */
function grew() {
  if (follow.mode === 'following') {
    toEnd();
    return;
  }
  if (atEnd() || follow.grewBelow) return;
  follow.grewBelow = true;
  syncJump();
  announce('New reply below.');
}

/** jumpToEnd goes to the end and follows again (the button, a sent message). */
export function jumpToEnd() {
  toEnd();
  setMode('following');
}

/**
 * resetFollow follows a transcript emptied for another chat: a chat
 * opens at its end.
 */
export function resetFollow() {
  follow.userAt = -Infinity;
  setMode('following');
}

const intent = () => {
  follow.userAt = performance.now();
};

/**
 * scrolled decides, on each scroll, whether the reader left the end: a
 * scroll up from where the page put the transcript, right after their
 * input. A scroll event comes after the fact, when more may have grown
 * below: being short of the end is not enough.
 */
function scrolled() {
  const t = ui.transcript;
  if (atEnd()) {
    if (follow.mode === 'reading') setMode('following');
    return;
  }
  const up = t.scrollTop < follow.setTop - SLACK;
  if (follow.mode === 'following' && up && performance.now() - follow.userAt < INTENT_MS) setMode('reading');
}

/**
 * watchFollow starts following: each turn's box is observed as it is
 * added, and the reader's own scrolling input is told from the page's.
 */
export function watchFollow() {
  const t = ui.transcript;
  const sizes = new ResizeObserver(grew);
  sizes.observe(t); // the window or the message box changed its height
  for (const child of t.children) sizes.observe(child);
  new MutationObserver((changes) => {
    for (const c of changes) {
      for (const n of c.addedNodes) if (n.nodeType === Node.ELEMENT_NODE) sizes.observe(n);
      // Turns of a chat left behind: let them go.
      for (const n of c.removedNodes) if (n.nodeType === Node.ELEMENT_NODE) sizes.unobserve(n);
    }
    grew();
  }).observe(t, { childList: true });

  t.addEventListener('wheel', (ev) => {
    intent();
    // Up, over something to scroll: the reader leaves the end now, before
    // the next delta could take them back.
    if (ev.deltaY < 0 && t.scrollHeight > t.clientHeight) setMode('reading');
  }, { passive: true });
  t.addEventListener('touchstart', intent, { passive: true });
  t.addEventListener('touchmove', intent, { passive: true });
  // A press on the transcript itself is on its scrollbar; one on its
  // text may start a selection, which the button must not stop: dragged
  // down past the end, the pointer reaches the text through it, so that
  // the selection goes on, and the transcript scrolls, to the end.
  t.addEventListener('pointerdown', (ev) => {
    if (ev.target === t) intent();
    else if (ev.button === 0) ui.jump.classList.add('passing');
  });
  for (const type of ['pointerup', 'pointercancel']) {
    window.addEventListener(type, () => ui.jump.classList.remove('passing'));
  }
  t.addEventListener('keydown', (ev) => {
    if (SCROLL_KEYS.has(ev.key)) intent();
  });
  t.addEventListener('scroll', scrolled, { passive: true });
  ui.jump.addEventListener('click', () => {
    jumpToEnd();
    ui.transcript.focus({ preventScroll: true });
  });
  syncJump();
}
