// mspd web chat: a small Muse Session Protocol client (JSON-RPC 2.0 over a
// WebSocket at /msp on the page's own host). No framework, no build step.
//
// Model output is untrusted. Answers are Markdown — and so are the
// reasoning parts and compaction summaries shown beside them, through the
// same path: markdown-it renders them with raw HTML off (markup in an
// answer shows as text), DOMPurify sanitizes the result into a
// DocumentFragment, and the Content Security Policy forbids inline
// script. Everything else — tool calls' arguments
// and output included, which are not even Markdown — reaches the page as
// textContent; no string is ever parsed as HTML here. Images are shown only
// as data: URLs of PNG, JPEG, GIF or WebP bytes that this page read from a
// file or the server returned (item/readOutput), their type taken from the
// bytes themselves.
'use strict';

(() => {
  // ------------------------------------------------------------ helpers

  const $ = (id) => document.getElementById(id);

  /** el creates an element with a class and, optionally, text. */
  function el(tag, className, text) {
    const e = document.createElement(tag);
    if (className) e.className = className;
    if (text != null) e.textContent = text;
    return e;
  }

  /** button creates a type=button button. */
  function button(className, text, label) {
    const b = el('button', className, text);
    b.type = 'button';
    if (label) b.setAttribute('aria-label', label);
    return b;
  }

  /** uuidv7 mints a UUIDv7: 48 bits of Unix milliseconds, then random bits. */
  function uuidv7() {
    const b = new Uint8Array(16);
    crypto.getRandomValues(b);
    let ms = Date.now();
    for (let i = 5; i >= 0; i--) {
      b[i] = ms % 256;
      ms = Math.floor(ms / 256);
    }
    b[6] = (b[6] & 0x0f) | 0x70; // version 7
    b[8] = (b[8] & 0x3f) | 0x80; // RFC 9562 variant
    const h = Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
    return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
  }

  // Words for an errorKind, as mspd's own renderers use them
  // (msp.ErrorKindWords): the server's failure messages begin with them.
  const KIND_WORDS = {
    rateLimited: 'rate limited',
    quotaExhausted: 'quota exhausted',
    overloaded: 'overloaded',
    serverError: 'server error',
    timeout: 'timed out',
    connectionError: 'connection dropped',
    streamInterrupted: 'stream interrupted',
    conflict: 'request conflict',
    contextLengthExceeded: 'context too long',
    contentFilter: 'blocked by content filter',
    invalidRequest: 'invalid request',
    auth: 'not authorized',
    notFound: 'not found',
    truncated: 'output truncated',
    schemaViolation: 'output did not match the schema',
    cancelled: 'cancelled',
    budgetExhausted: 'retry budget exhausted',
    unknown: 'error',
  };

  /** kindWords words an errorKind: "rateLimited" → "rate limited". */
  function kindWords(kind) {
    if (!kind) return 'error';
    if (Object.hasOwn(KIND_WORDS, kind)) return KIND_WORDS[kind];
    // Unknown kinds are spelt out: "upstreamHTTPError" → "upstream http error".
    return kind
      .replace(/([a-z0-9])([A-Z])/g, '$1 $2')
      .replace(/([A-Z])([A-Z][a-z])/g, '$1 $2')
      .toLowerCase();
  }

  /** duration words a span: "850ms", "1.9s", "12s", "2m 5s". */
  function duration(ms) {
    if (ms < 1000) return `${Math.round(ms)}ms`;
    if (ms < 10000) return `${(ms / 1000).toFixed(1)}s`;
    const s = Math.round(ms / 1000);
    return s < 60 ? `${s}s` : `${Math.floor(s / 60)}m ${s % 60}s`;
  }

  /** ago words a past RFC 3339 time for the chat list. */
  function ago(iso) {
    const t = Date.parse(iso);
    if (Number.isNaN(t)) return '';
    const s = (Date.now() - t) / 1000;
    if (s < 60) return 'just now';
    if (s < 3600) return `${Math.floor(s / 60)} min ago`;
    if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
    return new Date(t).toLocaleDateString();
  }

  /** size words a byte count: "812 B", "4.2 KB", "195 KB", "1.3 MB". */
  function size(bytes) {
    if (bytes < 1024) return `${bytes} B`;
    const kb = bytes / 1024;
    if (kb < 10) return `${kb.toFixed(1)} KB`;
    if (kb < 1024) return `${Math.round(kb)} KB`;
    return `${(kb / 1024).toFixed(1)} MB`;
  }

  /** plural: plural(2, 'attempt') → "2 attempts". */
  const plural = (n, word) => `${n.toLocaleString('en')} ${word}${n === 1 ? '' : 's'}`;

  /** sentence capitalizes the first letter. */
  const sentence = (s) => s.charAt(0).toUpperCase() + s.slice(1);

  /** callTime words a tool call's duration: "12 ms", "1.4 s", "2 min 5 s". */
  function callTime(ms) {
    if (ms < 1000) return `${Math.max(0, Math.round(ms))} ms`;
    if (ms < 10000) return `${(ms / 1000).toFixed(1)} s`;
    const s = Math.round(ms / 1000);
    return s < 60 ? `${s} s` : `${Math.floor(s / 60)} min ${s % 60} s`;
  }

  /**
   * tokenWords words a token count as mspd does (turn.tokenWords): "850",
   * "2.1k", "130k", and "1.2M" from a million.
   */
  function tokenWords(n) {
    n = Math.max(0, Math.round(Number(n) || 0));
    if (n < 1000) return String(n);
    if (n < 10000) return `${(n / 1000).toFixed(1)}k`;
    if (n < 1000000) return `${Math.round(n / 1000)}k`;
    return `${(n / 1000000).toFixed(1)}M`;
  }

  /** thoughtTime words how long a model reasoned: "less than a second", "4 s", "2 min 5 s". */
  function thoughtTime(ms) {
    if (ms < 1000) return 'less than a second';
    const s = Math.round(ms / 1000);
    return s < 60 ? `${s} s` : `${Math.floor(s / 60)} min ${s % 60} s`;
  }

  /**
   * prettyJSON indents JSON text two spaces a level, keeping each string,
   * number and literal exactly as written (a parse and stringify would
   * round big numbers and reorder nothing else): the arguments read as the
   * model wrote them. Text that is not JSON comes back as it is.
   */
  function prettyJSON(text) {
    try {
      JSON.parse(text);
    } catch {
      return text;
    }
    const space = (c) => c === ' ' || c === '\t' || c === '\n' || c === '\r';
    let out = '';
    let depth = 0;
    const newline = () => `\n${'  '.repeat(depth)}`;
    for (let i = 0; i < text.length; i++) {
      const c = text[i];
      if (c === '"') {
        let j = i + 1;
        while (text[j] !== '"') j += text[j] === '\\' ? 2 : 1;
        out += text.slice(i, j + 1);
        i = j;
      } else if (c === '{' || c === '[') {
        let j = i + 1;
        while (space(text[j])) j++;
        if (text[j] === (c === '{' ? '}' : ']')) { // empty: stays "{}"
          out += c + text[j];
          i = j;
        } else {
          depth++;
          out += c + newline();
        }
      } else if (c === '}' || c === ']') {
        depth--;
        out += newline() + c;
      } else if (c === ',') {
        out += `,${newline()}`;
      } else if (c === ':') {
        out += ': ';
      } else if (!space(c)) {
        out += c;
      }
    }
    return out;
  }

  // ------------------------------------------------------------ connection

  /** RpcError is a JSON-RPC error response (or a lost connection). */
  class RpcError extends Error {
    constructor(message, kind, method, data) {
      super(message);
      this.kind = kind;
      this.method = method;
      this.data = data || {};
    }
  }

  /**
   * Rpc owns the WebSocket: it performs the MSP handshake on every
   * (re)connect, matches responses to requests by id, hands notifications
   * on, and reconnects with capped, jittered exponential backoff.
   */
  class Rpc {
    constructor(url, { onReady, onNotification, onRequest, onState }) {
      this.url = url;
      this.onReady = onReady;
      this.onNotification = onNotification;
      this.onRequest = onRequest;
      this.onState = onState;
      this.nextId = 1;
      this.pending = new Map(); // id → {resolve, reject, method}
      this.failures = 0; // consecutive connects that did not reach ready
      this.ready = false;
      this.ws = null;
    }

    connect() {
      const ws = new WebSocket(this.url);
      this.ws = ws;
      this.ready = false;
      this.onState('connecting');
      ws.onopen = () => this.handshake(ws);
      ws.onmessage = (ev) => this.receive(ev.data);
      ws.onclose = () => this.closed(ws);
    }

    async handshake(ws) {
      try {
        const result = await this.call('initialize', {
          clientInfo: { name: 'mspd_web', title: 'mspd web chat', version: '2.0' },
          // The live chat list, and model retry notices as mspd words them.
          capabilities: { requestedCapabilities: ['sessionListStream', 'modelRetryScheduled'] },
        }, true);
        this.send({ jsonrpc: '2.0', method: 'initialized' });
        this.ready = true;
        this.failures = 0;
        this.onState('online', result.serverInfo);
        this.onReady(result);
      } catch {
        ws.close(); // reconnects
      }
    }

    closed(ws) {
      if (ws !== this.ws) return;
      this.ready = false;
      for (const p of this.pending.values()) {
        p.reject(new RpcError('the connection to mspd was lost', 'disconnected', p.method));
      }
      this.pending.clear();
      const delay = Math.min(10000, 250 * 2 ** this.failures++) * (0.5 + Math.random() / 2);
      this.onState('offline', delay);
      setTimeout(() => this.connect(), delay);
    }

    /** call sends a request; the promise settles with its response. */
    call(method, params, handshake = false) {
      if (!(this.ready || handshake) || this.ws.readyState !== WebSocket.OPEN) {
        return Promise.reject(new RpcError('not connected to mspd; reconnecting', 'disconnected', method));
      }
      const id = this.nextId++;
      const frame = { jsonrpc: '2.0', id, method };
      if (params) frame.params = params;
      return new Promise((resolve, reject) => {
        this.pending.set(id, { resolve, reject, method });
        this.send(frame);
      });
    }

    send(frame) {
      this.ws.send(JSON.stringify(frame));
    }

    receive(data) {
      let msg;
      try {
        msg = JSON.parse(data);
      } catch {
        return;
      }
      if (msg.method && msg.id != null) {
        // A server request (approval/request): answered at once, on the
        // connection it came on — with a result, or an error when the
        // page cannot show what it asks.
        let answer;
        try {
          answer = { result: this.onRequest(msg.method, msg.params || {}) };
        } catch (err) {
          const kind = err.kind || 'internal';
          answer = { error: { code: err.code || -32603, message: err.message, data: { kind } } };
        }
        this.send({ jsonrpc: '2.0', id: msg.id, ...answer });
      } else if (msg.method) {
        this.onNotification(msg.method, msg.params || {}, msg.emittedAtMs);
      } else if (this.pending.has(msg.id)) {
        const p = this.pending.get(msg.id);
        this.pending.delete(msg.id);
        if (msg.error) {
          const data = msg.error.data || {};
          p.reject(new RpcError(msg.error.message, data.kind, p.method, data));
        } else {
          p.resolve(msg.result);
        }
      }
    }
  }

  // Commands the connection could not carry wait here, in order, and go
  // again once reconnected: their commandId makes a command take effect
  // once, whether or not the first try arrived.
  const outbox = [];

  /**
   * command sends a request that carries a commandId. Offline, it is
   * queued (onQueued is told) and the promise settles once it is sent
   * after a reconnect.
   */
  function command(method, params, onQueued) {
    return rpc.call(method, params).catch((err) => {
      if (err.kind !== 'disconnected') throw err;
      if (onQueued) onQueued();
      return new Promise((resolve, reject) => outbox.push({ method, params, resolve, reject }));
    });
  }

  function flushOutbox() {
    for (const c of outbox.splice(0)) command(c.method, c.params).then(c.resolve, c.reject);
  }

  // ------------------------------------------------------------ markdown

  const md = window.markdownit({ html: false, linkify: true, typographer: false });
  // An image in an answer would load from wherever the model pointed it.
  md.disable('image');

  const PURIFY = {
    RETURN_DOM_FRAGMENT: true,
    FORBID_TAGS: ['img', 'style', 'form', 'input', 'button', 'textarea', 'select', 'iframe', 'svg', 'math'],
    FORBID_ATTR: ['style', 'id', 'name'],
  };
  window.DOMPurify.addHook('afterSanitizeAttributes', (node) => {
    if (node.tagName === 'A' && node.hasAttribute('href')) {
      node.setAttribute('target', '_blank');
      node.setAttribute('rel', 'noopener noreferrer');
    }
  });

  /** renderMarkdown renders an answer's text into a sanitized fragment. */
  function renderMarkdown(src) {
    const frag = window.DOMPurify.sanitize(md.render(src), PURIFY);
    for (const pre of frag.querySelectorAll('pre')) decorateCode(pre);
    return frag;
  }

  /** decorateCode gives a code block a bar with its language and Copy. */
  function decorateCode(pre) {
    const code = pre.querySelector('code');
    const lang = code && /(?:^|\s)language-([\w+#.-]{1,30})/.exec(code.className);
    const box = el('div', 'code-block');
    const bar = el('div', 'code-bar');
    bar.append(el('span', 'code-lang', lang ? lang[1] : 'code'));
    bar.append(button('small copy', 'Copy', lang ? `Copy ${lang[1]} code` : 'Copy code'));
    pre.replaceWith(box);
    box.append(bar, pre);
  }

  /** copyText puts text on the clipboard; false when the browser refuses. */
  async function copyText(text) {
    try {
      await navigator.clipboard.writeText(text);
      return true;
    } catch {
      // Without clipboard permission: the older, selection-based way.
      const area = el('textarea', 'visually-hidden');
      area.value = text;
      document.body.append(area);
      area.select();
      const ok = document.execCommand('copy');
      area.remove();
      return ok;
    }
  }

  // ------------------------------------------------------------ images

  // What mspd takes (msp.MaxImageBytes, MaxTurnImages and the turn's
  // total, providers.md#images): the page refuses more before sending.
  const IMAGE_TYPES = ['image/png', 'image/jpeg', 'image/gif', 'image/webp'];
  const MAX_IMAGE_BYTES = 5 << 20;
  const MAX_TURN_IMAGES = 8;
  const MAX_TURN_IMAGE_BYTES = 16 << 20;
  const MAX_INSTRUCTIONS_BYTES = 32 << 10;

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
  const base64Of = (url) => url.slice(url.indexOf(',') + 1);

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
  async function readImageFile(file) {
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
  function imageLabel(im) {
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
  class Gallery {
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

  // ------------------------------------------------------------ fallbacks

  /**
   * shortModel is a model id as people read it: without a gateway's
   * vendor prefix or a dated snapshot's suffix —
   * "anthropic/claude-sonnet-4-5-20250929" → "claude-sonnet-4-5".
   */
  function shortModel(id) {
    if (!id) return '';
    let s = String(id);
    s = s.slice(s.lastIndexOf('/') + 1) || s;
    if (s.indexOf('@') > 0) s = s.slice(0, s.indexOf('@'));
    const dated = /-((?:19|20)\d\d)-?(0[1-9]|1[0-2])-?(0[1-9]|[12]\d|3[01])$/.exec(s);
    if (dated && dated.index > 0 && (dated[0].length === 9 || dated[0].length === 11)) s = s.slice(0, dated.index);
    return s;
  }

  /** sameModel tells whether a model that answered is the one asked (a provider may name a dated snapshot of it). */
  function sameModel(answered, asked) {
    if (!answered || !asked) return true;
    return answered === asked || answered.startsWith(`${asked}-`) || shortModel(answered) === shortModel(asked);
  }

  // What happened to a provider a turn left, by errorKind: "openai is
  // rate limited · answering with …".
  const LEFT_WORDS = {
    rateLimited: 'is rate limited',
    quotaExhausted: 'is out of quota',
    overloaded: 'is overloaded',
    serverError: 'had a server error',
    timeout: 'timed out',
    connectionError: 'dropped the connection',
    streamInterrupted: 'cut the answer off',
    conflict: 'refused the request as conflicting',
    auth: 'refused the credentials',
    notFound: 'does not know the model',
  };

  /** breakerWords words a breaker state: "circuit open". */
  const breakerWords = (state) => ({ open: 'circuit open', halfOpen: 'circuit half-open' }[state] || `circuit ${kindWords(state || 'open')}`);

  /** answering names who answers next: the model's short name, else its provider. */
  const answering = (p) => `answering with ${shortModel(p.nextModelId) || p.nextProviderId || 'the next provider'}`;

  /** fallbackWords: "openai is rate limited · answering with claude-sonnet-4-5". */
  function fallbackWords(p) {
    let left = `${p.system || 'the provider'} ${LEFT_WORDS[p.errorKind] || `failed (${kindWords(p.errorKind)})`}`;
    if (p.fallbackReason === 'circuitOpen') left += ' (circuit open)';
    return `${left} · ${answering(p)}`;
  }

  /** skippedWords: "openai is down (circuit open) · answering with claude-sonnet-4-5". */
  const skippedWords = (p) => `${p.system || p.providerId} is down (${breakerWords(p.breaker)}) · ${answering(p)}`;

  /** modelOption words a model/list row for the picker: "openai · gpt-4o-mini — down". */
  function modelOption(m) {
    const name = m.displayLabel || m.modelId;
    if (m.breakerState === 'open') return `${name} — down`;
    if (m.breakerState === 'halfOpen') return `${name} — recovering`;
    return name;
  }

  // ------------------------------------------------------------ instructions

  const byteLength = (text) => new TextEncoder().encode(text).length;

  /** syncInstructionsButton marks the button when the chat (or the next one) has instructions. */
  function syncInstructionsButton() {
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
  function showInstructions(mode) {
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
  function countInstructions() {
    const n = byteLength(ui.instructions.value);
    const over = n > MAX_INSTRUCTIONS_BYTES;
    ui.instructionsCount.textContent = over
      ? `Too long: ${n.toLocaleString('en')} bytes, at most ${MAX_INSTRUCTIONS_BYTES.toLocaleString('en')}.`
      : `${size(n)} of ${size(MAX_INSTRUCTIONS_BYTES)}`;
    ui.instructionsCount.classList.toggle('over', over);
    ui.instructionsSave.disabled = over;
  }

  function openInstructions() {
    ui.instructions.value = app.current ? app.instructions : app.nextInstructions;
    showInstructions(app.current ? 'view' : 'next');
    ui.instructionsOpen.setAttribute('aria-expanded', 'true');
    ui.instructionsDialog.showModal();
    (app.current ? ui.instructionsEdit : ui.instructions).focus();
  }

  function closeInstructions() {
    if (ui.instructionsDialog.open) ui.instructionsDialog.close();
  }

  async function saveInstructions() {
    const text = ui.instructions.value.trim();
    if (byteLength(text) > MAX_INSTRUCTIONS_BYTES) return;
    const mode = ui.instructionsDialog.dataset.mode;
    app.nextInstructions = text;
    if (mode === 'new') {
      ui.instructionsSave.disabled = true;
      try {
        await newChat();
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

  // ------------------------------------------------------------ attaching

  // The images waiting in the composer, read and checked, in order.
  const draft = { images: [] };

  /** attachNote shows (or, with no text, hides) what the composer says about images. */
  function attachNote(text) {
    ui.attachNote.hidden = !text;
    ui.attachNote.textContent = text || '';
  }

  /** modelKey names a model across model/list and refusals. */
  const modelKey = (providerId, modelId) => `${providerId || ''}\n${modelId || ''}`;

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
  function syncAttach() {
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
  async function addImages(files) {
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
  function renderTray() {
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
  function takeDraft() {
    const images = draft.images;
    draft.images = [];
    renderTray();
    attachNote('');
    return images;
  }

  // ------------------------------------------------------------ page state

  const ui = {
    app: $('app'),
    drawer: $('drawer'),
    drawerClose: $('drawer-close'),
    scrim: $('scrim'),
    menu: $('menu'),
    main: document.querySelector('main'),
    title: $('chat-title'),
    model: $('model'),
    approvalMode: $('approval-mode'),
    conn: $('conn'),
    sessions: $('sessions'),
    newChat: $('new-chat'),
    banner: $('banner'),
    bannerText: $('banner-text'),
    bannerClose: $('banner-close'),
    transcript: $('transcript'),
    empty: $('empty'),
    composer: $('composer'),
    input: $('input'),
    send: $('send'),
    stop: $('stop'),
    attach: $('attach'),
    file: $('file'),
    tray: $('tray'),
    attachNote: $('attach-note'),
    viewer: $('viewer'),
    viewerImg: $('viewer-img'),
    viewerTitle: $('viewer-title'),
    viewerClose: $('viewer-close'),
    instructionsOpen: $('instructions-open'),
    instructionsDialog: $('instructions-dialog'),
    instructions: $('instructions'),
    instructionsNote: $('instructions-note'),
    instructionsCount: $('instructions-count'),
    instructionsEdit: $('instructions-edit'),
    instructionsCancel: $('instructions-cancel'),
    instructionsSave: $('instructions-save'),
    effort: $('effort'),
    context: $('context'),
    contextFill: $('context-fill'),
    contextText: $('context-text'),
    compact: $('compact'),
    compactNote: $('compact-note'),
    announcer: $('announcer'),
  };

  const app = {
    current: null, // the session on screen
    cursors: new Map(), // sessionId → last viewCursor received live
    stale: false, // the view missed events it could not fill: resume afresh
    epoch: 0, // bumped whenever the view is rebuilt; late async work checks it
    buffer: null, // live events held while history loads or a gap fills
    running: null, // the running turn of the current session
    stopping: null, // the turn a Stop was sent (or queued) for
    turns: new Map(), // turnId (or a sent commandId) → TurnView
    lastTurn: null, // the TurnView items without a turnId join
    items: new Map(), // itemId → ItemView
    tools: new Map(), // itemId → ToolView
    approvals: new Map(), // approvalId → ApprovalCard
    echoes: new Map(), // commandId → ItemView of a sent message not yet confirmed
    notices: new Set(), // viewCursors of retry notices shown (replays repeat them)
    sessions: new Map(), // sessionId → Session, the chat list
    listStream: false, // the server pushes session/listChanged
    listHold: null, // the row whose rename or delete form is open
    deleting: new Map(), // sessionId → release of its row, while its deletion runs
    models: [], // model/list rows
    nextModel: null, // the model picked before a session exists
    nextApprovalMode: null, // the approval mode picked before a session exists
    instructions: '', // the current session's instructions (config.instructions)
    nextInstructions: '', // the instructions of the next chat started here
    textOnly: new Set(), // modelKeys the server refused an image for
    askedModel: null, // the session's model as its log's session/modelChanged set it, for footers
    reasoning: new Map(), // itemId → ReasoningView
    compactions: new Map(), // itemId → CompactionView
    compactCommands: new Set(), // commandIds of session/compact sent from here: their turns hold no message
    nextEffort: '', // the reasoning effort picked before a session exists ('' for the model's default)
    contextUsage: null, // the current session's latest {usedTokens, windowTokens, pressure}
  };

  // ------------------------------------------------------------ transcript

  /** TurnView is one turn: its messages, retry status and footer. */
  class TurnView {
    constructor(turnId, confirmed) {
      this.el = el('article', 'turn');
      this.el.dataset.turnId = turnId;
      this.turnId = turnId;
      this.confirmed = confirmed; // turnId is the server's, not a commandId
      this.user = null; // the user message's ItemView
      this.status = null; // the RetryStatus
      this.footer = null;
      this.asked = app.askedModel; // the session's model as the turn began, when its log said
      this.answeredBy = ''; // session/tokenUsage's modelId: the model that answered
      this.rerouted = false; // a fallback or a skipped provider moved the turn
      this.compaction = null; // the CompactionView of a compaction this turn ran
      ui.empty.hidden = true;
      ui.transcript.append(this.el);
    }

    /** add appends a node, keeping the footer last. */
    add(node) {
      this.el.insertBefore(node, this.footer);
    }

    /** setUser shows the turn's user message, with its Edit action. */
    setUser(view) {
      this.user = view;
      this.add(view.el);
      const actions = el('div', 'msg-actions');
      const edit = button('small edit', 'Edit', 'Edit this message in a new branch');
      edit.addEventListener('click', () => startEdit(this));
      actions.append(edit);
      this.actions = actions;
      this.add(actions);
    }

    retryStatus() {
      if (!this.status) this.status = new RetryStatus(this);
      return this.status;
    }

    /**
     * compactionOnly tells whether the turn is a session/compact's: no
     * message of its own, only its compaction (a divider, no exchange).
     */
    compactionOnly() {
      return !this.user && (this.compaction !== null || app.compactCommands.has(this.turnId));
    }

    /** markCompaction shows the turn as a compaction's: its divider, no footer. */
    markCompaction() {
      this.el.classList.toggle('compaction-turn', this.compactionOnly());
    }

    /** end shows the turn's terminal: what happened, and what to do next. */
    end(p) {
      this.terminal = p.terminal;
      if (this.status) this.status.end(p);
      if (this.compactionOnly() && this.compaction) {
        // The divider says how it went; a compaction has no answer to
        // regenerate and no message to retry.
        this.markCompaction();
        if (this.footer) this.footer.remove();
        this.footer = null;
        return;
      }
      const footer = el('footer', 'turn-footer');
      footer.dataset.terminal = p.terminal;
      const view = outcome(p, this);
      const line = el('p', 'turn-status', view.text);
      this.modelNote = el('span', 'turn-model');
      line.append(this.modelNote);
      footer.append(line);
      if (view.details) footer.append(techDetails('Details', view.details));
      const again = view.again && button('small again', view.again,
        view.again === 'Retry' ? 'Retry this message' : 'Regenerate the answer');
      if (again) {
        again.addEventListener('click', catching(() => sendAgain(this)));
        const actions = el('div', 'turn-actions');
        actions.append(again);
        footer.append(actions);
      }
      if (this.footer) this.footer.replaceWith(footer);
      else this.el.append(footer);
      this.footer = footer;
      this.renderModel();
    }

    /** answered notes the model that answered (session/tokenUsage). */
    answered(modelId) {
      if (!modelId) return;
      this.answeredBy = modelId;
      this.renderModel();
    }

    /**
     * renderModel names, in the footer, the model that answered when it
     * is not the session's: a fallback answered, or the chat's model was
     * another when the turn ran.
     */
    renderModel() {
      if (!this.modelNote) return;
      const asked = this.asked || sessionModel();
      const other = this.answeredBy && (this.rerouted ? true : asked ? !sameModel(this.answeredBy, asked) : false);
      this.modelNote.textContent = other ? ` · answered by ${shortModel(this.answeredBy)}` : '';
      this.modelNote.title = other ? this.answeredBy : '';
    }

    unqueued() {
      this.end({ terminal: 'unqueued' });
    }
  }

  function turnView(turnId) {
    if (!turnId) return app.lastTurn || turnView(uuidv7());
    let tv = app.turns.get(turnId);
    if (!tv) {
      tv = new TurnView(turnId, true);
      app.turns.set(turnId, tv);
    }
    app.lastTurn = tv;
    return tv;
  }

  /** rekey files a turn shown under its commandId under its real turnId. */
  function rekey(commandId, turnId) {
    const tv = app.turns.get(commandId);
    if (!tv || !turnId || tv.confirmed) return;
    tv.confirmed = true;
    if (commandId === turnId || app.turns.has(turnId)) return;
    app.turns.delete(commandId);
    app.turns.set(turnId, tv);
    tv.turnId = turnId;
    tv.el.dataset.turnId = turnId;
  }

  // A user message longer than this folds to a preview and its size.
  const FOLD_BYTES = 4096;

  /** ItemView is one message bubble. */
  class ItemView {
    constructor(kind) {
      this.isUser = kind === 'userMessage';
      this.item = { revision: 0, status: 'inProgress' };
      this.note = ''; // about a message of ours: "not sent", …
      this.source = ''; // the text as the server has it
      this.el = el('div', `msg ${this.isUser ? 'user' : 'agent'}`);
      this.el.append(el('span', 'visually-hidden', this.isUser ? 'You: ' : 'Assistant: '));
      this.textEl = el('div', this.isUser ? 'text' : 'text md');
      this.tag = el('span', 'tag');
      this.tag.hidden = true;
      if (this.isUser) {
        this.gallery = new Gallery();
        this.el.append(this.gallery.el);
      }
      this.el.append(this.textEl, this.tag);
      this.timer = null;
      this.paintedAt = 0;
      this.cost = 0; // how long the last Markdown render took, in ms
    }

    setText(text) {
      this.source = text;
      this.paint();
    }

    append(delta) {
      this.source += delta;
      this.schedule();
    }

    /**
     * schedule repaints a streaming answer soon: at most every 50 ms, and
     * less often when rendering is slow, so a long answer stays smooth.
     */
    schedule() {
      if (this.timer) return;
      const wait = this.paintedAt + Math.max(50, 4 * this.cost) - performance.now();
      if (wait <= 0) this.paint();
      else this.timer = setTimeout(() => this.paint(), wait);
    }

    paint() {
      clearTimeout(this.timer);
      this.timer = null;
      const start = performance.now();
      if (this.isUser) this.paintUser();
      else this.textEl.replaceChildren(renderMarkdown(this.source));
      // Lay it out now, so that the cost that paces repaints counts
      // layout too: a long answer in a narrow window mostly costs that.
      void this.el.offsetHeight;
      this.paintedAt = performance.now();
      this.cost = this.paintedAt - start;
    }

    /** paintUser shows a message as typed, folding a long paste. */
    paintUser() {
      const text = this.source;
      this.textEl.hidden = text === '' && !this.gallery.el.hidden;
      const bytes = new TextEncoder().encode(text).length;
      if (bytes <= FOLD_BYTES) {
        this.textEl.textContent = text;
        return;
      }
      const lines = text.split('\n').length;
      let preview = text.slice(0, 280);
      const cut = preview.lastIndexOf('\n', 200);
      if (cut > 40) preview = preview.slice(0, cut);
      const fold = el('details', 'paste');
      fold.append(el('summary', null, `Show all · ${size(bytes)} · ${plural(lines, 'line')}`), el('pre', null, text));
      this.textEl.replaceChildren(el('p', 'paste-preview', `${preview.trimEnd()} …`), fold);
    }

    setTag(text) {
      this.tag.hidden = !text;
      this.tag.textContent = text || '';
    }

    render() {
      const { status } = this.item;
      this.el.dataset.status = status;
      this.el.classList.toggle('streaming', status === 'inProgress' && !this.isUser);
      const tags = { failed: 'discarded attempt', cancelled: 'stopped', rejected: 'rejected', timedOut: 'timed out' };
      if (status === 'inProgress' || status === 'completed') this.setTag(this.note);
      else if (status === 'failed' && this.source === '') this.setTag('discarded attempt · cut off before any text was saved');
      else this.setTag(tags[status] || status);
    }
  }

  /** at reads an RFC 3339 time as milliseconds; null when absent or unreadable. */
  function at(iso) {
    const t = iso ? Date.parse(iso) : NaN;
    return Number.isNaN(t) ? null : t;
  }

  /**
   * ReasoningView is a reasoning item: a collapsed block above the answer
   * of its step, reading "Thinking…" while the model reasons (with a
   * live mark, and the last words of the reasoning beside it), then
   * "Thought for 4 s". It unfolds (a <details>: Tab, Enter and screen
   * readers know it) to the summary parts, each rendered as the answers
   * are (Markdown without raw HTML, sanitized). Reasoning the provider
   * did not show (an empty summary) reads "Reasoned (hidden by the
   * provider)" and unfolds to nothing.
   *
   * How long it thought is measured between the item's durable records:
   * the recordedAt of its opening revision (item/started, written when
   * the reasoning began) and of the revision that ended it. Both come
   * from the log, so a reloaded chat says the same. When the opening is
   * missing (an item first seen by its deltas after a gap), the page's
   * own clock runs from the first delta it saw to the end it saw.
   */
  class ReasoningView {
    constructor() {
      this.item = { revision: 0, status: 'inProgress' };
      this.parts = []; // the summary parts, as streamed or as the item holds them
      this.opened = null; // {rec, local}: when the reasoning began, by the log and by this page's clock
      this.closed = null;
      this.timer = null;
      this.el = el('div', 'reasoning');
      this.details = el('details', 'reasoning-fold');
      this.summary = el('summary', 'reasoning-summary');
      this.body = el('div', 'reasoning-body');
      this.details.append(this.summary, this.body);
      this.line = el('p', 'reasoning-line'); // the hidden reasoning's one line
      this.line.hidden = true;
      this.el.append(this.details, this.line);
      this.details.addEventListener('toggle', () => {
        if (this.details.open) this.paintBody();
      });
    }

    /** set shows a revision of the item. */
    set(item) {
      this.item = item;
      const t = at(item.recordedAt);
      if (!this.opened && (item.status === 'inProgress' || item.revision === 1)) {
        this.opened = { rec: t, local: Date.now() };
      } else if (this.opened && this.opened.rec == null && item.revision === 1) {
        this.opened.rec = t;
      }
      if (item.status !== 'inProgress' && !this.closed) this.closed = { rec: t, local: Date.now() };
      if (Array.isArray(item.summary)) this.parts = item.summary.map((x) => String(x == null ? '' : x));
      else if (item.status !== 'inProgress') this.parts = []; // the item's word: nothing shown
      this.render();
    }

    /** append adds a streamed delta to part n. */
    append(n, delta) {
      if (!this.opened) this.opened = { rec: null, local: Date.now() };
      while (this.parts.length <= n) this.parts.push('');
      this.parts[n] += delta;
      this.renderSummary();
      if (this.details.open) this.schedule();
    }

    /** discard ends a reasoning whose attempt is over (the server sent no end). */
    discard() {
      this.item = { ...this.item, status: 'failed' };
      if (!this.closed) this.closed = { rec: null, local: Date.now() };
      this.render();
    }

    /** shown tells whether any of the reasoning is there to read. */
    shown() {
      return this.parts.some((x) => x.trim() !== '');
    }

    /** duration is how long the model reasoned, in ms, or null when unknown. */
    duration() {
      const o = this.opened;
      const c = this.closed;
      if (!o || !c) return null;
      if (o.rec != null && c.rec != null) return Math.max(0, c.rec - o.rec);
      return Math.max(0, c.local - o.local); // this page saw both ends
    }

    /** words is what the block reads, folded. */
    words() {
      const { status } = this.item;
      if (status === 'inProgress') return 'Thinking…';
      const ms = this.duration();
      const thought = ms == null ? 'Thought' : `Thought for ${thoughtTime(ms)}`;
      if (status === 'completed') return this.shown() ? thought : 'Reasoned (hidden by the provider)';
      if (status === 'cancelled') return this.shown() ? `${thought} · stopped` : 'Thinking stopped';
      return this.shown() ? `${thought} · discarded attempt` : 'Thinking cut off · discarded attempt';
    }

    render() {
      const { status } = this.item;
      this.el.dataset.status = status;
      const hidden = status !== 'inProgress' && !this.shown();
      this.el.dataset.state = status === 'inProgress' ? 'streaming' : hidden ? 'hidden' : 'done';
      this.details.hidden = hidden;
      this.line.hidden = !this.details.hidden;
      this.line.textContent = this.details.hidden ? this.words() : '';
      this.renderSummary();
      // Folded, it is painted once it ends (a reopened chat's is the same);
      // unfolded, as it streams.
      if (this.details.open || status !== 'inProgress') this.paintBody();
    }

    renderSummary() {
      const streaming = this.item.status === 'inProgress';
      const parts = [el('span', 'visually-hidden', 'Reasoning: '), el('span', 'reasoning-label', this.words())];
      if (streaming) {
        const live = el('span', 'reasoning-live');
        live.setAttribute('aria-hidden', 'true');
        parts.push(live);
        // The last words streamed, beside the label, while it is folded.
        const last = this.parts.length ? this.parts[this.parts.length - 1].trim() : '';
        if (last) {
          const preview = el('span', 'reasoning-preview', last.length > 160 ? `…${last.slice(-159)}` : last);
          preview.setAttribute('aria-hidden', 'true');
          parts.push(preview);
        }
      } else if (this.item.status === 'completed' && this.shown() && this.parts.length > 1) {
        parts.push(el('span', 'reasoning-count', ` · ${plural(this.parts.filter((x) => x.trim() !== '').length, 'part')}`));
      }
      this.summary.replaceChildren(...parts);
    }

    schedule() {
      if (this.timer) return;
      this.timer = setTimeout(() => this.paintBody(), 80);
    }

    /** paintBody renders the parts, each as Markdown through the answers' sanitizing path. */
    paintBody() {
      clearTimeout(this.timer);
      this.timer = null;
      const shown = this.parts.filter((x) => x.trim() !== '');
      const key = `${this.item.status}\n${JSON.stringify(shown)}`;
      if (key === this.painted) return;
      this.painted = key;
      if (!shown.length) {
        this.body.replaceChildren(el('p', 'reasoning-empty', this.item.status === 'inProgress' ? 'Nothing shown yet…' : 'Nothing shown.'));
        return;
      }
      this.body.replaceChildren(...shown.map((x) => {
        const part = el('div', 'reasoning-part md');
        part.append(renderMarkdown(x));
        return part;
      }));
    }
  }

  // A compaction's trigger in words.
  const TRIGGER_WORDS = { auto: 'auto', manual: 'manual' };

  /**
   * CompactionView is a compaction item: a divider in the transcript
   * where the conversation was compacted — after the turn its
   * summarizedThrough names — reading "Context compacted · 130k → 2.1k
   * tokens · auto", unfolding to the summary the model now reads in place
   * of the turns above it (which stay on screen as they were).
   * "Compacting…" while it runs; a failure says why.
   */
  class CompactionView {
    constructor() {
      this.item = { revision: 0, status: 'inProgress' };
      this.el = el('div', 'compaction');
      this.details = el('details', 'compaction-fold');
      this.summary = el('summary', 'compaction-summary');
      this.body = el('div', 'compaction-body');
      this.details.append(this.summary, this.body);
      this.line = el('p', 'compaction-line');
      this.el.append(this.details, this.line);
    }

    set(item) {
      this.item = item;
      this.render();
    }

    /** words is what the divider reads. */
    words() {
      const it = this.item;
      const trigger = TRIGGER_WORDS[it.trigger] || (it.trigger ? kindWords(it.trigger) : '');
      const tail = trigger ? ` · ${trigger}` : '';
      const before = it.tokensBefore != null ? tokenWords(it.tokensBefore) : null;
      if (it.status === 'inProgress') return `Compacting the context…${before ? ` · ${before} tokens` : ''}${tail}`;
      const outcome = it.outcome || (it.status === 'completed' ? 'compacted' : it.status);
      switch (outcome) {
        case 'compacted': {
          const sizes = before && it.tokensAfter != null ? ` · ${before} → ${tokenWords(it.tokensAfter)} tokens` : '';
          return `Context compacted${sizes}${tail}`;
        }
        case 'noop': return `Nothing to compact yet${tail}`;
        case 'cancelled': return `Compaction stopped${tail}`;
        case 'failed': {
          const why = it.failureReason ? `: ${it.failureReason}` : '';
          return `Compaction failed${why}${tail} · the model still gets the whole conversation`;
        }
        default: return `Compaction ${kindWords(outcome)}${tail}`;
      }
    }

    render() {
      const it = this.item;
      const outcome = it.outcome || (it.status === 'completed' ? 'compacted' : it.status);
      this.el.dataset.status = it.status;
      this.el.dataset.outcome = it.status === 'inProgress' ? 'running' : outcome;
      const text = typeof it.text === 'string' && it.text.trim() !== '' ? it.text : '';
      const fold = it.status !== 'inProgress' && outcome === 'compacted' && text !== '';
      this.details.hidden = !fold;
      this.line.hidden = fold;
      const label = el('span', 'compaction-label', this.words());
      if (fold) {
        this.line.replaceChildren();
        this.summary.replaceChildren(el('span', 'visually-hidden', 'Divider: '), label);
        if (this.text !== text) {
          this.text = text;
          const md = el('div', 'compaction-text md');
          md.append(renderMarkdown(text));
          this.body.replaceChildren(
            el('p', 'compaction-note', 'What the model reads from here on, in place of the conversation above (which stays here as it was):'),
            md);
        }
      } else {
        const parts = [el('span', 'visually-hidden', 'Divider: '), label];
        if (it.status === 'inProgress') {
          const live = el('span', 'compaction-live');
          live.setAttribute('aria-hidden', 'true');
          parts.push(live);
        }
        this.summary.replaceChildren();
        this.line.replaceChildren(...parts);
      }
    }
  }

  /**
   * discardOpenAnswers ends a turn's answers still streaming once the turn
   * has moved on (a retry notice, its terminal): their attempt is over.
   * The server closes such an answer itself, unless it died before saving
   * any of its text: then the log holds nothing of it. Its revision stays,
   * so that an item/completed the server does send still replaces it.
   */
  function discardOpenAnswers(turnId) {
    for (const view of app.items.values()) {
      if (!view.isUser && view.item.turnId === turnId && view.item.status === 'inProgress') {
        view.item = { ...view.item, status: 'failed' };
        view.render();
      }
    }
    for (const view of app.reasoning.values()) {
      if (view.item.turnId === turnId && view.item.status === 'inProgress') view.discard();
    }
  }

  /** upsertReasoning shows a reasoning item, replacing an older revision of it. */
  function upsertReasoning(item) {
    let view = app.reasoning.get(item.itemId);
    if (view && item.revision <= view.item.revision) return;
    if (!view) {
      view = new ReasoningView();
      view.el.dataset.itemId = item.itemId;
      app.reasoning.set(item.itemId, view);
      const tv = turnView(item.turnId);
      // Above the answer of its step: it opens before the answer does.
      tv.add(view.el);
      // A new attempt's output began: the retry before it ran.
      if (tv.status) tv.status.attemptBegan();
    }
    view.set(item);
  }

  /**
   * upsertCompaction shows a compaction item as a divider: in the turn
   * that ran it, before its message (the conversation before that turn
   * is what it summarises), or after the turn its summarizedThrough
   * names when that is elsewhere. A session/compact's own turn shows
   * the divider alone.
   */
  function upsertCompaction(item, live) {
    let view = app.compactions.get(item.itemId);
    if (view && item.revision <= view.item.revision) return;
    const tv = turnView(item.turnId);
    if (!view) {
      view = new CompactionView();
      view.el.dataset.itemId = item.itemId;
      app.compactions.set(item.itemId, view);
      tv.compaction = view;
      // Before the turn's message, after any compaction it ran before.
      const first = [...tv.el.children].find((c) => !c.classList.contains('compaction'));
      tv.el.insertBefore(view.el, first || null);
      tv.markCompaction();
    }
    const was = view.item.status;
    view.set(item);
    const through = item.summarizedThrough && app.turns.get(item.summarizedThrough);
    if (through && through !== tv && through.el.isConnected) {
      const next = through.el.nextElementSibling;
      // Right after the turn summarised: where its turn begins, or on its
      // own between two turns.
      if (next === tv.el) {
        if (view.el.parentNode !== tv.el) tv.el.insertBefore(view.el, [...tv.el.children].find((c) => !c.classList.contains('compaction')) || null);
      } else if (next !== view.el) {
        through.el.after(view.el);
      }
    }
    syncCompact();
    if (live && was === 'inProgress' && item.status !== 'inProgress') announce(`${view.words()}.`);
  }

  /** upsertItem shows an item, replacing an older revision of it. */
  function upsertItem(item, live) {
    if (item.kind === 'toolCall') {
      upsertTool(item);
      return;
    }
    if (item.kind === 'reasoning') {
      upsertReasoning(item);
      return;
    }
    if (item.kind === 'compaction') {
      upsertCompaction(item, live);
      return;
    }
    if (item.kind !== 'userMessage' && item.kind !== 'agentMessage') return;
    let view = app.items.get(item.itemId);
    if (view && item.revision <= view.item.revision) return;
    if (!view && item.kind === 'userMessage' && app.echoes.has(item.commandId)) {
      // Our own message, shown when it was sent: adopt it.
      view = app.echoes.get(item.commandId);
      app.echoes.delete(item.commandId);
      view.note = '';
      rekey(item.commandId, item.turnId);
    }
    if (!view) {
      view = new ItemView(item.kind);
      const tv = turnView(item.turnId);
      if (item.kind === 'userMessage') tv.setUser(view);
      else {
        tv.add(view.el);
        // A new answer attempt began: the retry before it ran.
        if (tv.status) tv.status.attemptBegan();
      }
    }
    view.el.dataset.itemId = item.itemId;
    app.items.set(item.itemId, view);
    const previous = view.item;
    view.item = item;
    if (typeof item.text === 'string') {
      // An attempt cut by a crash may hold less than was streamed here
      // (deltas are not durable): keep what the reader already saw.
      const shown = view.source;
      const cut = item.truncated && shown.length > item.text.length && shown.startsWith(item.text);
      if (!cut && item.text !== shown) view.setText(item.text);
      else if (view.timer) view.paint();
    } else if (previous.text == null && view.source !== '') view.setText('');
    if (view.isUser && Array.isArray(item.attachments) && item.attachments.length &&
        (!previous.attachments || previous.attachments.length !== item.attachments.length)) {
      view.gallery.setAttachments(item.attachments, app.current, item.itemId);
      view.paint();
    }
    view.render();
  }

  function appendDelta(p) {
    if (p.field === 'output') {
      // A tool call's output, streamed (MSP's visibleOutput delta).
      const tool = app.tools.get(p.itemId);
      if (tool) tool.appendOutput(p.delta);
      return;
    }
    const part = /^summary\.(\d{1,4})$/.exec(p.field || '');
    if (part) {
      // Part n of a reasoning item's summary.
      if (!app.reasoning.has(p.itemId)) {
        // Its item/started was lost (a gap): open it now, below any real revision.
        upsertReasoning({ itemId: p.itemId, kind: 'reasoning', revision: 0.5, status: 'inProgress', turnId: app.running });
      }
      const view = app.reasoning.get(p.itemId);
      // Deltas after the authoritative end are stale.
      if (view.item.status === 'inProgress') view.append(Number(part[1]), p.delta);
      return;
    }
    if (p.field && p.field !== 'text') return;
    if (!app.items.has(p.itemId)) {
      // Its item/started was lost (a gap): open it now, below any real
      // revision, so that the item's own events still replace it.
      upsertItem({ itemId: p.itemId, kind: 'agentMessage', revision: 0.5, status: 'inProgress', turnId: app.running });
    }
    const view = app.items.get(p.itemId);
    // Deltas after the authoritative item/completed are stale.
    if (view.item.status === 'inProgress') view.append(p.delta);
  }

  // ------------------------------------------------------------ tool calls

  // A toolCall's status in words; a status this page does not know is
  // spelt out as it comes.
  const CALL_WORDS = {
    inProgress: 'running',
    completed: 'completed',
    failed: 'failed',
    rejected: 'rejected',
    timedOut: 'timed out',
    cancelled: 'cancelled',
  };

  /**
   * ToolView is one tool call: a compact row in its turn, between the
   * text of the step that asked for it and what follows, reading
   * "🔧 calculator · builtin · completed · 12 ms" (and why, when it did
   * not complete), that unfolds to its arguments and output. A call that
   * waits for a person has its ApprovalCard below the row, outside the
   * fold, so that the question shows while the row is folded; once
   * decided the card says how. A call's name, arguments, output and
   * failure are the tool's or the model's text: they are set as
   * textContent only, never parsed as HTML or Markdown.
   */
  class ToolView {
    constructor() {
      this.item = { revision: 0, status: 'inProgress' };
      this.output = ''; // visibleOutput, and any output deltas after it
      this.whole = null; // {state, text, error, read}: "Show the whole output"
      this.approval = null; // the ApprovalCard, for a call that asked
      this.el = el('div', 'tool');
      this.details = el('details', 'tool-call');
      this.summary = el('summary', 'tool-summary');
      this.body = el('div', 'tool-body');
      this.details.append(this.summary, this.body);
      this.el.append(this.details);
    }

    /** set shows a revision of the call. */
    set(item) {
      this.item = item;
      if (typeof item.visibleOutput === 'string') this.output = item.visibleOutput;
      this.el.dataset.status = item.status;
      this.render();
    }

    render() {
      this.renderSummary();
      this.renderBody();
    }

    /** attach puts an approval card below the row. */
    attach(card) {
      this.approval = card;
      this.el.append(card.el);
      this.render();
    }

    /** waiting tells whether the call waits for a person's decision. */
    waiting() {
      return this.item.status === 'inProgress' && this.approval !== null && this.approval.state !== 'resolved';
    }

    appendOutput(delta) {
      if (this.item.status !== 'inProgress') return; // stale after the result
      this.output += delta;
      this.renderBody();
    }

    renderSummary() {
      const it = this.item;
      const icon = el('span', 'tool-icon'); // a wrench, drawn by the style sheet
      icon.setAttribute('aria-hidden', 'true');
      const parts = [
        el('span', 'visually-hidden', 'Tool call: '),
        icon,
        el('span', 'tool-name', it.tool || 'tool'),
      ];
      const sep = () => el('span', 'tool-sep', ' · ');
      if (it.server) parts.push(sep(), el('span', 'tool-server', it.server));
      const waiting = this.waiting();
      this.el.toggleAttribute('data-waiting', waiting);
      parts.push(sep(), el('span', 'tool-state', waiting ? 'waiting for approval' : CALL_WORDS[it.status] || kindWords(it.status)));
      if (it.status === 'inProgress' && !waiting) {
        const live = el('span', 'tool-live');
        live.setAttribute('aria-hidden', 'true');
        parts.push(live);
      }
      if (it.durationMs != null) parts.push(sep(), el('span', 'tool-time', callTime(it.durationMs)));
      const why = this.why();
      if (why) parts.push(el('span', 'visually-hidden', ': '), el('span', 'tool-why', why));
      this.summary.replaceChildren(...parts);
    }

    /**
     * why says why a call did not complete: its failureReason, and for a
     * tool's own error the first line of what it said.
     */
    why() {
      const it = this.item;
      if (it.status === 'completed' || it.status === 'inProgress') return '';
      let why = it.failureReason || '';
      if (it.failureKind === 'tool_error' && this.output.trim()) {
        let said = this.output.trim().split('\n')[0];
        if (said.length > 200) said = `${said.slice(0, 199)}…`;
        why = why ? `${why}: ${said}` : said;
      }
      return why;
    }

    renderBody() {
      const it = this.item;
      const rows = [el('p', 'tool-label', 'Arguments')];
      rows.push(it.args == null || it.args === '' ? el('p', 'tool-empty', 'none') : el('pre', 'tool-args', prettyJSON(it.args)));
      const whole = this.whole && this.whole.state === 'shown';
      rows.push(el('p', 'tool-label', whole ? 'Output (whole)' : 'Output'));
      const text = whole ? this.whole.text : this.output;
      if (text !== '') rows.push(el('pre', 'tool-output', text));
      else rows.push(el('p', 'tool-empty', it.status === 'inProgress' ? (this.waiting() ? 'not run yet: it waits for approval' : 'waiting for the result…') : 'no output'));
      if (whole) {
        const note = it.outputRef && it.outputRef.truncated
          ? `The whole output as kept: its first ${size(this.whole.read)}; the server keeps no more.`
          : `The whole output: ${size(this.whole.read)}.`;
        rows.push(el('p', 'tool-note', note));
      } else if (it.truncated) {
        rows.push(el('p', 'tool-note', 'Output truncated: only its beginning was kept.'));
      }
      if (it.outputRef && !whole) rows.push(this.wholeControl());
      const facts = [it.failureKind && `failure ${it.failureKind}`, it.callId && `call ${it.callId}`].filter(Boolean);
      if (facts.length) rows.push(el('p', 'tool-facts', facts.join(' · ')));
      this.body.replaceChildren(...rows);
    }

    /** wholeControl is "Show the whole output", or how reading it goes. */
    wholeControl() {
      const w = this.whole || { state: 'idle' };
      const box = el('div', 'tool-whole');
      const ref = this.item.outputRef;
      const show = button('small show-whole', w.state === 'failed' ? 'Try again' : 'Show the whole output');
      if (ref.byteLen) show.setAttribute('aria-label', `Show the whole output, ${size(ref.byteLen)}`);
      show.disabled = w.state === 'reading';
      show.addEventListener('click', () => this.readWhole());
      box.append(show);
      if (w.state === 'reading') {
        box.append(el('span', 'tool-whole-state', ref.byteLen ? `reading… ${size(w.read)} of ${size(ref.byteLen)}` : 'reading…'));
      } else if (w.state === 'failed') {
        box.append(el('span', 'tool-whole-state failed', `Could not read the whole output: ${w.error}`));
      } else if (ref.byteLen) {
        box.append(el('span', 'tool-whole-state', size(ref.byteLen)));
      }
      return box;
    }

    /**
     * readWhole pages item/readOutput from the start to eof and shows
     * the whole output as text in place of its first 32 KiB.
     */
    async readWhole() {
      const it = this.item;
      const ref = it.outputRef;
      const sessionId = app.current;
      const epoch = app.epoch;
      this.whole = { state: 'reading', text: '', read: 0, error: '' };
      this.renderBody();
      const focusBack = () => {
        const b = this.body.querySelector('.show-whole');
        (b || this.summary).focus();
      };
      try {
        let offset = 0;
        const parts = [];
        for (;;) {
          const res = await rpc.call('item/readOutput', { sessionId, itemId: it.itemId, outputRef: ref.id, offsetBytes: offset, lengthBytes: READ_PART });
          if (epoch !== app.epoch) return;
          if (res.encoding && res.encoding !== 'utf8') throw new RpcError('the output is not text', 'notText', 'item/readOutput');
          parts.push(res.content);
          offset = res.offsetBytes + res.byteLen;
          this.whole.read = offset;
          if (res.eof) break;
          if (res.byteLen <= 0) throw new RpcError('the server made no progress', 'noProgress', 'item/readOutput');
          this.renderBody();
        }
        this.whole = { state: 'shown', text: parts.join(''), read: offset, error: '' };
        this.renderBody();
        announce(`The whole output of ${it.tool || 'the tool'} is shown: ${size(offset)}.`);
        const out = this.body.querySelector('.tool-output');
        if (out) {
          out.tabIndex = -1;
          out.focus();
        }
      } catch (err) {
        if (epoch !== app.epoch) return;
        this.whole = { state: 'failed', text: '', read: 0, error: err.message || String(err) };
        this.renderBody();
        focusBack();
      }
    }
  }

  // "Show the whole output" reads it in parts of this many bytes, so that
  // a long one shows its progress (and no frame nears the server's limit).
  const READ_PART = 1 << 20;

  /** upsertTool shows a tool call, replacing an older revision of it. */
  function upsertTool(item) {
    let view = app.tools.get(item.itemId);
    if (view && item.revision <= view.item.revision) return;
    if (!view) {
      view = new ToolView();
      view.el.dataset.itemId = item.itemId;
      app.tools.set(item.itemId, view);
      // In the order the calls began: after the text of the step that
      // asked for them, before the answer made of their results.
      turnView(item.turnId).add(view.el);
    }
    view.set(item);
  }

  // ------------------------------------------------------------ approvals

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
  function showApproval(req, asked) {
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
  function approvalResolved(p) {
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

  /**
   * onRequest answers a server request: approval/request of the chat on
   * screen gets its receipt (an empty result) and its card; anything else
   * is refused, and stays pending for another client.
   */
  function onRequest(method, params) {
    if (method !== 'approval/request') {
      throw Object.assign(new Error(`${method} is not supported by this client`), { code: -32601, kind: 'methodNotFound' });
    }
    if (params.sessionId !== app.current) {
      throw Object.assign(new Error('that chat is not on screen here'), { code: -32603, kind: 'internal' });
    }
    if (app.buffer) app.buffer.push([method, params]);
    else apply(method, params, false);
    return {};
  }

  /** showPending asks for a session's pending approvals and shows them. */
  async function showPending(sessionId, epoch) {
    const res = await rpc.call('approval/listPending', { sessionId });
    if (epoch !== app.epoch) return;
    for (const req of res.approvals || []) showApproval(req, true);
  }

  // ------------------------------------------------------------ approval mode

  /** showApprovalMode shows the chat's approval mode in the setting. */
  function showApprovalMode(mode) {
    const sel = ui.approvalMode;
    if (![...sel.options].some((o) => o.value === mode)) return; // a mode this page does not know
    sel.value = mode;
    sel.dataset.value = mode;
  }

  async function pickApprovalMode() {
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

  // ------------------------------------------------------------ reasoning effort

  /**
   * showEffort shows a reasoning effort in the picker: the chat's
   * (Session.reasoningEffort) or, with none open, the next chat's. mspd
   * takes a tier for a chat but has no way to take it back to the
   * model's default, so a chat that has one offers Default no more.
   */
  function showEffort(effort) {
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
  const effortOf = (s) => (s && s.reasoningEffort && s.reasoningEffort.reasoningEffort) || '';

  /** effortLabel names a tier as the picker does. */
  const effortLabel = (value) => {
    const o = [...ui.effort.options].find((x) => x.value === value);
    return o ? o.textContent : value;
  };

  /** setEffort sets a chat's reasoning effort (session/setReasoningEffort). */
  function setEffort(sessionId, effort) {
    return command('session/setReasoningEffort', { commandId: uuidv7(), sessionId, reasoningEffort: effort });
  }

  async function pickEffort() {
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

  // ------------------------------------------------------------ context window

  // How full the context window is, by pressure, in words (colour only
  // repeats them).
  const PRESSURE_WORDS = { warning: 'nearly full', blocked: 'full' };

  /**
   * showContext shows session/contextUsage (or session/resume's
   * contextUsage) in the meter beside the composer: "1.7k / 2.0k tokens ·
   * nearly full", a bar coloured by pressure. null hides it (a chat with
   * no usage yet). live: a change of pressure is said aloud.
   */
  function showContext(u, live = false) {
    const before = app.contextUsage;
    app.contextUsage = u && typeof u.usedTokens === 'number' ? { usedTokens: u.usedTokens, windowTokens: u.windowTokens, pressure: u.pressure || 'normal' } : null;
    const c = app.contextUsage;
    ui.context.hidden = !c;
    if (!c) return;
    const known = typeof c.windowTokens === 'number' && c.windowTokens > 0;
    const words = PRESSURE_WORDS[c.pressure] || (c.pressure !== 'normal' ? kindWords(c.pressure) : '');
    const pct = known ? Math.min(100, (c.usedTokens / c.windowTokens) * 100) : 0;
    ui.context.dataset.pressure = c.pressure;
    ui.contextFill.style.width = `${pct.toFixed(1)}%`;
    ui.contextFill.parentElement.hidden = !known;
    // "tokens" goes on a narrow screen (the meter's value text keeps it).
    ui.contextText.replaceChildren(`${tokenWords(c.usedTokens)}${known ? ` / ${tokenWords(c.windowTokens)}` : ''}`,
      el('span', 'context-unit', ' tokens'), words ? ` · ${words}` : '');
    ui.context.setAttribute('aria-valuenow', String(c.usedTokens));
    if (known) ui.context.setAttribute('aria-valuemax', String(c.windowTokens));
    else ui.context.removeAttribute('aria-valuemax');
    const used = `${c.usedTokens.toLocaleString('en')}${known ? ` of ${c.windowTokens.toLocaleString('en')} (${Math.round(pct)}%)` : ''} tokens of the model's context used`;
    const advice = c.pressure === 'normal' ? '' : '; the older conversation will be compacted before the next message';
    ui.context.setAttribute('aria-valuetext', `${used}${words ? `: ${words}` : ''}${advice}`);
    ui.context.title = `${used}${words ? `: ${words}` : ''}${advice}.`;
    if (live && before && before.pressure !== c.pressure && c.pressure !== 'normal') {
      announce(`The chat's context is ${words || c.pressure}: the older conversation will be compacted before the next message.`);
    }
  }

  /** compactNote says (or, with no text, clears) what the Compact control has to say, aloud too. */
  function compactNote(text) {
    ui.compactNote.textContent = text || '';
    if (text) announce(text);
  }

  /** syncCompact shows Compact for an open chat, off while a compaction of its runs. */
  function syncCompact() {
    ui.compact.hidden = !app.current;
    const running = [...app.compactions.values()].some((v) => v.item.status === 'inProgress');
    ui.compact.disabled = running || !!ui.compact.dataset.sending;
  }

  /**
   * compactChat sends session/compact: a turn of its own summarises the
   * conversation, shown as a divider; noop (nothing finished since the
   * chat began or was last compacted) is said in words.
   */
  async function compactChat() {
    const sessionId = app.current;
    if (!sessionId || ui.compact.disabled) return;
    const commandId = uuidv7();
    app.compactCommands.add(commandId);
    ui.compact.dataset.sending = 'true';
    syncCompact();
    compactNote('Compacting…');
    try {
      const ack = await command('session/compact', { commandId, sessionId }, () => compactNote('Offline: compacting as soon as the connection is back.'));
      if (sessionId !== app.current) return;
      if (ack.status === 'noop') {
        compactNote('Nothing to compact yet: no exchange has finished since the chat began or was last compacted.');
      } else if (app.running && app.running !== commandId) {
        compactNote('Compaction queued: it runs once the answer under way is done.');
      } else {
        compactNote('');
      }
    } catch (err) {
      compactNote('');
      throw err;
    } finally {
      delete ui.compact.dataset.sending;
      syncCompact();
    }
  }

  // ------------------------------------------------------------ retries

  /** techDetails builds a closed disclosure of label/value pairs. */
  function techDetails(summary, rows) {
    const d = el('details', 'tech');
    const dl = el('dl');
    for (const [k, v] of Object.entries(rows)) {
      if (v == null || v === '') continue;
      dl.append(el('dt', null, k), el('dd', null, String(v)));
    }
    d.append(el('summary', null, summary), dl);
    return d;
  }

  /**
   * RetryStatus is a turn's one retry status: "retrying in 3 s · attempt
   * 2 of 5 · rate limited", counting down; then "retried" once the next
   * attempt has started, "retry cancelled" when Stop ended the wait.
   * Each notice's technical detail is one click away.
   */
  class RetryStatus {
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

  function addRetry(p, model, emittedAtMs) {
    if (p.viewCursor && app.notices.has(p.viewCursor)) return; // a replay
    if (p.viewCursor) app.notices.add(p.viewCursor);
    discardOpenAnswers(p.turnId);
    const tv = turnView(p.turnId);
    tv.retryStatus().schedule(p, model, emittedAtMs);
    if (model && p.fallback) {
      if (emittedAtMs) { // live: say it, and show the breakers as they are now
        announce(`${fallbackWords(p).replace(' · a', '. A')}.`);
        refreshModelsSoon();
      }
      return;
    }
    const why = model ? kindWords(p.errorKind) : p.reason;
    if (emittedAtMs) { // live: say it
      const secs = Math.max(1, Math.ceil(p.retryDelayMs / 1000));
      announce(`${sentence(why)}. Retrying in ${plural(secs, 'second')}, attempt ${p.nextAttempt} of ${p.maxAttempts}.`);
    }
  }

  /** addSkip shows turn/providerSkipped on its turn's status. */
  function addSkip(p, emittedAtMs) {
    if (p.viewCursor && app.notices.has(p.viewCursor)) return; // a replay
    if (p.viewCursor) app.notices.add(p.viewCursor);
    turnView(p.turnId).retryStatus().skipped(p);
    if (emittedAtMs) {
      announce(`${skippedWords(p).replace(' · a', '. A')}.`);
      refreshModelsSoon();
    }
  }

  // ------------------------------------------------------------ outcomes

  // What a failure means, in plain words, by its errorKind.
  const PLAIN = {
    rateLimited: 'The model provider is limiting requests right now',
    overloaded: 'The model is overloaded',
    serverError: 'The model provider had an internal error',
    timeout: 'The model took too long to respond',
    connectionError: 'The connection to the model provider dropped',
    streamInterrupted: 'The answer was cut off mid-stream',
    conflict: 'The model provider refused the request as conflicting',
    quotaExhausted: 'The provider account has run out of quota',
    auth: "The model provider refused this server's credentials",
    contextLengthExceeded: 'This chat is too long for the model',
    contentFilter: "The provider's content filter blocked the answer",
    invalidRequest: 'The model provider rejected the request',
    notFound: 'The model provider does not know this model',
    truncated: 'The answer ran past the output limit',
    schemaViolation: 'The answer did not have the required format',
    budgetExhausted: 'Retries to this provider are paused',
  };

  // Advice after a failure no retry was left for, by errorKind.
  const ADVICE = {
    quotaExhausted: 'Check the plan or billing of the provider account.',
    auth: "Check the server's API key for this provider.",
    contextLengthExceeded: 'Start a new chat, or edit an earlier message to branch off.',
    contentFilter: 'Rephrase the message and send it again.',
    invalidRequest: 'Try a different model, or rephrase the message.',
    notFound: 'Pick another model.',
  };

  // The error's stopReason, in the words plainFailure switches on.
  const STOPS = { budgetExhausted: 'budget', attemptsExhausted: 'attempts', retryAfterTooLong: 'retryAfter', deadline: 'deadline' };

  /**
   * failureFacts reads a failed turn/completed: its errorKind, HTTP status,
   * system and why retrying stopped — from the error's own members, which
   * mspd sets, or else from its message (which begins with the kind's
   * words) and the turn's last model retry notice.
   */
  function failureFacts(p, tv) {
    const message = (p.error && p.error.message) || p.reason || '';
    const e = p.error || {};
    if (e.errorKind) {
      return { message, kind: e.errorKind, httpStatus: e.httpStatus, system: e.system, stop: STOPS[e.stopReason] || null };
    }
    const notice = tv.status && tv.status.last && tv.status.last.model ? tv.status.last : null;
    let kind = null;
    let best = 0;
    for (const [k, words] of Object.entries(KIND_WORDS)) {
      if (words.length > best && message.startsWith(words) && /^($|[\s;:(])/.test(message.slice(words.length))) {
        kind = k;
        best = words.length;
      }
    }
    if (!kind && notice) kind = notice.errorKind;
    const http = /\(HTTP (\d{3})\)/.exec(message);
    let stop = null;
    if (message.includes('; the retry budget for this provider is spent')) stop = 'budget';
    else if (/; gave up after \d+ attempts/.test(message)) stop = 'attempts';
    else if (message.includes('longer than this server waits')) stop = 'retryAfter';
    else if (message.includes('; no time left to retry')) stop = 'deadline';
    return {
      message,
      kind,
      httpStatus: http ? Number(http[1]) : notice && notice.httpStatus,
      system: notice && notice.system,
      stop,
    };
  }

  /** plainFailure says in plain words why a turn failed and what to do. */
  function plainFailure(p, f) {
    const errKind = p.error && p.error.kind;
    if (errKind === 'hostRestarted') return 'The server restarted while answering, and no attempts were left. Try again.';
    if (errKind === 'logError') return 'The server could not save this chat, so the answer stopped. Try again in a minute.';
    if (errKind === 'configError') return `The server could not run this request: ${f.message}`;
    const base = PLAIN[f.kind];
    if (!base) return f.message ? `${sentence(f.message)}.`.replace(/\.\.$/, '.') : 'The answer failed.';
    const attempts = p.attempts ? p.attempts.count : 0;
    switch (f.stop) {
      case 'budget': return `${base} and the retry budget is used up. Try again in a minute.`;
      case 'attempts': return `${base}, and all ${attempts} attempts failed. Try again in a minute.`;
      case 'retryAfter': return `${base} and asked to wait longer than this server waits. Try again later.`;
      case 'deadline': return `${base}, and there was no time left to retry. Try again.`;
      default: break;
    }
    if (ADVICE[f.kind]) return `${base}. ${ADVICE[f.kind]}`;
    return p.error && p.error.retryable ? `${base}. Try again.` : `${base}.`;
  }

  /**
   * outcome words a turn's terminal: the status line, the technical
   * detail behind a click, and the action offered ("Retry" after a
   * failure or a stop, "Regenerate" after an answer).
   */
  function outcome(p, tv) {
    const a = p.attempts;
    if (p.terminal === 'unqueued') return { text: '↶ withdrawn before it ran' };
    if (p.terminal === 'cancelled') return { text: '■ stopped', again: 'Retry' };
    if (p.terminal === 'failed') {
      const f = failureFacts(p, tv);
      const details = {
        'What happened': f.message,
        'Turn error': p.error && p.error.kind,
        errorKind: f.kind,
        'HTTP status': f.httpStatus,
        System: f.system,
        Attempts: a && a.count,
        'Output tokens': a && `${a.usageComplete ? '' : '≥ '}${a.outputTokens}`,
        Duration: p.durationMs != null ? duration(p.durationMs) : null,
        'Turn id': p.turnId,
      };
      return { text: `✗ ${plainFailure(p, f)}`, details, again: 'Retry' };
    }
    const parts = [];
    if (p.durationMs != null) parts.push(duration(p.durationMs));
    if (a) {
      parts.push(plural(a.count, 'attempt'));
      parts.push(`${a.usageComplete ? '' : '≥'}${plural(a.outputTokens, 'token')}`);
    } else if (p.usage) {
      parts.push(plural(p.usage.outputTokens, 'token'));
    }
    const mark = p.terminal === 'completed' ? '✓' : p.terminal;
    // Reasoning tokens are part of the output tokens: the detail says how many.
    const u = p.usage;
    const details = u && u.reasoningTokens > 0 ? {
      'Reasoning tokens': u.reasoningTokens.toLocaleString('en'),
      'Output tokens': `${u.outputTokens.toLocaleString('en')} (reasoning included)`,
      'Input tokens': u.inputTokens != null ? u.inputTokens.toLocaleString('en') : null,
    } : null;
    return { text: parts.length ? `${mark} ${parts.join(' · ')}` : mark, details, again: 'Regenerate' };
  }

  function completeTurn(p) {
    discardOpenAnswers(p.turnId);
    const tv = turnView(p.turnId);
    tv.end(p);
    if (app.running === p.turnId) setRunning(null);
    // A session/compact's turn has no footer: its divider says how it
    // went, and was announced as it ended.
    if (tv.footer) announce(p.terminal === 'completed' ? 'Answer complete.' : tv.footer.querySelector('.turn-status').textContent);
    if (!app.listStream) refreshSessionsSoon();
  }

  function setRunning(turnId) {
    app.running = turnId || null;
    if (app.stopping && app.stopping !== app.running) app.stopping = null;
    ui.stop.hidden = !app.running;
    ui.stop.disabled = !!app.stopping;
    if (!app.stopping) ui.stop.textContent = 'Stop';
    ui.transcript.setAttribute('aria-busy', app.running ? 'true' : 'false');
  }

  /** resetTranscript empties the view for a (re)loaded session. */
  function resetTranscript() {
    ui.transcript.replaceChildren(ui.empty);
    ui.empty.hidden = false;
    app.turns.clear();
    app.items.clear();
    app.tools.clear();
    app.approvals.clear();
    app.echoes.clear();
    app.notices.clear();
    app.reasoning.clear();
    app.compactions.clear();
    app.lastTurn = null;
    app.askedModel = null;
    setRunning(null);
    showContext(null);
    compactNote('');
    syncCompact();
  }

  // View notifications of the current session, by method. Each is
  // idempotent (items replace by revision, retry notices are keyed by
  // cursor, footers are set), so a replayed event does no harm.
  const handlers = {
    'turn/started': (p) => {
      rekey(p.commandId, p.turnId);
      turnView(p.turnId).markCompaction();
      setRunning(p.turnId);
    },
    'item/started': (p, at) => upsertItem(p.item, !!at),
    'item/updated': (p, at) => upsertItem(p.item, !!at),
    'item/completed': (p, at) => upsertItem(p.item, !!at),
    'item/delta': appendDelta,
    'turn/modelRetryScheduled': (p, at) => addRetry(p, true, at),
    'turn/retryScheduled': (p, at) => addRetry(p, false, at),
    'turn/providerSkipped': addSkip,
    'session/tokenUsage': (p) => {
      if (p.turnId) turnView(p.turnId).answered(p.modelId);
    },
    'turn/completed': completeTurn,
    'turn/unqueued': (p) => turnView(p.turnId).unqueued(),
    'session/nameChanged': (p) => patchSession(p.sessionId, { name: p.name }),
    'session/modelChanged': (p) => {
      app.askedModel = p.modelId || null;
      patchSession(p.sessionId, { modelId: p.modelId, providerId: p.providerId ?? null });
      selectModel(p.providerId, p.modelId);
    },
    'session/reasoningEffortChanged': (p) => {
      const s = app.sessions.get(p.sessionId);
      if (s) app.sessions.set(p.sessionId, { ...s, reasoningEffort: { reasoningEffort: p.reasoningEffort, source: p.source } });
      showEffort(p.reasoningEffort);
    },
    'session/contextUsage': (p, at) => showContext(p, !!at),
    'session/approvalModeChanged': (p) => {
      const s = app.sessions.get(p.sessionId);
      if (s) app.sessions.set(p.sessionId, { ...s, approvalMode: { ...s.approvalMode, mode: p.mode, source: p.source } });
      showApprovalMode(p.mode);
    },
    'approval/requested': (p) => showApproval(p, false),
    // The server presents a pending approval (live, and again to each
    // subscription): its params are approval/requested's.
    'approval/request': (p) => showApproval(p, true),
    'approval/resolved': approvalResolved,
  };

  /** apply renders one view event; live ones advance the session's cursor. */
  function apply(method, params, live = true, emittedAtMs = undefined) {
    // approval/request repeats an event's params, cursor and all: it
    // moves no cursor.
    if (live && params.viewCursor && method !== 'approval/request') app.cursors.set(params.sessionId, params.viewCursor);
    const handler = handlers[method];
    if (!handler) return;
    const t = ui.transcript;
    const atBottom = t.scrollHeight - t.scrollTop - t.clientHeight < 48;
    handler(params, live ? emittedAtMs : undefined);
    if (atBottom) t.scrollTop = t.scrollHeight;
  }

  function onNotification(method, params, emittedAtMs) {
    switch (method) {
      case 'session/started':
      case 'session/listChanged':
        upsertSession(params.session);
        return;
      case 'session/deleteCompleted':
        deleteCompleted(params);
        return;
      case 'session/statusChanged':
      case 'session/closed':
        if (!app.listStream) refreshSessionsSoon();
        break;
      default:
    }
    if (params.sessionId !== app.current) return;
    if (app.buffer) {
      app.buffer.push([method, params, emittedAtMs]);
    } else if (method === 'view/gap') {
      app.buffer = [[method, params]];
      drain(app.epoch).catch(showError);
    } else {
      apply(method, params, true, emittedAtMs);
    }
  }

  /** drain applies held events in order, filling any gap among them. */
  async function drain(epoch) {
    while (epoch === app.epoch && app.buffer && app.buffer.length) {
      const [method, params, emittedAtMs] = app.buffer.shift();
      if (method !== 'view/gap') {
        apply(method, params, true, emittedAtMs);
      } else if (!(await fillGap(params, epoch))) {
        return;
      }
    }
    if (epoch === app.epoch) app.buffer = null;
  }

  /**
   * fillGap pages the durable events the server could not deliver, from
   * after up to next, and applies them in order. When that fails the view
   * is rebuilt from a fresh resume.
   */
  async function fillGap({ sessionId, after, next }, epoch) {
    let cursor = after;
    try {
      for (;;) {
        const page = await rpc.call('view/page', { sessionId, cursor, limit: 200 });
        if (epoch !== app.epoch) return false;
        for (const ev of page.events) {
          apply(ev.method, ev.params, false);
          if (ev.params.viewCursor === next) return true;
        }
        if (page.nextCursor == null) return true;
        if (!page.events.length || page.nextCursor === cursor) throw new Error('view/page made no progress');
        cursor = page.nextCursor;
      }
    } catch (err) {
      if (epoch !== app.epoch) return false;
      app.stale = true;
      if (rpc.ready) openSession(sessionId); // otherwise on reconnect
      return false;
    }
  }

  /**
   * pageHistory replays a whole session's durable view through the live
   * handlers (all idempotent), so a reopened chat shows what a watcher saw:
   * messages, retry statuses and turn footers.
   */
  async function pageHistory(sessionId, epoch) {
    let cursor;
    for (;;) {
      const params = { sessionId, limit: 200 };
      if (cursor) params.cursor = cursor;
      const page = await rpc.call('view/page', params);
      if (epoch !== app.epoch) return;
      page.events.forEach((ev) => apply(ev.method, ev.params, false));
      if (page.nextCursor == null || !page.events.length || page.nextCursor === cursor) return;
      cursor = page.nextCursor;
    }
  }

  // ------------------------------------------------------------ sessions

  /**
   * openSession shows a session: without a cursor it renders the history
   * afresh; with one (a reconnect) the server replays exactly what was
   * missed after it.
   */
  async function openSession(sessionId, cursor) {
    const epoch = ++app.epoch;
    const previous = app.current;
    if (previous && previous !== sessionId) {
      rpc.call('view/unsubscribe', { sessionId: previous }).catch(() => {});
    }
    app.current = sessionId;
    app.buffer = []; // live events wait until the history is in place
    markCurrent();
    const params = { commandId: uuidv7(), sessionId };
    if (cursor) params.cursor = cursor;
    else {
      // The transcript is rebuilt from the log itself (below), so that old
      // turns keep their retry statuses and footers: no inline items needed.
      params.excludeItems = true;
      resetTranscript();
    }
    let res;
    try {
      res = await rpc.call('session/resume', params);
    } catch (err) {
      if (epoch !== app.epoch) return;
      app.buffer = null;
      if (err.kind === 'disconnected') {
        app.stale = app.stale || !cursor; // the next connection resumes
      } else if (cursor) {
        openSession(sessionId); // the cursor cannot be served: start over
      } else {
        showError(err);
      }
      return;
    }
    if (epoch !== app.epoch) return;
    app.instructions = (res.config && res.config.instructions) || '';
    syncInstructionsButton();
    upsertSession(res.session);
    showContext(res.contextUsage || null);
    syncCompact();
    if (!cursor) loadModels().catch(() => {});
    await showHistory(sessionId, res, !cursor, epoch);
    // The approvals waiting for a person, as the server lists them (the
    // history shows them too, and the server presents each again).
    if (epoch === app.epoch && (res.pendingRequests || []).some((r) => r.kind === 'approval')) {
      await showPending(sessionId, epoch);
    }
  }

  /**
   * showHistory renders a freshly opened (resumed or forked) session from
   * its log, then lets the held live events through.
   */
  async function showHistory(sessionId, res, fresh, epoch) {
    try {
      if (fresh) {
        app.cursors.set(sessionId, res.viewCursor);
        await pageHistory(sessionId, epoch);
        ui.transcript.scrollTop = ui.transcript.scrollHeight;
      }
    } catch (err) {
      if (epoch !== app.epoch) return;
      // Live events must not wait on a history that will not come: let
      // them through, and reopen from scratch on the next connection.
      app.buffer = null;
      app.stale = true;
      if (err.kind !== 'disconnected') showError(err);
      return;
    }
    app.stale = false;
    setRunning(res.session.activeTurnId);
    await drain(epoch);
  }

  /** enter makes a session just created here (started or forked) current. */
  function enter(session, viewCursor, instructions) {
    const previous = app.current;
    if (previous && previous !== session.sessionId) {
      rpc.call('view/unsubscribe', { sessionId: previous }).catch(() => {});
    }
    app.epoch++;
    app.buffer = null;
    app.current = session.sessionId;
    app.cursors.set(session.sessionId, viewCursor);
    app.stale = false;
    app.instructions = instructions || '';
    resetTranscript();
    upsertSession(session);
    syncInstructionsButton();
    syncCompact();
  }

  /** newChat starts a chat, with the next chat's instructions unless given others. */
  async function newChat(instructions = app.nextInstructions) {
    const params = { commandId: uuidv7() };
    if (instructions) params.config = { instructions };
    if (app.nextModel) {
      params.providerId = app.nextModel.providerId;
      params.modelId = app.nextModel.modelId;
    }
    if (app.nextApprovalMode) params.approvalMode = app.nextApprovalMode;
    // Not queued offline: the banner says so and nothing waits unseen.
    const res = await rpc.call('session/start', params);
    enter(res.session, res.viewCursor, instructions);
    // session/start takes no reasoning effort: the next chat's is set
    // before its first message.
    if (app.nextEffort) {
      await setEffort(res.session.sessionId, app.nextEffort);
      if (app.current === res.session.sessionId) showEffort(app.nextEffort);
    }
    loadModels().catch(() => {});
    closeDrawer();
    ui.input.focus();
    return res.session.sessionId;
  }

  let refreshTimer = null;

  function refreshSessionsSoon() {
    clearTimeout(refreshTimer);
    refreshTimer = setTimeout(() => refreshSessions().catch(() => {}), 250);
  }

  async function refreshSessions() {
    const res = await rpc.call('session/list', { limit: 50 });
    const keep = new Map();
    for (const s of res.sessions) keep.set(s.sessionId, s);
    // The list may lag a session just created here: keep that one.
    if (app.current && app.sessions.has(app.current) && !keep.has(app.current)) {
      keep.set(app.current, app.sessions.get(app.current));
    }
    app.sessions = keep;
    renderSessions();
  }

  /** upsertSession takes a Session object the server sent. */
  function upsertSession(s) {
    if (!s || !s.sessionId) return;
    app.sessions.set(s.sessionId, s);
    if (s.sessionId === app.current && s.approvalMode) showApprovalMode(s.approvalMode.mode);
    if (s.sessionId === app.current) showEffort(effortOf(s));
    renderSessions();
  }

  /** patchSession changes a few fields of a known session. */
  function patchSession(sessionId, fields) {
    const s = app.sessions.get(sessionId);
    if (!s) return;
    app.sessions.set(sessionId, { ...s, ...fields });
    renderSessions();
  }

  const titleOf = (s) => (s && (s.name || s.title || s.firstUserPrompt)) || 'New chat';

  /**
   * renderSessions draws the chat list, newest first, each fork under the
   * chat it branched from. An open rename or delete form holds it still.
   */
  function renderSessions() {
    ui.title.textContent = app.current ? titleOf(app.sessions.get(app.current)) : 'New chat';
    if (app.listHold) {
      app.listDirty = true;
      return;
    }
    app.listDirty = false;
    const children = new Map(); // parent sessionId ('' for roots) → Sessions
    for (const s of app.sessions.values()) {
      const from = s.forkedFrom && s.forkedFrom.sessionId;
      const parent = from && app.sessions.has(from) ? from : '';
      if (!children.has(parent)) children.set(parent, []);
      children.get(parent).push(s);
    }
    // A tree sorts by its newest member, so a busy fork lifts its origin.
    const newest = (s) => (children.get(s.sessionId) || [])
      .reduce((m, c) => (newest(c) > m ? newest(c) : m), s.updatedAt || '');
    const build = (parent) => (children.get(parent) || [])
      .map((s) => [newest(s), s])
      .sort((a, b) => b[0].localeCompare(a[0]))
      .map(([, s]) => {
        const li = sessionEntry(s);
        if (children.has(s.sessionId)) {
          const ul = el('ul');
          ul.setAttribute('aria-label', `Branches of ${titleOf(s)}`);
          ul.append(...build(s.sessionId));
          li.append(ul);
        }
        return li;
      });
    const focused = document.activeElement;
    const row = focused && focused.closest && focused.closest('#sessions [data-row]');
    const restore = row && [row.dataset.row, focused.dataset.role];
    ui.sessions.replaceChildren(...build(''));
    markCurrent();
    if (restore) {
      const again = ui.sessions.querySelector(`[data-row="${CSS.escape(restore[0])}"] [data-role="${restore[1]}"]`);
      if (again) again.focus();
    }
  }

  function sessionEntry(s) {
    const li = el('li');
    const row = el('div', 'session-row');
    row.dataset.row = s.sessionId;
    const open = el('button', 'session');
    open.type = 'button';
    open.dataset.sessionId = s.sessionId;
    open.dataset.role = 'open';
    const title = titleOf(s);
    open.append(el('span', 'session-title', title));
    const meta = el('span', 'session-meta', ago(s.updatedAt));
    if (s.forkedFrom) meta.prepend('branch · ');
    if (s.status === 'running') meta.prepend(el('span', 'dot', '● '));
    open.append(meta);
    open.title = title;
    open.addEventListener('click', () => {
      hideError();
      closeDrawer();
      openSession(s.sessionId).catch(showError);
    });
    const rename = button('row-action rename', '', `Rename “${title}”`);
    rename.dataset.role = 'rename';
    rename.addEventListener('click', () => startRename(row, s));
    const del = button('row-action delete', '', `Delete “${title}”`);
    del.dataset.role = 'delete';
    del.addEventListener('click', () => confirmDelete(row, s));
    row.append(open, rename, del);
    li.append(row);
    return li;
  }

  function markCurrent() {
    for (const row of ui.sessions.querySelectorAll('[data-row]')) {
      const current = row.dataset.row === app.current;
      row.toggleAttribute('data-current', current);
      const open = row.querySelector('button.session');
      if (current) open.setAttribute('aria-current', 'page');
      else open.removeAttribute('aria-current');
    }
  }

  /** holdRow swaps a list row's content for a form until done() is called. */
  function holdRow(row, form, focus) {
    const saved = [...row.childNodes];
    app.listHold = row;
    row.replaceChildren(form);
    focus.focus();
    return (refocus) => {
      app.listHold = null;
      row.replaceChildren(...saved);
      if (app.listDirty) renderSessions();
      if (refocus) {
        const target = ui.sessions.querySelector(`[data-row="${CSS.escape(row.dataset.row)}"] [data-role="${refocus}"]`);
        if (target) target.focus();
      }
    };
  }

  function startRename(row, s) {
    const form = el('form', 'row-form');
    const input = el('input');
    input.value = titleOf(s);
    input.maxLength = 200;
    input.setAttribute('aria-label', 'Chat name');
    const save = el('button', 'small primary', 'Save');
    save.type = 'submit';
    const cancel = button('small', 'Cancel');
    form.append(input, save, cancel);
    const done = holdRow(row, form, input);
    input.select();
    form.addEventListener('submit', catching(async (ev) => {
      ev.preventDefault();
      const name = input.value.trim();
      if (!name || name === titleOf(s)) return done('rename');
      save.disabled = true;
      try {
        const res = await command('session/rename', { commandId: uuidv7(), sessionId: s.sessionId, name });
        done('rename');
        patchSession(s.sessionId, { name: res.name || name });
      } catch (err) {
        save.disabled = false;
        throw err;
      }
    }));
    cancel.addEventListener('click', () => done('rename'));
    form.addEventListener('keydown', (ev) => {
      if (ev.key === 'Escape') {
        ev.preventDefault();
        done('rename');
      }
    });
  }

  function confirmDelete(row, s) {
    const form = el('form', 'row-form');
    form.append(el('p', null, `Delete “${titleOf(s)}”? This cannot be undone.`));
    const yes = el('button', 'small danger', 'Delete');
    yes.type = 'submit';
    const no = button('small', 'Cancel');
    form.append(yes, no);
    const done = holdRow(row, form, no);
    form.addEventListener('submit', catching(async (ev) => {
      ev.preventDefault();
      yes.disabled = true;
      no.disabled = true;
      yes.textContent = 'Deleting…';
      // session/deleteCompleted settles it (see deleteCompleted), even
      // before the admission's answer arrives.
      app.deleting.set(s.sessionId, done);
      try {
        await command('session/delete', { commandId: uuidv7(), sessionId: s.sessionId });
      } catch (err) {
        app.deleting.delete(s.sessionId);
        done('delete');
        throw err;
      }
    }));
    no.addEventListener('click', () => done('delete'));
    form.addEventListener('keydown', (ev) => {
      if (ev.key === 'Escape' && !yes.disabled) {
        ev.preventDefault();
        done('delete');
      }
    });
  }

  /** deleteCompleted ends a deletion: the chat goes, or says why not. */
  function deleteCompleted(p) {
    const done = app.deleting.get(p.sessionId);
    app.deleting.delete(p.sessionId);
    const title = titleOf(app.sessions.get(p.sessionId));
    const deleted = p.outcome === 'completed';
    if (deleted) app.sessions.delete(p.sessionId);
    if (done) done(deleted ? null : 'delete');
    if (deleted) {
      if (app.current === p.sessionId) leaveSession();
      renderSessions();
      if (done) {
        announce(`Deleted “${title}”.`);
        ui.newChat.focus();
      }
      return;
    }
    // Any outcome but completed (failed, or one this page does not know)
    // leaves the chat in place.
    showError(new RpcError(`deleting “${title}” failed${p.reason ? `: ${p.reason}` : ''}`, p.reason, 'session/delete'));
  }

  /** leaveSession shows no chat (the current one was deleted). */
  function leaveSession() {
    app.epoch++;
    app.buffer = null;
    app.current = null;
    app.instructions = '';
    syncInstructionsButton();
    resetTranscript();
    renderSessions();
    showApprovalMode(app.nextApprovalMode || 'promptUnmatched');
    showEffort(app.nextEffort);
    syncCompact();
    loadModels().catch(() => {});
  }

  // ------------------------------------------------------------ models

  /** sessionModel is the current chat's model id, if known. */
  function sessionModel() {
    const s = app.sessions.get(app.current);
    if (s && s.modelId) return s.modelId;
    const m = app.models.find((x) => x.isActive);
    return m ? m.modelId : null;
  }

  /**
   * refreshModels reads model/list again for the breakers' states: the
   * picker's labels change in place (an open or focused picker keeps its
   * choice); a list that changed is drawn afresh.
   */
  async function refreshModels() {
    const sessionId = app.current;
    const res = await rpc.call('model/list', sessionId ? { sessionId } : {});
    if (sessionId !== app.current) return;
    const same = res.models.length === app.models.length &&
      res.models.every((m, i) => m.providerId === app.models[i].providerId && m.modelId === app.models[i].modelId);
    if (!same) {
      await loadModels();
      return;
    }
    app.models = res.models;
    res.models.forEach((m, i) => {
      const o = ui.model.options[i];
      if (o && o.textContent !== modelOption(m)) o.textContent = modelOption(m);
    });
    syncAttach();
  }

  let modelsTimer = null;

  /** refreshModelsSoon refreshes the picker after a fallback or a skip (once for a burst). */
  function refreshModelsSoon() {
    clearTimeout(modelsTimer);
    modelsTimer = setTimeout(() => refreshModels().catch(() => {}), 300);
  }

  // While the page is visible the picker's breaker states are read every
  // 30 s (mspd's default breaker cool-down), and at once when it shows
  // again.
  const MODELS_EVERY = 30000;
  setInterval(() => {
    if (document.visibilityState === 'visible' && rpc.ready) refreshModels().catch(() => {});
  }, MODELS_EVERY);
  document.addEventListener('visibilitychange', () => {
    if (document.visibilityState === 'visible' && rpc.ready) refreshModels().catch(() => {});
  });

  /** loadModels fills the model picker from model/list. */
  async function loadModels() {
    const sessionId = app.current;
    const res = await rpc.call('model/list', sessionId ? { sessionId } : {});
    if (sessionId !== app.current) return;
    app.models = res.models;
    ui.model.replaceChildren(...res.models.map((m, i) => {
      const o = el('option', null, modelOption(m));
      o.value = String(i);
      return o;
    }));
    if (!res.models.length) ui.model.append(el('option', null, 'no models'));
    ui.model.disabled = !res.models.length;
    const pick = sessionId
      ? res.models.findIndex((m) => m.isActive)
      : res.models.findIndex((m) => (app.nextModel
        ? m.providerId === app.nextModel.providerId && m.modelId === app.nextModel.modelId
        : m.isDefault));
    ui.model.value = String(Math.max(0, pick));
    ui.model.dataset.value = ui.model.value;
    syncAttach();
    for (const tv of app.turns.values()) tv.renderModel();
  }

  /** selectModel shows a model as the session's (session/modelChanged). */
  function selectModel(providerId, modelId) {
    const i = app.models.findIndex((m) => m.modelId === modelId && (providerId == null || m.providerId === providerId));
    if (i >= 0) {
      ui.model.value = String(i);
      ui.model.dataset.value = ui.model.value;
    }
    syncAttach();
  }

  async function pickModel() {
    const m = app.models[Number(ui.model.value)];
    if (!m) return;
    syncAttach();
    if (!app.current) {
      app.nextModel = m;
      ui.model.dataset.value = ui.model.value;
      return;
    }
    const previous = ui.model.dataset.value;
    try {
      await command('session/setModel', {
        commandId: uuidv7(),
        sessionId: app.current,
        model: { modelId: m.modelId, providerId: m.providerId },
      });
      ui.model.dataset.value = ui.model.value;
      announce(`Model: ${m.displayLabel || m.modelId}.`);
    } catch (err) {
      ui.model.value = previous; // the session kept its model
      syncAttach();
      throw err;
    }
  }

  // ------------------------------------------------------------ sending

  /**
   * send sends a message: its text and images (read here, or parts of a
   * message sent again). Images read here show at once from their bytes.
   */
  async function send(text, images = [], parts = []) {
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
    const echo = new ItemView('userMessage');
    echo.gallery.setLocal(images.length ? images : parts.filter((p) => IMAGE_TYPES.includes(p.mediaType)).map((p) => ({
      mediaType: p.mediaType, width: p.width, height: p.height, url: `data:${p.mediaType};base64,${p.base64Data}`,
      byteLen: Math.floor((p.base64Data.length * 3) / 4),
    })));
    echo.setText(text);
    echo.render();
    const tv = new TurnView(commandId, false);
    app.turns.set(commandId, tv);
    app.lastTurn = tv;
    tv.setUser(echo);
    app.echoes.set(commandId, echo);
    ui.transcript.scrollTop = ui.transcript.scrollHeight;
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

  /** sendAgain sends a turn's message again: Regenerate, or Retry. */
  async function sendAgain(tv) {
    if (!tv.user || (!tv.user.source && tv.user.gallery.el.hidden)) return;
    hideError();
    await send(tv.user.source, [], await tv.user.gallery.parts());
  }

  /**
   * startEdit opens a user message for editing. Sending the edit forks
   * the session just before that turn (session/fork with cutPoint the
   * turn before it; upstream's cut is inclusive) and sends the edited
   * text in the fork, so the original chat stays as it was.
   */
  function startEdit(tv) {
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
      if (prev && prev.confirmed && ['completed', 'failed', 'cancelled'].includes(prev.terminal)) return prev;
    }
    return null;
  }

  async function stop() {
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

  // ------------------------------------------------------------ chrome

  function showError(err) {
    const kind = err && err.kind ? ` (${err.kind})` : '';
    ui.bannerText.textContent = `${(err && err.message) || String(err)}${kind}`;
    ui.banner.hidden = false;
  }

  function hideError() {
    ui.banner.hidden = true;
  }

  function announce(text) {
    ui.announcer.textContent = text;
  }

  function onState(state, detail) {
    ui.conn.dataset.state = state;
    if (state === 'online') ui.conn.textContent = 'online';
    else if (state === 'offline') ui.conn.textContent = `offline · retrying in ${Math.ceil(detail / 1000)}s`;
    else ui.conn.textContent = 'connecting…';
    ui.conn.title = state === 'online' && detail ? `${detail.name} ${detail.version}` : '';
  }

  /** catching runs an async action, showing its failure in the banner. */
  const catching = (fn) => (...args) => fn(...args).catch(showError);

  // Below 700 px the chat list is a drawer behind the menu button.
  const phone = window.matchMedia('(max-width: 700px)');

  function openDrawer() {
    ui.app.dataset.drawer = 'open';
    ui.menu.setAttribute('aria-expanded', 'true');
    ui.main.inert = phone.matches;
    const current = ui.sessions.querySelector('[aria-current="page"]');
    (current || ui.newChat).focus();
  }

  function closeDrawer(refocus = false) {
    if (ui.app.dataset.drawer !== 'open') return;
    ui.app.dataset.drawer = 'closed';
    ui.menu.setAttribute('aria-expanded', 'false');
    ui.main.inert = false;
    if (refocus) ui.menu.focus();
  }

  phone.addEventListener('change', () => closeDrawer());
  ui.menu.addEventListener('click', openDrawer);
  ui.drawerClose.addEventListener('click', () => closeDrawer(true));
  ui.scrim.addEventListener('click', () => closeDrawer(true));

  ui.newChat.addEventListener('click', catching(async () => {
    hideError();
    await newChat();
  }));
  ui.stop.addEventListener('click', catching(stop));
  ui.bannerClose.addEventListener('click', hideError);
  ui.model.addEventListener('change', catching(pickModel));
  ui.approvalMode.addEventListener('change', catching(pickApprovalMode));
  ui.effort.addEventListener('change', catching(pickEffort));
  ui.compact.addEventListener('click', catching(compactChat));

  // Copy buttons of code blocks, which re-rendering replaces while an
  // answer streams: one listener for them all.
  ui.transcript.addEventListener('click', catching(async (ev) => {
    const copy = ev.target.closest('button.copy');
    if (!copy) return;
    const code = copy.closest('.code-block').querySelector('pre');
    const ok = await copyText(code.textContent);
    copy.textContent = ok ? 'Copied' : 'Copy failed';
    announce(ok ? 'Code copied.' : 'The browser did not allow copying.');
  }));

  document.addEventListener('keydown', (ev) => {
    if (ev.key !== 'Escape' || ev.defaultPrevented) return;
    // A dialog's Esc closes the dialog, and stops nothing.
    if (document.querySelector('dialog[open]')) return;
    if (ui.app.dataset.drawer === 'open') {
      closeDrawer(true);
    } else if (app.running) {
      ev.preventDefault();
      stop().catch(showError);
    }
  });

  /** syncComposer sizes the message box and enables Send for some text or an image. */
  function syncComposer() {
    ui.send.disabled = !ui.input.value.trim() && !draft.images.length;
    ui.input.style.height = 'auto';
    ui.input.style.height = `${Math.min(ui.input.scrollHeight + 2, 240)}px`;
  }

  ui.composer.addEventListener('submit', catching(async (ev) => {
    ev.preventDefault();
    const text = ui.input.value.trim();
    if (!text && !draft.images.length) return;
    hideError();
    ui.input.value = '';
    const images = takeDraft();
    syncComposer();
    await send(text, images);
  }));

  ui.input.addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      if (ui.input.value.trim() || draft.images.length) ui.composer.requestSubmit();
    }
  });
  ui.input.addEventListener('input', syncComposer);

  // Images: the attach button opens the file (on a phone, photo) picker;
  // an image pasted into the message box or dropped on the chat joins the
  // message too.
  ui.attach.addEventListener('click', () => ui.file.click());
  ui.file.addEventListener('change', catching(async () => {
    const files = [...ui.file.files];
    ui.file.value = '';
    await addImages(files);
  }));
  ui.input.addEventListener('paste', (ev) => {
    const data = ev.clipboardData;
    if (!data) return;
    const files = [...data.items].filter((it) => it.kind === 'file' && it.type.startsWith('image/')).map((it) => it.getAsFile());
    if (!files.length) return;
    // An image copied from a page comes with its markup, but no text to paste.
    if (!data.types.includes('text/plain')) ev.preventDefault();
    addImages(files).catch(showError);
  });
  const dragsFiles = (ev) => ev.dataTransfer && [...ev.dataTransfer.types].includes('Files');
  ui.main.addEventListener('dragover', (ev) => {
    if (!dragsFiles(ev)) return;
    ev.preventDefault();
    ev.dataTransfer.dropEffect = 'copy';
    ui.composer.dataset.drop = 'on';
  });
  ui.main.addEventListener('dragleave', (ev) => {
    if (!ui.main.contains(ev.relatedTarget)) delete ui.composer.dataset.drop;
  });
  ui.main.addEventListener('drop', (ev) => {
    delete ui.composer.dataset.drop;
    if (!dragsFiles(ev)) return;
    ev.preventDefault();
    addImages(ev.dataTransfer.files).catch(showError);
  });
  // A file dropped anywhere else must not replace the page.
  for (const type of ['dragover', 'drop']) {
    window.addEventListener(type, (ev) => {
      if (dragsFiles(ev) && !ev.defaultPrevented) ev.preventDefault();
    });
  }

  // The image viewer: Esc, Close or a click beside the image closes it,
  // and focus goes back to the thumbnail.
  ui.viewerClose.addEventListener('click', () => ui.viewer.close());
  ui.viewer.addEventListener('click', (ev) => {
    if (ev.target === ui.viewer) ui.viewer.close();
  });
  ui.viewer.addEventListener('close', () => {
    ui.viewerImg.removeAttribute('src');
    const back = ui.viewer.returnFocus;
    ui.viewer.returnFocus = null;
    if (back && back.isConnected) back.focus();
  });

  // The instructions dialog.
  ui.instructionsOpen.addEventListener('click', openInstructions);
  ui.instructions.addEventListener('input', countInstructions);
  ui.instructionsEdit.addEventListener('click', () => {
    showInstructions('new');
    ui.instructions.focus();
  });
  ui.instructionsCancel.addEventListener('click', closeInstructions);
  ui.instructionsSave.addEventListener('click', catching(saveInstructions));
  ui.instructionsDialog.addEventListener('close', () => {
    ui.instructionsOpen.setAttribute('aria-expanded', 'false');
    if (!ui.main.contains(document.activeElement) || document.activeElement === document.body) ui.instructionsOpen.focus();
  });

  /** hint puts the keys in the placeholder where there is room for them. */
  function hint() {
    ui.input.placeholder = phone.matches ? 'Message…' : 'Message…  (Enter sends, Shift+Enter breaks the line, Esc stops)';
  }
  phone.addEventListener('change', hint);
  hint();

  // ------------------------------------------------------------ start

  function socketURL() {
    const url = new URL('msp', window.location.href);
    url.protocol = window.location.protocol === 'https:' ? 'wss:' : 'ws:';
    url.search = '';
    url.hash = '';
    const token = new URLSearchParams(window.location.search).get('token');
    if (token) url.searchParams.set('access_token', token);
    return url.href;
  }

  const rpc = new Rpc(socketURL(), {
    onNotification,
    onRequest,
    onState,
    onReady: async (result) => {
      app.listStream = (result.grantedCapabilities || []).includes('sessionListStream');
      refreshSessions().catch(showError);
      loadModels().catch(() => {});
      if (app.current) {
        await openSession(app.current, app.stale ? undefined : app.cursors.get(app.current)).catch(showError);
      }
      flushOutbox();
    },
  });
  syncComposer();
  syncInstructionsButton();
  rpc.connect();
})();
