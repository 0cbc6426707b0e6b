// Sending: a message with its images (turn/start), why a turn was refused,
// Retry and Regenerate, editing a message into a fork, Stop.

import { announce, catching, hideError } from './chrome.js';
import { draft, modelKey, renderTray, syncAttach, syncComposer } from './composer.js';
import { compactNote } from './context.js';
import { button, el, uuidv7 } from './dom.js';
import { base64Of, IMAGE_TYPES, MAX_IMAGE_BYTES, MAX_TURN_IMAGE_BYTES, MAX_TURN_IMAGES } from './images.js';
import { loadModels } from './models.js';
import { command, RpcError } from './rpc.js';
import { jumpToEnd } from './follow.js';
import { enter, newChat } from './sessions.js';
import { app, ui } from './state.js';
import { ItemView, rekey, setRunning, TurnView } from './transcript.js';
import { linkVersion, sameSlot, unlinkVersion } from './versions.js';
import { showHistory } from './view.js';
import { size } from './words.js';

/**
 * send sends a message: its text and images (read here, or parts of a
 * message sent again). Images read here show at once from their bytes.
 */
export async function send(text, images = [], parts = []) {
  let sessionId = app.current;
  if (!sessionId) {
    try {
      sessionId = await newChat();
    } catch (err) {
      // Nothing was sent: give the text and images back to their author.
      giveBack(text, images);
      throw err;
    }
  }
  const commandId = uuidv7();
  compactNote('');
  const { echo } = echoTurn(commandId, text, images.length ? images : parts.filter((p) => IMAGE_TYPES.includes(p.mediaType)).map((p) => ({
    mediaType: p.mediaType, width: p.width, height: p.height, url: `data:${p.mediaType};base64,${p.base64Data}`,
    byteLen: Math.floor((p.base64Data.length * 3) / 4),
  })));
  jumpToEnd();
  const input = text ? [{ type: 'text', text }] : [];
  for (const im of images) {
    input.push({ type: 'image', mediaType: im.mediaType, base64Data: base64Of(im.url), width: im.width, height: im.height });
  }
  input.push(...parts);
  try {
    await startTurn({ commandId, sessionId, input }, echo);
  } catch (err) {
    // Refused, not lost: the text and images go back to the composer,
    // to fix and send again.
    if (err.kind !== 'disconnected') giveBack(text, images);
    throw turnRefusal(err, input);
  }
}

/**
 * echoTurn shows a message being sent, with its images, as a turn filed
 * under its commandId until the server names the turn.
 */
function echoTurn(commandId, text, images) {
  const echo = new ItemView('userMessage');
  echo.gallery.setLocal(images);
  echo.setText(text);
  echo.render();
  const tv = new TurnView(commandId, false);
  app.turns.set(commandId, tv);
  app.lastTurn = tv;
  tv.setUser(echo);
  app.echoes.set(commandId, echo);
  return { tv, echo };
}

/** giveBack puts a message that was not sent back in an empty composer. */
function giveBack(text, images) {
  if (ui.input.value.trim() || draft.images.length) return;
  ui.input.value = text;
  draft.images = images.slice();
  renderTray();
  syncComposer();
}

/**
 * turnRefusal words why mspd refused a turn/start, for the images
 * above all (providers.md#images): the part it names is counted among
 * the images sent. A model that takes no images is remembered, and the
 * attach button turns off for it.
 */
