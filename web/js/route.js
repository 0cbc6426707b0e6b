// Each chat's own address: the page's URL with #/c/<sessionId>, so that a
// reload, a bookmark or a new tab opens that chat, Back and Forward move
// between the chats opened, and the tab is named after the chat.
//
// Why the fragment and not a path (/c/<id>): the page's files, its
// WebSocket (msp) and a ?token= are all relative to the page's address,
// so mspd behind a proxy under any prefix keeps working, the server needs
// no route of its own, and the ids never reach a server's access log.
// This module only reads and writes the address: main.js acts on it.

const PREFIX = '#/c/';

/** chatInURL is the session id the address names, or null for none. */
export function chatInURL() {
  const hash = window.location.hash;
  if (!hash.startsWith(PREFIX) || hash.length === PREFIX.length) return null;
  try {
    return decodeURIComponent(hash.slice(PREFIX.length));
  } catch {
    return hash.slice(PREFIX.length); // the server will not know it either
  }
}

/** urlOf is the address of a chat, or of no chat (the page itself). */
function urlOf(sessionId) {
  const { pathname, search } = window.location;
  return sessionId ? `${pathname}${search}${PREFIX}${encodeURIComponent(sessionId)}` : `${pathname}${search}`;
}

/**
 * showInURL makes the address name the chat on screen (null: none). A
 * chat opened is a new history entry; replace is for leaving one that
 * is gone, whose address must not come back with Back.
 */
export function showInURL(sessionId, replace = false) {
  if (chatInURL() === (sessionId || null)) return;
  const state = { chat: sessionId || null };
  if (replace) window.history.replaceState(state, '', urlOf(sessionId));
  else window.history.pushState(state, '', urlOf(sessionId));
}

/** setTabTitle names the tab after the chat on screen. */
export function setTabTitle(name) {
  document.title = `${name || 'New chat'} · mspd`;
}

/**
 * onRouteChange calls open with the chat the address names (null for
 * none) whenever Back, Forward or an edited address changes it.
 */
export function onRouteChange(open) {
  window.addEventListener('popstate', () => open(chatInURL()));
}
