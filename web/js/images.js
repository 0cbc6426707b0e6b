// Images: what mspd takes, reading and checking a file the person chose,
// reading stored ones back (item/readOutput, cached by digest), a user
// message's gallery and the image viewer.

import { button, el } from './dom.js';
import { rpc, RpcError } from './rpc.js';
import { ui } from './state.js';
import { size } from './words.js';

// What mspd takes (msp.MaxImageBytes, MaxTurnImages and the turn's
// total, providers.md#images): the page refuses more before sending.
export const IMAGE_TYPES = ['image/png', 'image/jpeg', 'image/gif', 'image/webp'];
export const MAX_IMAGE_BYTES = 5 << 20;
export const MAX_TURN_IMAGES = 8;
export const MAX_TURN_IMAGE_BYTES = 16 << 20;

/** typeWord names an image type as people do: "PNG", "JPEG". */
const typeWord = (t) => ({ 'image/png': 'PNG', 'image/jpeg': 'JPEG', 'image/gif': 'GIF', 'image/webp': 'WebP' }[t] || 'image');

/**
 * sniffImage names an image's format by its first bytes, as mspd does
 * (provider.Sniff): one of IMAGE_TYPES, or null. The page never trusts
 * a file's name or its claimed type: an SVG called a PNG is refused.
 */
function sniffImage(b) {
  const at = (i, s) => [...s].every((c, j) => b[i + j] === c.charCodeAt(0));
  if (b.length >= 8 && b[0] === 0x89 && at(1, 'PNG\r\n\x1a\n')) return 'image/png';
  if (b.length >= 3 && b[0] === 0xff && b[1] === 0xd8 && b[2] === 0xff) return 'image/jpeg';
  if (b.length >= 6 && (at(0, 'GIF87a') || at(0, 'GIF89a'))) return 'image/gif';
  if (b.length >= 12 && at(0, 'RIFF') && at(8, 'WEBP')) return 'image/webp';
  return null;
}

/**
 * imageURL is a data: URL of image bytes of a type sniffImage named:
 * the only image URLs this page makes (the Content Security Policy
 * allows data: images and no others).
 */
function imageURL(bytes, type) {
  if (!IMAGE_TYPES.includes(type)) return Promise.reject(new Error('not an image type this page shows'));
  return new Promise((resolve, reject) => {
    const r = new FileReader();
    r.onload = () => (String(r.result).startsWith(`data:${type};base64,`) ? resolve(r.result) : reject(new Error('the image did not encode')));
    r.onerror = () => reject(r.error || new Error('the image did not encode'));
    r.readAsDataURL(new Blob([bytes], { type }));
  });
}

/** base64Of is the base64 of a data: URL. */
export const base64Of = (url) => url.slice(url.indexOf(',') + 1);

