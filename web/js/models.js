// The model picker: model/list, its breakers' states kept fresh, the
// chat's model (session/setModel) or the next chat's.

import { announce } from './chrome.js';
import { syncAttach } from './composer.js';
import { el, uuidv7 } from './dom.js';
import { command, rpc } from './rpc.js';
import { app, ui } from './state.js';
import { modelOption } from './words.js';

/** sessionModel is the current chat's model id, if known. */
export function sessionModel() {
  const s = app.sessions.get(app.current);
  if (s && s.modelId) return s.modelId;
  const m = app.models.find((x) => x.isActive);
  return m ? m.modelId : null;
}

/**
 * refreshModels reads model/list again for the breakers' states: the
 * picker's labels change in place (an open or focused picker keeps its
 * choice); a list that changed is drawn afresh.
 */
async function refreshModels() {
  const sessionId = app.current;
  const res = await rpc.call('model/list', sessionId ? { sessionId } : {});
  if (sessionId !== app.current) return;
  const same = res.models.length === app.models.length &&
    res.models.every((m, i) => m.providerId === app.models[i].providerId && m.modelId === app.models[i].modelId);
  if (!same) {
    await loadModels();
    return;
  }
  app.models = res.models;
  const names = pickerNames(res.models);
  res.models.forEach((m, i) => {
    const o = ui.model.querySelector(`option[value="${i}"]`);
    if (o && o.textContent !== modelOption(m, names[i])) o.textContent = modelOption(m, names[i]);
  });
  syncAttach();
}

/**
 * pickerNames names each model/list row for the picker: its model id
 * without a gateway's vendor prefix ("openai/gpt-4o" → "gpt-4o"; the
 * whole id when that would confuse two of one provider's models), and
 * with its provider in brackets only when two providers offer the same
 * name — the provider otherwise shows as the option group's label.
 */
export function pickerNames(models) {
  const short = (m) => m.modelId.slice(m.modelId.lastIndexOf('/') + 1) || m.modelId;
  const count = (key) => models.reduce((n, x) => n + (key(x) ? 1 : 0), 0);
  const names = models.map((m) => (count((x) => x.providerId === m.providerId && short(x) === short(m)) > 1 ? m.modelId : short(m)));
  return names.map((name, i) => {
    const shared = models.some((x, j) => names[j] === name && x.providerId !== models[i].providerId);
    return shared ? `${name} (${models[i].providerId})` : name;
  });
}

/**
 * fillPicker puts the rows in the picker, each option's value its row's
 * index, under an option group per provider when there are several.
 */
function fillPicker(models) {
  const names = pickerNames(models);
  const option = (m, i) => {
    const o = el('option', null, modelOption(m, names[i]));
    o.value = String(i);
    o.title = m.displayLabel || `${m.providerId} · ${m.modelId}`;
    return o;
  };
  const providers = [...new Set(models.map((m) => m.providerId))];
  if (providers.length < 2) {
    ui.model.replaceChildren(...models.map(option));
    return;
  }
  ui.model.replaceChildren(...providers.map((id) => {
    const group = el('optgroup');
    group.label = id;
    models.forEach((m, i) => {
      if (m.providerId === id) group.append(option(m, i));
    });
    return group;
  }));
}

let modelsTimer = null;

/** refreshModelsSoon refreshes the picker after a fallback or a skip (once for a burst). */
export function refreshModelsSoon() {
  clearTimeout(modelsTimer);
  modelsTimer = setTimeout(() => refreshModels().catch(() => {}), 300);
}

// While the page is visible the picker's breaker states are read every
// 30 s (mspd's default breaker cool-down), and at once when it shows
// again.
const MODELS_EVERY = 30000;

/** watchModels keeps the picker's breaker states fresh (main.js starts it). */
export function watchModels() {
  setInterval(() => {
    if (document.visibilityState === 'visible' && rpc.ready) refreshModels().catch(() => {});
  }, MODELS_EVERY);
  document.addEventListener('visibilitychange', () => {
    if (document.visibilityState === 'visible' && rpc.ready) refreshModels().catch(() => {});
  });
}

/** loadModels fills the model picker from model/list. */
export async function loadModels() {
  const sessionId = app.current;
  const res = await rpc.call('model/list', sessionId ? { sessionId } : {});
  if (sessionId !== app.current) return;
  app.models = res.models;
  fillPicker(res.models);
  if (!res.models.length) ui.model.append(el('option', null, 'no models'));
  ui.model.disabled = !res.models.length;
  const pick = sessionId
    ? res.models.findIndex((m) => m.isActive)
    : res.models.findIndex((m) => (app.nextModel
      ? m.providerId === app.nextModel.providerId && m.modelId === app.nextModel.modelId
      : m.isDefault));
  ui.model.value = String(Math.max(0, pick));
  ui.model.dataset.value = ui.model.value;
  syncAttach();
  for (const tv of app.turns.values()) tv.renderModel();
}

/** selectModel shows a model as the session's (session/modelChanged). */
export function selectModel(providerId, modelId) {
  const i = app.models.findIndex((m) => m.modelId === modelId && (providerId == null || m.providerId === providerId));
  if (i >= 0) {
    ui.model.value = String(i);
    ui.model.dataset.value = ui.model.value;
  }
  syncAttach();
}

export async function pickModel() {
  const m = app.models[Number(ui.model.value)];
  if (!m) return;
  syncAttach();
  if (!app.current) {
    app.nextModel = m;
    ui.model.dataset.value = ui.model.value;
    return;
  }
  const previous = ui.model.dataset.value;
  try {
    await command('session/setModel', {
      commandId: uuidv7(),
      sessionId: app.current,
      model: { modelId: m.modelId, providerId: m.providerId },
    });
    ui.model.dataset.value = ui.model.value;
    announce(`Model: ${m.displayLabel || m.modelId}.`);
  } catch (err) {
    ui.model.value = previous; // the session kept its model
    syncAttach();
    throw err;
  }
}
