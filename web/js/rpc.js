// The connection: the WebSocket, the MSP handshake, JSON-RPC requests
// matched to responses, reconnecting with backoff, and commands queued
// while offline.

/** RpcError is a JSON-RPC error response (or a lost connection). */
export class RpcError extends Error {
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
    this.retry = null; // the timer of the next reconnect, while offline
  }

  /** retryNow reconnects at once instead of waiting out the backoff. */
  retryNow() {
    if (!this.retry) return;
    clearTimeout(this.retry);
    this.retry = null;
    this.connect();
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
    this.retry = setTimeout(() => {
      this.retry = null;
      this.connect();
    }, delay);
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
export function command(method, params, onQueued) {
  return rpc.call(method, params).catch((err) => {
    if (err.kind !== 'disconnected') throw err;
    if (onQueued) onQueued();
    return new Promise((resolve, reject) => outbox.push({ method, params, resolve, reject }));
  });
}

export function flushOutbox() {
  for (const c of outbox.splice(0)) command(c.method, c.params).then(c.resolve, c.reject);
}

function socketURL() {
  const url = new URL('msp', window.location.href);
  url.protocol = window.location.protocol === 'https:' ? 'wss:' : 'ws:';
  url.search = '';
  url.hash = '';
  const token = new URLSearchParams(window.location.search).get('token');
  if (token) url.searchParams.set('access_token', token);
  return url.href;
}

/** rpc is the page's one connection to mspd, once openConnection made it. */
export let rpc = null;

/**
 * openConnection makes the page's connection to /msp with the handlers of
 * what the server sends (main.js does, once); rpc.connect() opens it.
 */
export function openConnection(handlers) {
  rpc = new Rpc(socketURL(), handlers);
  return rpc;
}
