// The message box: images attached, pasted or dropped into the tray, the
// attach button (off for a model that takes no images), Send enabled for
// some text or an image, and the placeholder.

import { announce, phone } from './chrome.js';
import { button, el } from './dom.js';
import { imageLabel, MAX_TURN_IMAGE_BYTES, MAX_TURN_IMAGES, readImageFile } from './images.js';
import { app, ui } from './state.js';
import { plural, size } from './words.js';

// The images waiting in the composer, read and checked, in order.
export const draft = { images: [] };

/** attachNote shows (or, with no text, hides) what the composer says about images. */
function attachNote(text) {
  ui.attachNote.hidden = !text;
  ui.attachNote.textContent = text || '';
}

/** modelKey names a model across model/list and refusals. */
export const modelKey = (providerId, modelId) => `${providerId || ''}\n${modelId || ''}`;

/** currentModel is the picker's model/list row, if known. */
const currentModel = () => app.models[Number(ui.model.value)] || null;

/**
 * takesNoImages tells whether a model is known to take no images:
 * model/list says so (an images member set false, which mspd's rows do
 * not carry today), or the server refused an image for it
 * (modelCannotTakeImages) while this page was open.
 */
function takesNoImages(m) {
  return !!m && (m.images === false || app.textOnly.has(modelKey(m.providerId, m.modelId)));
}

/** syncAttach enables the attach button unless the model takes no images. */
export function syncAttach() {
  const m = currentModel();
  const no = takesNoImages(m);
  ui.attach.disabled = no;
  ui.attach.title = no ? `${m.modelId} takes no images` : 'Attach images (or paste or drop them here)';
  ui.attach.setAttribute('aria-label', no ? `Attach images: ${m.modelId} takes no images` : 'Attach images');
}

/**
 * addImages reads files into the composer, checking each against
 * mspd's bounds, and says in words why any was left out.
 */
export async function addImages(files) {
  files = [...files].filter(Boolean);
  if (!files.length) return;
  const m = currentModel();
  if (takesNoImages(m)) {
    attachNote(`${m.modelId} takes no images: pick another model to send them.`);
    return;
  }
  const problems = [];
  let added = 0;
  for (const file of files) {
    if (draft.images.length >= MAX_TURN_IMAGES) {
      problems.push(`A message can carry at most ${MAX_TURN_IMAGES} images.`);
      break;
    }
    let im;
    try {
      im = await readImageFile(file);
    } catch (err) {
      problems.push(err.message);
      continue;
    }
    const total = draft.images.reduce((n, x) => n + x.byteLen, 0) + im.byteLen;
    if (total > MAX_TURN_IMAGE_BYTES) {
      problems.push(`${im.name ? `“${im.name}”` : 'The image'} would bring the message's images to ${size(total)}: at most ${size(MAX_TURN_IMAGE_BYTES)} go in one message.`);
      continue;
    }
    draft.images.push(im);
    added++;
  }
  renderTray();
  attachNote(problems.join(' '));
  if (added) announce(`${plural(added, 'image')} attached.${problems.length ? ` ${problems.join(' ')}` : ''}`);
  syncComposer();
}

/** renderTray shows the composer's images, each removable. */
export function renderTray() {
  const n = draft.images.length;
  ui.tray.hidden = !n;
  ui.tray.replaceChildren(...draft.images.map((im, i) => {
    const li = el('li', 'chip');
    const what = `Image ${i + 1}${im.name ? ` (${im.name})` : ''}: ${imageLabel(im)}`;
    const img = el('img');
    img.src = im.url;
    img.alt = what;
    const remove = button('chip-remove', '✕', `Remove image ${i + 1}${im.name ? ` (${im.name})` : ''}`);
    remove.addEventListener('click', () => {
      draft.images.splice(i, 1);
      renderTray();
      attachNote('');
      syncComposer();
      announce(`Image ${i + 1} removed.`);
      const next = ui.tray.querySelectorAll('.chip-remove')[Math.min(i, draft.images.length - 1)];
      (next || ui.input).focus();
    });
    li.append(img, remove);
    return li;
  }));
}

/** takeDraft empties the composer's images and returns them. */
export function takeDraft() {
  const images = draft.images;
  draft.images = [];
  renderTray();
  attachNote('');
  return images;
}

/** syncComposer sizes the message box and enables Send for some text or an image. */
export function syncComposer() {
  ui.send.disabled = !ui.input.value.trim() && !draft.images.length;
  ui.input.style.height = 'auto';
  ui.input.style.height = `${Math.min(ui.input.scrollHeight + 2, 240)}px`;
}

/** hint puts the keys in the placeholder where there is room for them. */
export function hint() {
  ui.input.placeholder = phone.matches ? 'Message…' : 'Message…  (Enter sends, Shift+Enter breaks the line, Esc stops)';
}
