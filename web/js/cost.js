// Tokens and cost: a turn's, summed over its session/tokenUsage events, on
// a line of its footer ("1.2k → 340 tokens · $0.0051"), and the chat's,
// the latest event's cumulative.cost, under the message box ("$0.045 this
// chat"). Costs are the server's estimates from the prices its operator
// configured (docs/providers.md#prices): with none, the server sends no
// cost and the page shows no line and no $ anywhere. Everything here is
// folded from the log's events, so a reload shows the same.

import { el } from './dom.js';
import { ui } from './state.js';
import { tokenWords } from './words.js';

/**
 * countUsage adds one session/tokenUsage to its turn's sums, then shows
 * them and the chat's total. An event seen before (by its cursor) counts
 * once.
 */
export function countUsage(tv, p) {
  const u = tv.usage || (tv.usage = { prompt: 0, output: 0, usd: 0, priced: 0, unpriced: 0, chatPriced: false, seen: new Set() });
  if (p.viewCursor) {
    if (u.seen.has(p.viewCursor)) return;
    u.seen.add(p.viewCursor);
  }
  u.prompt += p.promptTokens || 0;
  u.output += (p.usage && p.usage.outputTokens) || 0;
  if (typeof p.costUsd === 'number') {
    u.usd += p.costUsd;
    u.priced++;
  } else {
    u.unpriced++;
  }
  const cost = (p.cumulative && p.cumulative.cost) || null;
  if (cost) u.chatPriced = true;
  showUsage(tv);
  showChatCost(cost);
}

/**
 * usageWords words a turn's sums, or '' when nothing of the chat was
 * priced by the turn's end: then the page says nothing of tokens or cost.
 */
function usageWords(u) {
  if (!u || (u.priced === 0 && !u.chatPriced)) return '';
  let cost = 'not priced';
  if (u.priced) cost = u.unpriced ? `${costWords(u.usd)} (partial)` : costWords(u.usd);
  return `${tokenWords(u.prompt)} → ${tokenWords(u.output)} tokens · ${cost}`;
}

/**
 * showUsage puts a turn's tokens and cost on a line of its footer, under
 * the status; TurnView.end calls it again for the footer it builds.
 */
export function showUsage(tv) {
  if (!tv.footer) return;
  const text = usageWords(tv.usage);
  let line = tv.footer.querySelector('.turn-usage');
  if (!line) {
    if (!text) return;
    line = el('p', 'turn-usage');
    line.title = 'Prompt → output tokens of this answer, and its cost estimated from the server\'s prices';
    const status = tv.footer.querySelector('.turn-status');
    if (status) status.after(line);
    else tv.footer.prepend(line);
  }
  line.textContent = text;
  line.hidden = !text;
}

/**
 * showChatCost shows the chat's estimated cost so far (cumulative.cost:
 * {usd, partial}), or hides it (null: nothing of the chat was priced, or
 * another chat is on screen).
 */
export function showChatCost(cost) {
  const box = ui.chatCost;
  box.hidden = !cost;
  if (!cost) {
    box.textContent = '';
    return;
  }
  box.textContent = `${costWords(cost.usd)} this chat${cost.partial ? ' (partial)' : ''}`;
  box.title = cost.partial
    ? 'Estimated from the server\'s prices; some answers came from a model with no price and are not counted'
    : 'Estimated from the server\'s prices, not the provider\'s bill';
}

/**
 * costWords words an amount of US dollars: two decimals from a dollar
 * ("$1.25"), two significant digits below ("$0.12", "$0.040", "$0.0051").
 */
export function costWords(usd) {
  usd = Math.max(0, Number(usd) || 0);
  if (usd === 0) return '$0';
  if (usd >= 0.995) return `$${usd.toLocaleString('en', { minimumFractionDigits: 2, maximumFractionDigits: 2 })}`;
  if (usd < 0.000001) return '< $0.000001';
  return `$${usd.toPrecision(2)}`;
}
