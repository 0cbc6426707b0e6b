// Outcomes: a turn's terminal in words — the status line, what a failure
// means and what to do, the technical detail behind a click.

import { el } from './dom.js';
import { duration, KIND_WORDS, plural, sentence } from './words.js';

/** techDetails builds a closed disclosure of label/value pairs. */
export function techDetails(summary, rows) {
  const d = el('details', 'tech');
  const dl = el('dl');
  for (const [k, v] of Object.entries(rows)) {
    if (v == null || v === '') continue;
    dl.append(el('dt', null, k), el('dd', null, String(v)));
  }
  d.append(el('summary', null, summary), dl);
  return d;
}

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
export function outcome(p, tv) {
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
      'Output tokens': a && outputTokens(a),
      Duration: p.durationMs != null ? duration(p.durationMs) : null,
      'Turn id': p.turnId,
    };
    return { text: `✗ ${plainFailure(p, f)}`, details, again: 'Retry' };
  }
  const parts = [];
  if (p.durationMs != null) parts.push(duration(p.durationMs));
  if (a) {
    parts.push(plural(a.count, 'attempt'));
    parts.push(plural(a.outputTokens, 'token'));
  } else if (p.usage) {
    parts.push(plural(p.usage.outputTokens, 'token'));
  }
  const mark = p.terminal === 'completed' ? '✓' : p.terminal;
  // Reasoning tokens are part of the output tokens: the detail says how many.
  const u = p.usage;
  let details = u && u.reasoningTokens > 0 ? {
    'Reasoning tokens': u.reasoningTokens.toLocaleString('en'),
    'Output tokens': `${u.outputTokens.toLocaleString('en')} (reasoning included)`,
    'Input tokens': u.inputTokens != null ? u.inputTokens.toLocaleString('en') : null,
  } : null;
  // A count that may be low is said in the details, in words, not as a
  // "≥" on the status line.
  if (a && !a.usageComplete) details = { ...details, 'Output tokens': outputTokens(a) };
  return { text: parts.length ? `${mark} ${parts.join(' · ')}` : mark, details, again: 'Regenerate' };
}

/**
 * outputTokens words attempts' output tokens for the details: a count
 * with a request whose usage the provider never reported (an attempt cut
 * off, a stream that ended without usage) is a lower bound, and says so.
 */
function outputTokens(a) {
  const n = a.outputTokens.toLocaleString('en');
  if (a.usageComplete) return n;
  return `at least ${n}: the provider did not report the usage of every request (an attempt was cut off), so some tokens went uncounted`;
}
