// How the page words things: error kinds, durations, sizes, token counts,
// model names and fallbacks, as mspd's own renderers say them. Pure
// functions of their arguments.

// Words for an errorKind, as mspd's own renderers use them
// (msp.ErrorKindWords): the server's failure messages begin with them.
export const KIND_WORDS = {
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
export function kindWords(kind) {
  if (!kind) return 'error';
  if (Object.hasOwn(KIND_WORDS, kind)) return KIND_WORDS[kind];
  // Unknown kinds are spelt out: "upstreamHTTPError" → "upstream http error".
  return kind
    .replace(/([a-z0-9])([A-Z])/g, '$1 $2')
    .replace(/([A-Z])([A-Z][a-z])/g, '$1 $2')
    .toLowerCase();
}

/** duration words a span: "850ms", "1.9s", "12s", "2m 5s". */
export function duration(ms) {
  if (ms < 1000) return `${Math.round(ms)}ms`;
  if (ms < 10000) return `${(ms / 1000).toFixed(1)}s`;
  const s = Math.round(ms / 1000);
  return s < 60 ? `${s}s` : `${Math.floor(s / 60)}m ${s % 60}s`;
}

/** ago words a past RFC 3339 time for the chat list. */
export function ago(iso) {
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return '';
  const s = (Date.now() - t) / 1000;
  if (s < 60) return 'just now';
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return new Date(t).toLocaleDateString();
}

/** size words a byte count: "812 B", "4.2 KB", "195 KB", "1.3 MB". */
export function size(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  const kb = bytes / 1024;
  if (kb < 10) return `${kb.toFixed(1)} KB`;
  if (kb < 1024) return `${Math.round(kb)} KB`;
  return `${(kb / 1024).toFixed(1)} MB`;
}

/** plural: plural(2, 'attempt') → "2 attempts". */
export const plural = (n, word) => `${n.toLocaleString('en')} ${word}${n === 1 ? '' : 's'}`;

/** sentence capitalizes the first letter. */
export const sentence = (s) => s.charAt(0).toUpperCase() + s.slice(1);

/** callTime words a tool call's duration: "12 ms", "1.4 s", "2 min 5 s". */
export function callTime(ms) {
  if (ms < 1000) return `${Math.max(0, Math.round(ms))} ms`;
  if (ms < 10000) return `${(ms / 1000).toFixed(1)} s`;
  const s = Math.round(ms / 1000);
  return s < 60 ? `${s} s` : `${Math.floor(s / 60)} min ${s % 60} s`;
}

/**
 * tokenWords words a token count as mspd does (turn.tokenWords): "850",
 * "2.1k", "130k", and "1.2M" from a million.
 */
export function tokenWords(n) {
  n = Math.max(0, Math.round(Number(n) || 0));
  if (n < 1000) return String(n);
  if (n < 10000) return `${(n / 1000).toFixed(1)}k`;
  if (n < 1000000) return `${Math.round(n / 1000)}k`;
  return `${(n / 1000000).toFixed(1)}M`;
}

/** thoughtTime words how long a model reasoned: "less than a second", "4 s", "2 min 5 s". */
export function thoughtTime(ms) {
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
export function prettyJSON(text) {
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

/**
 * shortModel is a model id as people read it: without a gateway's
 * vendor prefix or a dated snapshot's suffix —
 * "anthropic/claude-sonnet-4-5-20250929" → "claude-sonnet-4-5".
 */
export function shortModel(id) {
  if (!id) return '';
  let s = String(id);
  s = s.slice(s.lastIndexOf('/') + 1) || s;
  if (s.indexOf('@') > 0) s = s.slice(0, s.indexOf('@'));
  const dated = /-((?:19|20)\d\d)-?(0[1-9]|1[0-2])-?(0[1-9]|[12]\d|3[01])$/.exec(s);
  if (dated && dated.index > 0 && (dated[0].length === 9 || dated[0].length === 11)) s = s.slice(0, dated.index);
  return s;
}

/** sameModel tells whether a model that answered is the one asked (a provider may name a dated snapshot of it). */
export function sameModel(answered, asked) {
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
export const breakerWords = (state) => ({ open: 'circuit open', halfOpen: 'circuit half-open' }[state] || `circuit ${kindWords(state || 'open')}`);

/** answering names who answers next: the model's short name, else its provider. */
const answering = (p) => `answering with ${shortModel(p.nextModelId) || p.nextProviderId || 'the next provider'}`;

/** fallbackWords: "openai is rate limited · answering with claude-sonnet-4-5". */
export function fallbackWords(p) {
  let left = `${p.system || 'the provider'} ${LEFT_WORDS[p.errorKind] || `failed (${kindWords(p.errorKind)})`}`;
  if (p.fallbackReason === 'circuitOpen') left += ' (circuit open)';
  return `${left} · ${answering(p)}`;
}

/** skippedWords: "openai is down (circuit open) · answering with claude-sonnet-4-5". */
export const skippedWords = (p) => `${p.system || p.providerId} is down (${breakerWords(p.breaker)}) · ${answering(p)}`;

/**
 * modelOption words a model/list row for the picker, by the name given
 * (its label when none is): "gpt-4o-mini — down".
 */
export function modelOption(m, name = m.displayLabel || m.modelId) {
  if (m.breakerState === 'open') return `${name} — down`;
  if (m.breakerState === 'halfOpen') return `${name} — recovering`;
  return name;
}