/** decodeBase64 turns standard base64 into bytes. */
function decodeBase64(text) {
  if (Uint8Array.fromBase64) return Uint8Array.fromBase64(text);
  const bin = atob(text);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/** sha256 is "sha256:<hex>" of bytes, or null where the browser has no digest (a page not served over a secure origin). */
async function sha256(bytes) {
  if (!(window.crypto && crypto.subtle)) return null;
  const d = new Uint8Array(await crypto.subtle.digest('SHA-256', bytes));
  return `sha256:${Array.from(d, (x) => x.toString(16).padStart(2, '0')).join('')}`;
}

/**
 * readImageFile reads a file the person chose, pasted or dropped: its
 * bytes, their type by sniffing, its natural size, a data: URL. It
 * throws, in words, for anything mspd would refuse.
 */
export async function readImageFile(file) {
  const name = file.name ? `“${file.name}”` : 'The image';
  if (file.size > MAX_IMAGE_BYTES) {
    throw new Error(`${name} is ${size(file.size)}: an image can be at most ${size(MAX_IMAGE_BYTES)}.`);
  }
  const bytes = new Uint8Array(await file.arrayBuffer());
  const type = sniffImage(bytes);
  if (!type) throw new Error(`${name} is not a PNG, JPEG, GIF or WebP image.`);
  let width = 0;
  let height = 0;
  try {
    const bitmap = await createImageBitmap(new Blob([bytes], { type }));
    width = bitmap.width;
    height = bitmap.height;
    bitmap.close();
  } catch {
    throw new Error(`${name} could not be read as a ${typeWord(type)} image.`);
  }
  const url = await imageURL(bytes, type);
  return { name: file.name || '', mediaType: type, width, height, byteLen: bytes.length, url, digest: await sha256(bytes) };
}

/** imageLabel words an image for its button and the viewer: "PNG, 800×600, 120 KB". */
export function imageLabel(im) {
  const parts = [typeWord(im.mediaType)];
  if (im.width && im.height) parts.push(`${im.width}×${im.height}`);
  if (im.byteLen) parts.push(size(im.byteLen));
  return parts.join(', ');
}

// Images shown after a reload are read back with item/readOutput (in
// parts of up to 4 MiB, the most mspd serves at once) and kept here by
// their digest, as data: URLs, so a chat opened again, a fork or the
// same image sent twice reads them once. At most this many are kept.
const IMAGE_CACHE_MAX = 48;
const IMAGE_PART = 4 << 20;
const imageCache = new Map(); // digest → Promise of a data: URL

function cacheImage(digest, promise) {
  if (!digest) return promise;
  imageCache.delete(digest);
  imageCache.set(digest, promise);
  while (imageCache.size > IMAGE_CACHE_MAX) imageCache.delete(imageCache.keys().next().value);
  promise.catch(() => imageCache.get(digest) === promise && imageCache.delete(digest));
  return promise;
}

// Two images are read at a time; the others wait their turn.
let imageReads = 0;
const imageQueue = [];
function nextImageRead() {
  while (imageReads < 2 && imageQueue.length) {
    const job = imageQueue.shift();
    imageReads++;
    job().finally(() => {
      imageReads--;
      nextImageRead();
    });
  }
}

/**
 * fetchImage reads an attachment's stored bytes: pages item/readOutput
 * until eof, checks them (the type by their first bytes, the digest
 * where the browser can) and makes them a data: URL.
 */
function fetchImage(sessionId, itemId, att) {
  const ref = att.outputRef;
  const cached = ref.digest && imageCache.get(ref.digest);
  if (cached) return cached;
  const read = new Promise((resolve, reject) => {
    imageQueue.push(async () => {
      try {
        const parts = [];
        let offset = 0;
        for (;;) {
          const res = await rpc.call('item/readOutput', { sessionId, itemId, outputRef: ref.id, offsetBytes: offset, lengthBytes: IMAGE_PART });
          if (res.encoding !== 'base64') throw new Error('the server sent the image as text');
          const bytes = decodeBase64(res.content || '');
          parts.push(bytes);
          offset = res.offsetBytes + res.byteLen;
          if (res.eof) break;
          if (res.byteLen <= 0) throw new Error('the server made no progress');
        }
        const all = new Uint8Array(offset);
        let at = 0;
        for (const p of parts) {
          all.set(p, at);
          at += p.length;
        }
        const type = sniffImage(all);
        if (!type || type !== att.mediaType) throw new Error(`the stored bytes are not a ${typeWord(att.mediaType)} image`);
        const digest = await sha256(all);
        if (digest && ref.digest && digest !== ref.digest) throw new Error('the stored bytes do not match their digest');
        resolve(await imageURL(all, type));
      } catch (err) {
        reject(err);
      }
    });
    nextImageRead();
  });
  return cacheImage(ref.digest, read);
}

/**
 * Gallery shows a user message's images as thumbnails, each a button
 * that opens it larger. An image sent from here shows from the bytes
 * read locally; one from the log, once item/readOutput has read it.
 */
export class Gallery {
  constructor() {
    this.el = el('div', 'gallery');
    this.el.hidden = true;
    this.images = []; // {mediaType, width, height, byteLen, url, digest, att, state}
  }

  /** setLocal shows images read here (a message being sent). */
  setLocal(images) {
    this.images = images.map((im) => ({ ...im, state: 'shown' }));
    this.render();
  }

  /**
   * setAttachments shows a userMessage's attachments. An image this
   * page already shows for it (sent from here) keeps its bytes, which
   * the cache then holds under the attachment's digest.
   */
  setAttachments(atts, sessionId, itemId) {
    this.sessionId = sessionId;
    this.itemId = itemId;
    const local = this.images;
    this.images = atts.filter((a) => a && a.type === 'image' && IMAGE_TYPES.includes(a.mediaType) && a.outputRef).map((att, i) => {
      const im = {
        mediaType: att.mediaType, width: att.width, height: att.height, byteLen: att.outputRef.byteLen,
        digest: att.outputRef.digest, att, url: null, state: 'loading',
      };
      const mine = local[i];
      if (mine && mine.url && mine.mediaType === att.mediaType && (!mine.digest || mine.digest === im.digest)) {
        im.url = mine.url;
        im.state = 'shown';
        cacheImage(im.digest, Promise.resolve(mine.url));
      }
      return im;
    });
    this.render();
    for (const im of this.images) {
      if (im.state !== 'loading') continue;
      fetchImage(sessionId, itemId, im.att).then((url) => {
        im.url = url;
        im.state = 'shown';
        this.render();
      }, (err) => {
        im.state = 'failed';
        im.error = err.message || String(err);
        this.render();
      });
    }
  }

  render() {
    this.el.hidden = !this.images.length;
    const n = this.images.length;
    this.el.replaceChildren(...this.images.map((im, i) => {
      const what = `Image ${i + 1}${n > 1 ? ` of ${n}` : ''}: ${imageLabel(im)}`;
      const b = button('thumb', null, im.state === 'shown' ? `${what}. Open it larger` : what);
      b.dataset.state = im.state;
      if (im.state === 'shown') {
        const img = el('img');
        img.alt = '';
        img.decoding = 'async';
        img.src = im.url;
        if (im.width && im.height) {
          img.width = im.width;
          img.height = im.height;
        }
        b.append(img);
        b.addEventListener('click', () => openViewer(im.url, what, b));
      } else {
        b.append(el('span', 'thumb-note', im.state === 'loading' ? `${typeWord(im.mediaType)} · loading…` : 'image unavailable'));
        b.setAttribute('aria-disabled', 'true');
        if (im.error) b.title = `Could not load the image: ${im.error}`;
      }
      return b;
    }));
  }

  /** parts are the images as turn/start input parts (a message sent again). */
  async parts() {
    const out = [];
    for (const im of this.images) {
      let url = im.url;
      if (!url && im.att) url = await fetchImage(this.sessionId, this.itemId, im.att);
      if (!url) throw new RpcError('an image of this message could not be read', 'imageUnavailable', 'turn/start');
      const part = { type: 'image', mediaType: im.mediaType, base64Data: base64Of(url) };
      if (im.width && im.height) {
        part.width = im.width;
        part.height = im.height;
      }
      out.push(part);
    }
    return out;
  }
}

/** openViewer shows an image larger, in a modal dialog Esc closes. */
function openViewer(url, label, opener) {
  ui.viewerImg.src = url;
  ui.viewerImg.alt = label;
  ui.viewerTitle.textContent = label;
  ui.viewer.returnFocus = opener;
  ui.viewer.showModal();
  ui.viewerClose.focus();
}