function turnRefusal(err, input) {
  const d = err.data || {};
  const field = (d.details && d.details.field) || '';
  const m = /^input\.(\d+)/.exec(field);
  let which = 'An image';
  if (m && input[Number(m[1])] && input[Number(m[1])].type === 'image') {
    const n = input.slice(0, Number(m[1]) + 1).filter((p) => p.type === 'image').length;
    which = `Image ${n}`;
  }
  let words = null;
  if (err.kind === 'invalidParams' && d.reason === 'modelCannotTakeImages') {
    const model = (d.details && d.details.modelId) || 'This model';
    if (d.details && d.details.modelId) app.textOnly.add(modelKey(d.details.providerId, d.details.modelId));
    syncAttach();
    words = `${model} takes no images: pick a model that does, or send the message without them.`;
  } else if (err.kind === 'invalidParams' && d.reason === 'badImage') {
    words = field.endsWith('.mediaType')
      ? `${which} is of a type the server does not take: only PNG, JPEG, GIF and WebP.`
      : `${which} is not an image the server can read as its type says.`;
  } else if (err.kind === 'inputTooLarge' && field.endsWith('.base64Data')) {
    words = `${which} is too large for the server: at most ${size(d.limitBytes || MAX_IMAGE_BYTES)}.`;
  } else if (err.kind === 'inputTooLarge' && field === 'input') {
    words = `Too many images for one message: at most ${MAX_TURN_IMAGES}, and ${size(MAX_TURN_IMAGE_BYTES)} in all.`;
  } else if (err.kind === 'inputTooLarge' && !field && input.some((p) => p.type === 'image')) {
    words = `The message with its images is too large for this server: it takes at most ${size(d.limitBytes || 0)} a message ` +
      '(images go as base64, a third larger). Send fewer or smaller images.';
  }
  return words ? new RpcError(words, err.kind, err.method, d) : err;
}

/**
 * startTurn sends turn/start. When the connection drops first, the same
 * command goes again once reconnected (see command).
 */
async function startTurn(params, echo) {
  const note = (text) => {
    echo.note = app.echoes.get(params.commandId) === echo ? text : '';
    echo.render();
  };
  try {
    const ack = await command('turn/start', params, () => note('sending when reconnected…'));
    rekey(params.commandId, ack.turnId);
    note('');
  } catch (err) {
    note('not sent');
    throw err;
  }
}

/**
 * sendAgain asks for a new version of a turn's answer — Regenerate, or
 * Retry after a failure or a Stop — with turn/start regenerate (mspd's
 * extension): it names the turn and repeats its prompt's text, and the
 * server takes the images from the log. The new turn shows as the newest
 * version of the message's answer (versions.js), not as the message
 * again. A refusal is said in words beside the button.
 */
export async function sendAgain(tv) {
  if (!tv.user || !app.current) return;
  hideError();
  tv.refused('');
  const text = tv.user.source;
  const commandId = uuidv7();
  const { tv: next, echo } = echoTurn(commandId, text, tv.user.gallery.images.filter((im) => im.url));
  const focused = tv.el.contains(document.activeElement);
  linkVersion(next, tv.turnId);
  // tv's version is hidden now: keep the focus on the slot, at its pager.
  if (focused && next.pager) next.pager.prev.focus();
  const params = { commandId, sessionId: app.current, regenerate: tv.turnId, input: [{ type: 'text', text }] };
  try {
    await startTurn(params, echo);
  } catch (err) {
    withdraw(next, tv);
    const words = againRefusal(err);
    if (!words) throw err;
    tv.refused(words);
    announce(words);
  }
}

/** withdraw takes a refused regenerate's turn off the page, back to tv's version. */
function withdraw(next, tv) {
  unlinkVersion(next);
  next.el.remove();
  app.turns.delete(next.turnId);
  app.echoes.delete(next.turnId);
  if (app.lastTurn === next) app.lastTurn = tv;
  const again = tv.footer && tv.footer.querySelector('.again');
  if (again) again.focus();
}

// Why mspd would not regenerate an answer, by commandRejected's reason.
const AGAIN_REFUSED = {
  not_latest_turn: 'Only the latest answer can be regenerated, once no other answer is running.',
  turn_not_ended: 'This answer is still running: stop it, then regenerate it.',
  turn_compacted: 'This answer is now part of the summary of the chat (it was compacted), so it can no longer be regenerated. ' +
    'Send the message again instead.',
};

/** againRefusal words a refused regenerate, or is null for an error the banner shows. */
function againRefusal(err) {
  const d = err.data || {};
  if (err.kind === 'commandRejected' && AGAIN_REFUSED[d.reason]) return AGAIN_REFUSED[d.reason];
  if (err.kind === 'invalidParams' && d.reason === 'regenerateInputDiffers') {
    return 'This message is not the one the server has for this answer, so it was not regenerated. Reload the chat.';
  }
  if (err.kind === 'invalidParams' && d.reason === 'modelCannotTakeImages') {
    const model = (d.details && d.details.modelId) || 'This model';
    return `${model} takes no images, and this message has some: pick a model that does to regenerate the answer.`;
  }
  return null;
}

