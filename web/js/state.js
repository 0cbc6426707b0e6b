// The page's shared state: ui, the elements of index.html every module
// reaches, and app, what the page knows of the server and of the chat on
// screen. Modules change app's members; no module keeps page state of
// its own in a top-level variable another module needs.

import { $ } from './dom.js';

export const ui = {
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
  jump: $('jump'),
  offline: $('offline'),
  offlineWhen: $('offline-when'),
  offlineRetry: $('offline-retry'),
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
  chatCost: $('chat-cost'),
  announcer: $('announcer'),
};

export const app = {
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
