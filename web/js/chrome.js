// The page around the chat: the error banner, the live region that says
// things aloud, the connection's state, and the chat list's drawer on a
// phone.

import { ui } from './state.js';

export function showError(err) {
  const kind = err && err.kind ? ` (${err.kind})` : '';
  ui.bannerText.textContent = `${(err && err.message) || String(err)}${kind}`;
  ui.banner.hidden = false;
}

export function hideError() {
  ui.banner.hidden = true;
}

export function announce(text) {
  ui.announcer.textContent = text;
}

export function onState(state, detail) {
  ui.conn.dataset.state = state;
  if (state === 'online') ui.conn.textContent = 'online';
  else if (state === 'offline') ui.conn.textContent = `offline · retrying in ${Math.ceil(detail / 1000)}s`;
  else ui.conn.textContent = 'connecting…';
  ui.conn.title = state === 'online' && detail ? `${detail.name} ${detail.version}` : '';
  showOffline(state, detail);
}

// The offline banner's countdown to the next reconnect.
const offline = { timer: null, at: 0 };

/**
 * showOffline keeps the offline banner at the top of the chat, where the
 * reader looks at any width (the connection state above sits in the chat
 * list, a closed drawer on a phone): shown from the first lost
 * connection until one is back, counting down to the next try. Its
 * region is a polite status, so the loss is said once; the countdown is
 * not read out.
 */
function showOffline(state, delay) {
  clearInterval(offline.timer);
  offline.timer = null;
  if (state === 'online') {
    ui.offline.hidden = true;
    return;
  }
  if (state === 'connecting') {
    // Page load connects quietly; a reconnect keeps the banner up.
    ui.offlineWhen.textContent = ' · reconnecting…';
    return;
  }
  offline.at = performance.now() + delay;
  const tick = () => {
    const secs = Math.max(1, Math.ceil((offline.at - performance.now()) / 1000));
    ui.offlineWhen.textContent = ` · reconnecting in ${secs} s`;
  };
  tick();
  offline.timer = setInterval(tick, 250);
  ui.offline.hidden = false;
}

/** catching runs an async action, showing its failure in the banner. */
export const catching = (fn) => (...args) => fn(...args).catch(showError);

// Below 700 px the chat list is a drawer behind the menu button.
export const phone = window.matchMedia('(max-width: 700px)');

export function openDrawer() {
  ui.app.dataset.drawer = 'open';
  ui.menu.setAttribute('aria-expanded', 'true');
  ui.main.inert = phone.matches;
  const current = ui.sessions.querySelector('[aria-current="page"]');
  (current || ui.newChat).focus();
}

export function closeDrawer(refocus = false) {
  if (ui.app.dataset.drawer !== 'open') return;
  ui.app.dataset.drawer = 'closed';
  ui.menu.setAttribute('aria-expanded', 'false');
  ui.main.inert = false;
  if (refocus) ui.menu.focus();
}
