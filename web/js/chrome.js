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