/**
 * startEdit opens a user message for editing. Sending the edit forks
 * the session just before that turn (session/fork with cutPoint the
 * turn before it; upstream's cut is inclusive) and sends the edited
 * text in the fork, so the original chat stays as it was.
 */
export function startEdit(tv) {
  if (tv.editing) return;
  tv.editing = true;
  const form = el('form', 'edit-form');
  const area = el('textarea');
  area.value = tv.user.source;
  area.setAttribute('aria-label', 'Edited message');
  const buttons = el('div', 'buttons');
  const cancel = button('small', 'Cancel');
  const save = el('button', 'small primary', 'Send edit');
  save.type = 'submit';
  buttons.append(el('p', 'hint', 'Sends in a new branch; this chat stays as it is.'), cancel, save);
  form.append(area, buttons);
  tv.user.el.hidden = true;
  tv.actions.hidden = true;
  tv.el.insertBefore(form, tv.actions.nextSibling);
  area.focus();
  const close = () => {
    tv.editing = false;
    form.remove();
    tv.user.el.hidden = false;
    tv.actions.hidden = false;
    tv.actions.querySelector('.edit').focus();
  };
  cancel.addEventListener('click', close);
  form.addEventListener('keydown', (ev) => {
    if (ev.key === 'Escape') {
      ev.preventDefault();
      close();
    } else if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      form.requestSubmit();
    }
  });
  form.addEventListener('submit', catching(async (ev) => {
    ev.preventDefault();
    const text = area.value.trim();
    if (!text && tv.user.gallery.el.hidden) return;
    save.disabled = true;
    try {
      await editAsFork(tv, text);
    } finally {
      save.disabled = false;
    }
  }));
}

/**
 * editAsFork branches the session before tv's turn and sends text there.
 * A fork copies through a completed turn (cutPoint.lastTurnId,
 * inclusive), so an edit of the first message, before which there is
 * no turn to cut at, starts a new chat instead.
 */
async function editAsFork(tv, text) {
  if (!tv.confirmed) throw new RpcError('this message is not sent yet; edit it once it is', 'notSent', 'session/fork');
  hideError();
  const parts = await tv.user.gallery.parts(); // the message's images go with the edit
  const before = previousTurn(tv);
  if (!before) {
    await newChat(app.instructions);
    await send(text, [], parts);
    return;
  }
  const params = { commandId: uuidv7(), sessionId: app.current, excludeItems: true, cutPoint: { lastTurnId: before.turnId } };
  const res = await command('session/fork', params);
  enter(res.session, res.viewCursor, res.config && res.config.instructions);
  const epoch = app.epoch;
  app.buffer = [];
  await showHistory(res.session.sessionId, res, true, epoch);
  loadModels().catch(() => {});
  await send(text, [], parts);
}

/** previousTurn is the last turn before tv that ended (a fork's cut). */
function previousTurn(tv) {
  for (let n = tv.el.previousElementSibling; n; n = n.previousElementSibling) {
    const prev = app.turns.get(n.dataset.turnId);
    // Another version of tv's message is not before it.
    if (prev && !sameSlot(prev, tv) && prev.confirmed && ['completed', 'failed', 'cancelled'].includes(prev.terminal)) return prev;
  }
  return null;
}

export async function stop() {
  if (!app.running || app.stopping) return;
  const turnId = app.running;
  app.stopping = turnId;
  ui.stop.disabled = true;
  ui.stop.textContent = 'Stopping…';
  // Name the turn on screen, so that a queued successor that started
  // meanwhile is not the one stopped.
  const params = { commandId: uuidv7(), sessionId: app.current, turnId };
  try {
    await command('turn/interrupt', params, () => {
      ui.stop.textContent = 'Stop queued…';
      announce('Offline: the stop goes as soon as the connection is back.');
    });
  } catch (err) {
    if (app.stopping === turnId) app.stopping = null;
    setRunning(app.running);
    // The turn ended before the stop reached it: nothing to stop.
    if (err.kind === 'commandRejected' && err.data.reason === 'missingRun') return;
    throw err;
  }
}
