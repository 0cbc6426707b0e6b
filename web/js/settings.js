// The chat's settings pickers: tool approvals (session/setApprovalMode)
// and reasoning effort (session/setReasoningEffort), for the chat on
// screen or the next one.

import { announce } from './chrome.js';
import { uuidv7 } from './dom.js';
import { command } from './rpc.js';
import { app, ui } from './state.js';

/** showApprovalMode shows the chat's approval mode in the setting. */
export function showApprovalMode(mode) {
  const sel = ui.approvalMode;
  if (![...sel.options].some((o) => o.value === mode)) return; // a mode this page does not know
  sel.value = mode;
  sel.dataset.value = mode;
}

export async function pickApprovalMode() {
  const sel = ui.approvalMode;
  const mode = sel.value;
  const label = sel.selectedOptions[0].textContent;
  if (!app.current) {
    app.nextApprovalMode = mode;
    sel.dataset.value = mode;
    announce(`Tool approvals for the next chat: ${label}.`);
    return;
  }
  const previous = sel.dataset.value;
  try {
    await command('session/setApprovalMode', { commandId: uuidv7(), sessionId: app.current, mode });
    sel.dataset.value = mode;
    announce(`Tool approvals: ${label}.`);
  } catch (err) {
    if (previous) sel.value = previous; // the chat kept its mode
    throw err;
  }
}

/**
 * showEffort shows a reasoning effort in the picker: the chat's
 * (Session.reasoningEffort) or, with none open, the next chat's. mspd
 * takes a tier for a chat but has no way to take it back to the
 * model's default, so a chat that has one offers Default no more.
 */
export function showEffort(effort) {
  const sel = ui.effort;
  const value = effort || '';
  if (![...sel.options].some((o) => o.value === value)) return; // a tier this page does not know
  sel.value = value;
  sel.dataset.value = value;
  const fixed = !!app.current && value !== '';
  sel.options[0].disabled = fixed;
  sel.title = fixed ? 'This chat has its own reasoning effort: it can change, but not go back to the model’s default.' : '';
}

/** effortOf is a Session object's reasoning effort, '' for none. */
export const effortOf = (s) => (s && s.reasoningEffort && s.reasoningEffort.reasoningEffort) || '';

/** effortLabel names a tier as the picker does. */
const effortLabel = (value) => {
  const o = [...ui.effort.options].find((x) => x.value === value);
  return o ? o.textContent : value;
};

/** setEffort sets a chat's reasoning effort (session/setReasoningEffort). */
export function setEffort(sessionId, effort) {
  return command('session/setReasoningEffort', { commandId: uuidv7(), sessionId, reasoningEffort: effort });
}

export async function pickEffort() {
  const sel = ui.effort;
  const value = sel.value;
  const label = effortLabel(value);
  if (!app.current) {
    app.nextEffort = value;
    sel.dataset.value = value;
    announce(`Reasoning for the next chat: ${label}.`);
    return;
  }
  const previous = sel.dataset.value || '';
  if (!value) { // Default cannot be set again: the option is off, but a keyboard may still land here
    sel.value = previous;
    return;
  }
  try {
    await setEffort(app.current, value);
    // session/reasoningEffortChanged follows, in every tab.
    showEffort(value);
    announce(`Reasoning: ${label}, from this chat's next message.`);
  } catch (err) {
    sel.value = previous; // the chat kept its effort
    throw err;
  }
}
