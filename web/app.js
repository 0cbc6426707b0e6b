// mspd web chat: a small Muse Session Protocol client (JSON-RPC 2.0 over a
// WebSocket at /msp on the page's own host). No framework, no build step.
//
// Model output is untrusted: it only ever reaches the page as textContent.
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

  // Words for an errorKind, as mspd's own renderers use them.
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

  /** ago words a past RFC 3339 time for the sidebar. */
  function ago(iso) {
    const t = Date.parse(iso);
    if (Number.isNaN(t)) return '';
    const s = (Date.now() - t) / 1000;
    if (s < 60) return 'just now';
    if (s < 3600) return `${Math.floor(s / 60)} min ago`;
    if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
    return new Date(t).toLocaleDateString();
  }

  /** plural: plural(2, 'attempt') → "2 attempts". */
  const plural = (n, word) => `${n} ${word}${n === 1 ? '' : 's'}`;

  // ------------------------------------------------------------ connection

  /** RpcError is a JSON-RPC error response (or a lost connection). */
  class RpcError extends Error {
    constructor(message, kind, method) {
      super(message);
      this.kind = kind;
      this.method = method;
    }
  }

  /**
   * Rpc owns the WebSocket: it performs the MSP handshake on every
   * (re)connect, matches responses to requests by id, hands notifications
   * on, and reconnects with capped, jittered exponential backoff.
   */
  class Rpc {
    constructor(url, { onReady, onNotification, onState }) {
      this.url = url;
      this.onReady = onReady;
      this.onNotification = onNotification;
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
          clientInfo: { name: 'mspd_web', title: 'mspd web chat', version: '1.0' },
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
        // A server request (approvals, user input): this page grants none.
        this.send({
          jsonrpc: '2.0', id: msg.id,
          error: { code: -32601, message: `${msg.method} is not supported by this client`, data: { kind: 'methodNotFound' } },
        });
      } else if (msg.method) {
        this.onNotification(msg.method, msg.params || {});
      } else if (this.pending.has(msg.id)) {
        const p = this.pending.get(msg.id);
        this.pending.delete(msg.id);
        if (msg.error) {
          p.reject(new RpcError(msg.error.message, msg.error.data && msg.error.data.kind, p.method));
        } else {
          p.resolve(msg.result);
        }
      }
    }
  }

  // ------------------------------------------------------------ page state

  const ui = {
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
    stop: $('stop'),
    announcer: $('announcer'),
  };

  const app = {
    current: null, // the session on screen
    cursors: new Map(), // sessionId → last viewCursor received live
    stale: false, // the view missed events it could not fill: resume afresh
    epoch: 0, // bumped whenever the view is rebuilt; late async work checks it
    buffer: null, // live events held while history loads or a gap fills
    running: null, // the running turn of the current session
    turns: new Map(), // turnId (or a sent commandId) → TurnView
    lastTurn: null, // the TurnView items without a turnId join
    items: new Map(), // itemId → ItemView
    echoes: new Map(), // commandId → ItemView of a sent message not yet confirmed
    unsent: [], // turn/start params a lost connection left unanswered
    retries: new Map(), // viewCursor → RetryRow
  };

  // ------------------------------------------------------------ transcript

  /** TurnView is one turn: its messages, retry rows and footer. */
  class TurnView {
    constructor(turnId) {
      this.el = el('article', 'turn');
      this.el.dataset.turnId = turnId;
      this.footer = null;
      this.rows = []; // RetryRows, oldest first
      ui.empty.hidden = true;
      ui.transcript.append(this.el);
    }

    /** add appends a node, keeping the footer last. */
    add(node) {
      this.el.insertBefore(node, this.footer);
    }

    setFooter(text, terminal) {
      if (!this.footer) {
        this.footer = el('footer', 'turn-footer');
        this.el.append(this.footer);
      }
      this.footer.dataset.terminal = terminal;
      this.footer.textContent = text;
    }
  }

  function turnView(turnId) {
    if (!turnId) return app.lastTurn || turnView(uuidv7());
    let tv = app.turns.get(turnId);
    if (!tv) {
      tv = new TurnView(turnId);
      app.turns.set(turnId, tv);
    }
    app.lastTurn = tv;
    return tv;
  }

  /** rekey files a turn shown under its commandId under its real turnId. */
  function rekey(commandId, turnId) {
    const tv = app.turns.get(commandId);
    if (!commandId || !turnId || commandId === turnId || !tv || app.turns.has(turnId)) return;
    app.turns.delete(commandId);
    app.turns.set(turnId, tv);
    tv.el.dataset.turnId = turnId;
  }

  /** ItemView is one message bubble. */
  class ItemView {
    constructor(kind) {
      this.item = { revision: 0, status: 'inProgress' };
      this.note = ''; // about a message of ours: "not sent", …
      this.el = el('div', `msg ${kind === 'userMessage' ? 'user' : 'agent'}`);
      this.el.append(el('span', 'visually-hidden', kind === 'userMessage' ? 'You: ' : 'Assistant: '));
      this.textEl = el('div', 'text');
      this.tag = el('span', 'tag');
      this.tag.hidden = true;
      this.el.append(this.textEl, this.tag);
    }

    setText(text) {
      this.textEl.textContent = text;
    }

    append(delta) {
      this.textEl.append(delta); // a string appends as a text node
    }

    setTag(text) {
      this.tag.hidden = !text;
      this.tag.textContent = text || '';
    }

    render() {
      const { status } = this.item;
      this.el.dataset.status = status;
      this.el.classList.toggle('streaming', status === 'inProgress' && this.el.classList.contains('agent'));
      const tags = { failed: 'discarded attempt', cancelled: 'stopped', rejected: 'rejected', timedOut: 'timed out' };
      if (status === 'inProgress' || status === 'completed') this.setTag(this.note);
      else if (status === 'failed' && this.textEl.textContent === '') this.setTag('discarded attempt · cut off before any text was saved');
      else this.setTag(tags[status] || status);
    }
  }

  /** upsertItem shows an item, replacing an older revision of it. */
  function upsertItem(item) {
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
      tv.add(view.el);
      // A new answer attempt begins: the retry before it is underway.
      if (item.kind === 'agentMessage') tv.rows.forEach((r) => r.setState('underway'));
    }
    view.el.dataset.itemId = item.itemId;
    app.items.set(item.itemId, view);
    const previous = view.item;
    view.item = item;
    const shown = view.textEl.textContent;
    if (typeof item.text === 'string') {
      // An attempt cut by a crash may hold less than was streamed here
      // (deltas are not durable): keep what the reader already saw.
      const cut = item.truncated && shown.length > item.text.length && shown.startsWith(item.text);
      if (!cut) view.setText(item.text);
    } else if (previous.text == null) view.setText('');
    view.render();
  }

  function appendDelta(p) {
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

  /** RetryRow is the inline status of one scheduled retry, counting down. */
  class RetryRow {
    constructor(label, p) {
      this.label = label;
      this.attempt = `attempt ${p.nextAttempt}/${p.maxAttempts}`;
      this.deadline = Date.now() + p.retryDelayMs;
      this.state = 'waiting'; // → underway → done
      const icon = el('span', 'retry-icon', '⟳');
      icon.setAttribute('aria-hidden', 'true');
      this.textEl = el('span', 'retry-text');
      this.el = el('div', 'retry');
      this.el.append(icon, this.textEl);
      this.render();
    }

    setState(state) {
      if (this.state === 'done' || this.state === state) return;
      this.state = state;
      this.render();
    }

    render() {
      let when = 'retrying…';
      const left = this.deadline - Date.now();
      if (this.state === 'waiting' && left > 0) when = `retrying in ${Math.ceil(left / 1000)}s`;
      if (this.state === 'done') when = 'retried';
      this.el.dataset.state = this.state;
      this.textEl.textContent = [this.label, when, this.attempt].join(' · ');
    }
  }

  let ticker = null;

  /** tick refreshes every counting-down row once in a while. */
  function tick() {
    let waiting = 0;
    for (const row of app.retries.values()) {
      if (row.state !== 'waiting') continue;
      row.render();
      if (row.deadline > Date.now()) waiting++;
    }
    if (!waiting) {
      clearInterval(ticker);
      ticker = null;
    }
  }

  function addRetry(p, label) {
    if (app.retries.has(p.viewCursor)) return; // seen already (replay)
    const tv = turnView(p.turnId);
    tv.rows.forEach((r) => r.setState('done')); // that retry ran, and failed
    const row = new RetryRow(label, p);
    tv.rows.push(row);
    app.retries.set(p.viewCursor || uuidv7(), row);
    tv.add(row.el);
    if (!ticker) ticker = setInterval(tick, 200);
    announce(`${label}. Retrying in ${Math.ceil(p.retryDelayMs / 1000)} seconds, attempt ${p.nextAttempt} of ${p.maxAttempts}.`);
  }

  function modelRetryLabel(p) {
    let words = kindWords(p.errorKind);
    if (p.httpStatus) words += ` (${p.httpStatus})`;
    return p.system ? `${p.system} · ${words}` : words;
  }

  /** footerText words a turn's end: "✓ 1.9s · 2 attempts · 58 tokens". */
  function footerText(p) {
    const a = p.attempts;
    if (p.terminal === 'cancelled') return '■ stopped';
    if (p.terminal === 'failed') {
      const message = (p.error && p.error.message) || p.reason || 'failed';
      return a ? `✗ ${message} · ${plural(a.count, 'attempt')}` : `✗ ${message}`;
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
    return parts.length ? `${mark} ${parts.join(' · ')}` : mark;
  }

  function completeTurn(p) {
    const tv = turnView(p.turnId);
    tv.rows.forEach((r) => r.setState('done'));
    tv.setFooter(footerText(p), p.terminal);
    if (app.running === p.turnId) setRunning(null);
    announce(p.terminal === 'completed' ? 'Answer complete.' : footerText(p));
    refreshSessionsSoon();
  }

  function setRunning(turnId) {
    app.running = turnId || null;
    ui.stop.hidden = !app.running;
    ui.stop.disabled = false;
    ui.transcript.setAttribute('aria-busy', app.running ? 'true' : 'false');
  }

  /** resetTranscript empties the view for a (re)loaded session. */
  function resetTranscript() {
    ui.transcript.replaceChildren(ui.empty);
    ui.empty.hidden = false;
    app.turns.clear();
    app.items.clear();
    app.echoes.clear();
    app.retries.clear();
    app.lastTurn = null;
    setRunning(null);
  }

  // View notifications of the current session, by method. Each is
  // idempotent (items replace by revision, retry rows are keyed by cursor,
  // footers are set), so a replayed event does no harm.
  const handlers = {
    'turn/started': (p) => {
      rekey(p.commandId, p.turnId);
      turnView(p.turnId);
      setRunning(p.turnId);
    },
    'item/started': (p) => upsertItem(p.item),
    'item/updated': (p) => upsertItem(p.item),
    'item/completed': (p) => upsertItem(p.item),
    'item/delta': appendDelta,
    'turn/modelRetryScheduled': (p) => addRetry(p, modelRetryLabel(p)),
    'turn/retryScheduled': (p) => addRetry(p, p.reason),
    'turn/completed': completeTurn,
    'turn/unqueued': (p) => turnView(p.turnId).setFooter('↶ withdrawn before it ran', 'unqueued'),
  };

  /** apply renders one view event; live ones advance the session's cursor. */
  function apply(method, params, live = true) {
    if (live && params.viewCursor) app.cursors.set(params.sessionId, params.viewCursor);
    const handler = handlers[method];
    if (!handler) return;
    const t = ui.transcript;
    const atBottom = t.scrollHeight - t.scrollTop - t.clientHeight < 48;
    handler(params);
    if (atBottom) t.scrollTop = t.scrollHeight;
  }

  function onNotification(method, params) {
    if (method === 'session/started' || method === 'session/statusChanged' || method === 'session/closed') {
      refreshSessionsSoon();
      return;
    }
    if (params.sessionId !== app.current) return;
    if (app.buffer) {
      app.buffer.push([method, params]);
    } else if (method === 'view/gap') {
      app.buffer = [[method, params]];
      drain(app.epoch).catch(showError);
    } else {
      apply(method, params);
    }
  }

  /** drain applies held events in order, filling any gap among them. */
  async function drain(epoch) {
    while (epoch === app.epoch && app.buffer && app.buffer.length) {
      const [method, params] = app.buffer.shift();
      if (method !== 'view/gap') {
        apply(method, params);
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
   * messages, retry rows and turn footers.
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
      // turns keep their retry rows and footers: no inline items needed.
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
    try {
      if (!cursor) {
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

  async function newChat() {
    const res = await rpc.call('session/start', { commandId: uuidv7() });
    const sessionId = res.session.sessionId;
    const previous = app.current;
    if (previous) rpc.call('view/unsubscribe', { sessionId: previous }).catch(() => {});
    app.epoch++;
    app.buffer = null;
    app.current = sessionId;
    app.cursors.set(sessionId, res.viewCursor);
    app.stale = false;
    resetTranscript();
    markCurrent();
    await refreshSessions();
    ui.input.focus();
    return sessionId;
  }

  let refreshTimer = null;

  function refreshSessionsSoon() {
    clearTimeout(refreshTimer);
    refreshTimer = setTimeout(() => refreshSessions().catch(() => {}), 250);
  }

  async function refreshSessions() {
    const res = await rpc.call('session/list', { limit: 50 });
    const sessions = [...res.sessions].sort((a, b) => (b.updatedAt || '').localeCompare(a.updatedAt || ''));
    ui.sessions.replaceChildren(...sessions.map(sessionEntry));
    markCurrent();
  }

  function sessionEntry(s) {
    const li = el('li');
    const button = el('button', 'session');
    button.type = 'button';
    button.dataset.sessionId = s.sessionId;
    const title = s.title || s.name || s.firstUserPrompt || 'New chat';
    button.append(el('span', 'session-title', title));
    const meta = el('span', 'session-meta', ago(s.updatedAt));
    if (s.status === 'running') meta.prepend(el('span', 'dot', '● '));
    button.append(meta);
    button.title = title;
    button.addEventListener('click', () => {
      hideError();
      openSession(s.sessionId).catch(showError);
    });
    li.append(button);
    return li;
  }

  function markCurrent() {
    for (const b of ui.sessions.querySelectorAll('button.session')) {
      if (b.dataset.sessionId === app.current) b.setAttribute('aria-current', 'page');
      else b.removeAttribute('aria-current');
    }
  }

  // ------------------------------------------------------------ sending

  async function send(text) {
    let sessionId = app.current;
    if (!sessionId) {
      try {
        sessionId = await newChat();
      } catch (err) {
        // Nothing was sent: give the text back to its author.
        ui.input.value = text;
        growInput();
        throw err;
      }
    }
    const commandId = uuidv7();
    const echo = new ItemView('userMessage');
    echo.setText(text);
    echo.render();
    turnView(commandId).add(echo.el);
    app.echoes.set(commandId, echo);
    ui.transcript.scrollTop = ui.transcript.scrollHeight;
    await startTurn({ commandId, sessionId, input: [{ type: 'text', text }] }, echo);
  }

  /**
   * startTurn sends turn/start. When the connection drops first, the same
   * command goes again once reconnected: the commandId makes it take
   * effect once, whether or not the first one arrived.
   */
  async function startTurn(params, echo) {
    const note = (text) => {
      echo.note = app.echoes.get(params.commandId) === echo ? text : '';
      echo.render();
    };
    try {
      const ack = await rpc.call('turn/start', params);
      rekey(params.commandId, ack.turnId);
      note('');
    } catch (err) {
      if (err.kind === 'disconnected') {
        app.unsent.push([params, echo]);
        note('sending when reconnected…');
        return;
      }
      note('not sent');
      throw err;
    }
  }

  async function stop() {
    ui.stop.disabled = true;
    try {
      // Name the turn on screen, so that a queued successor that started
      // meanwhile is not the one stopped.
      const params = { commandId: uuidv7(), sessionId: app.current };
      if (app.running) params.turnId = app.running;
      await rpc.call('turn/interrupt', params);
    } catch (err) {
      ui.stop.disabled = false;
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

  ui.newChat.addEventListener('click', catching(async () => {
    hideError();
    await newChat();
  }));
  ui.stop.addEventListener('click', catching(stop));
  ui.bannerClose.addEventListener('click', hideError);

  ui.composer.addEventListener('submit', catching(async (ev) => {
    ev.preventDefault();
    const text = ui.input.value.trim();
    if (!text) return;
    hideError();
    ui.input.value = '';
    growInput();
    await send(text);
  }));

  ui.input.addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      ui.composer.requestSubmit();
    }
  });

  function growInput() {
    ui.input.style.height = 'auto';
    ui.input.style.height = `${Math.min(ui.input.scrollHeight, 240)}px`;
  }
  ui.input.addEventListener('input', growInput);

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
    onState,
    onReady: async () => {
      refreshSessions().catch(showError);
      if (app.current) {
        await openSession(app.current, app.stale ? undefined : app.cursors.get(app.current)).catch(showError);
      }
      for (const [params, echo] of app.unsent.splice(0)) startTurn(params, echo).catch(showError);
    },
  });
  rpc.connect();
})();
