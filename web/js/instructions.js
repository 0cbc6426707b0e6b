// The Instructions dialog: the next chat's instructions, or the open
// chat's (fixed once it started), edited into a new chat.

import { announce } from './chrome.js';
import { app, ui } from './state.js';
import { size } from './words.js';

const MAX_INSTRUCTIONS_BYTES = 32 << 10;

/**
 * instructionsActions are what the dialog does beyond itself: start a
 * chat (sessions.js's newChat). main.js sets it: starting a chat marks
 * the Instructions button, so sessions.js imports this module.
 */
export const instructionsActions = { newChat: null };

const byteLength = (text) => new TextEncoder().encode(text).length;

/** syncInstructionsButton marks the button when the chat (or the next one) has instructions. */
export function syncInstructionsButton() {
  const text = app.current ? app.instructions : app.nextInstructions;
  ui.instructionsOpen.dataset.set = text ? 'true' : 'false';
  ui.instructionsOpen.setAttribute('aria-label', text
    ? `Instructions: set for ${app.current ? 'this chat' : 'new chats'}`
    : `Instructions: none for ${app.current ? 'this chat' : 'new chats'}`);
}

/**
 * showInstructions sets the dialog up for one of its modes: "next" (no
 * chat open: the next chat's, editable), "view" (a chat's, read-only:
 * mspd takes a session's instructions only at session/start) or "new"
 * (a chat's, edited into a new chat).
 */
export function showInstructions(mode) {
  const d = ui.instructionsDialog;
  d.dataset.mode = mode;
  const area = ui.instructions;
  area.readOnly = mode === 'view';
  ui.instructionsEdit.hidden = mode !== 'view';
  ui.instructionsSave.hidden = mode === 'view';
  ui.instructionsCancel.textContent = mode === 'view' ? 'Close' : 'Cancel';
  if (mode === 'next') {
    ui.instructionsNote.textContent = 'Sent to the model with every message of the chats you start next, after the server’s own instructions. ' +
      'A chat keeps the instructions it started with: they cannot be changed later.';
    ui.instructionsSave.textContent = 'Use for new chats';
  } else if (mode === 'view') {
    ui.instructionsNote.textContent = app.instructions
      ? 'This chat’s instructions are fixed: the server takes them only when a chat starts. To change them, edit them into a new chat.'
      : 'This chat has no instructions; the server takes them only when a chat starts. To add some, start a new chat with them.';
  } else {
    ui.instructionsNote.textContent = 'A new chat starts with these instructions; this chat stays as it is.';
    ui.instructionsSave.textContent = 'Start new chat';
  }
  area.placeholder = mode === 'view' ? 'No instructions.' : 'For example: Answer in French, briefly.';
  countInstructions();
}

/** countInstructions shows how much of the 32 KB the text takes, and whether it may be saved. */
export function countInstructions() {
  const n = byteLength(ui.instructions.value);
  const over = n > MAX_INSTRUCTIONS_BYTES;
  ui.instructionsCount.textContent = over
    ? `Too long: ${n.toLocaleString('en')} bytes, at most ${MAX_INSTRUCTIONS_BYTES.toLocaleString('en')}.`
    : `${size(n)} of ${size(MAX_INSTRUCTIONS_BYTES)}`;
  ui.instructionsCount.classList.toggle('over', over);
  ui.instructionsSave.disabled = over;
}

export function openInstructions() {
  ui.instructions.value = app.current ? app.instructions : app.nextInstructions;
  showInstructions(app.current ? 'view' : 'next');
  ui.instructionsOpen.setAttribute('aria-expanded', 'true');
  ui.instructionsDialog.showModal();
  (app.current ? ui.instructionsEdit : ui.instructions).focus();
}

export function closeInstructions() {
  if (ui.instructionsDialog.open) ui.instructionsDialog.close();
}

export async function saveInstructions() {
  const text = ui.instructions.value.trim();
  if (byteLength(text) > MAX_INSTRUCTIONS_BYTES) return;
  const mode = ui.instructionsDialog.dataset.mode;
  app.nextInstructions = text;
  if (mode === 'new') {
    ui.instructionsSave.disabled = true;
    try {
      await instructionsActions.newChat();
    } finally {
      ui.instructionsSave.disabled = false;
    }
    closeInstructions();
    ui.input.focus();
    announce(text ? 'A new chat started with your instructions.' : 'A new chat started with no instructions.');
    return;
  }
  closeInstructions();
  syncInstructionsButton();
  announce(text ? 'Instructions set for new chats.' : 'No instructions for new chats.');
}
