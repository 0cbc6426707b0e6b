// mspd web chat: a small Muse Session Protocol client (JSON-RPC 2.0 over a
// WebSocket at /msp on the page's own host). No framework, no build step:
// the browser loads these ES modules as they are, after the vendored
// markdown-it and DOMPurify (classic scripts defining globals).
//
// This module starts the page: it wires the controls index.html holds to
// the modules that act on them, and opens the connection. Each module
// below it does one job (docs/chat-page.md has the table); none imports
// this one, and the few calls that go up the graph (a turn's Edit, the
// chat list opening a chat, the Instructions dialog starting one) are set
// here, where every module is loaded. How untrusted output is rendered
// safely is said in markdown.js.

import { announce, catching, closeDrawer, hideError, onState, openDrawer, phone, showError } from './chrome.js';
import { addImages, draft, hint, syncComposer, takeDraft } from './composer.js';
import { compactChat } from './context.js';
import { startExport } from './export.js';
import { closeInstructions, countInstructions, instructionsActions, openInstructions, saveInstructions, showInstructions, syncInstructionsButton } from './instructions.js';
import { copyText } from './markdown.js';
import { loadModels, pickModel, watchModels } from './models.js';
import { watchFollow } from './follow.js';
import { chatInURL, onRouteChange } from './route.js';
import { flushOutbox, openConnection, rpc } from './rpc.js';
import { searchAgain, startSearch } from './search.js';
import { send, sendAgain, startEdit, stop } from './sending.js';
import { chatListActions, newChat, refreshSessions } from './sessions.js';
import { pickApprovalMode, pickEffort } from './settings.js';
import { app, ui } from './state.js';
import { turnActions } from './transcript.js';
import { leaveChat, onNotification, onRequest, openSession } from './view.js';

// Calls up the module graph, which imports cannot make without a cycle.
turnActions.edit = startEdit;
turnActions.again = sendAgain;
chatListActions.open = openSession;
instructionsActions.newChat = newChat;

watchModels();
startSearch();
startExport();
watchFollow();

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
ui.offlineRetry.addEventListener('click', () => rpc.retryNow());

// Back and Forward (and an edited address) open the chat the address
// names, or none.
onRouteChange((sessionId) => {
  if (sessionId === app.current) return;
  hideError();
  closeDrawer();
  if (sessionId) openSession(sessionId).catch(showError);
  else leaveChat();
});
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

// The message box's placeholder names the keys where there is room.
phone.addEventListener('change', hint);
hint();

// Connect: on every (re)connect the list and models are read again, the
// chat on screen resumes from its cursor, and queued commands go.
openConnection({
  onNotification,
  onRequest,
  onState,
  onReady: async (result) => {
    app.listStream = (result.grantedCapabilities || []).includes('sessionListStream');
    refreshSessions().catch(showError);
    searchAgain();
    loadModels().catch(() => {});
    if (app.current) {
      await openSession(app.current, app.stale ? undefined : app.cursors.get(app.current)).catch(showError);
    }
    flushOutbox();
  },
});
syncComposer();
syncInstructionsButton();
// A reload or a link opens the chat its address names, once connected.
app.current = chatInURL();
rpc.connect();
