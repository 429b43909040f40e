// The agent and model pickers, filled from the runtime snapshot (`runtime.changed`). They choose what a new
// session is created with and what the next run starts with; a model whose provider cannot run it now is shown
// disabled, with the reason in its label.
import { fill, h } from '../dom.js';

/** `actions.pick({agent, model})`: model null when only the agent changed (its first model is taken). */
export function createPickers(actions) {
  const agentPicker = h('select', { id: 'agent-picker', 'data-testid': 'agent-picker' });
  const modelPicker = h('select', { id: 'model-picker', 'data-testid': 'model-picker' });
  const el = h('div', { class: 'pickers' }, h('label', { for: 'agent-picker' }, 'Agent'), agentPicker, h('label', { for: 'model-picker' }, 'Model'), modelPicker);
  agentPicker.addEventListener('change', () => actions.pick({ agent: agentPicker.value, model: null }));
  modelPicker.addEventListener('change', () => actions.pick({ agent: agentPicker.value, model: modelPicker.value }));

  let pickersFor = null;
  function render(snapshot, selection) {
    const key = `${snapshot?.revision}|${selection?.agent}|${selection?.model}`;
    if (key === pickersFor) return;
    pickersFor = key;
    const agents = snapshot?.agents ?? [];
    fill(agentPicker, agents.map((a) => h('option', { value: a.agent, title: a.description }, a.mode && a.mode !== 'primary' ? `${a.agent} (${a.mode})` : a.agent)));
    if (selection?.agent && !agents.some((a) => a.agent === selection.agent)) agentPicker.prepend(h('option', { value: selection.agent }, `${selection.agent} (unknown)`));
    agentPicker.value = selection?.agent ?? '';
    const providers = new Map((snapshot?.providers ?? []).map((p) => [p.provider_id, p]));
    fill(
      modelPicker,
      (snapshot?.models ?? []).map((m) => {
        const why = unusable(m, providers);
        return h('option', { value: m.model, disabled: Boolean(why), title: m.name }, why ? `${m.model} — cannot run: ${why}` : m.model);
      }),
    );
    if (selection?.model && !(snapshot?.models ?? []).some((m) => m.model === selection.model)) modelPicker.prepend(h('option', { value: selection.model }, `${selection.model} (not in the catalog)`));
    modelPicker.value = selection?.model ?? '';
    agentPicker.disabled = agents.length === 0;
    modelPicker.disabled = (snapshot?.models ?? []).length === 0;
  }

  return { el, render };
}

/** The model the daemon's `local` provider plays a script with: it runs only while a script is connected. */
const LOCAL_SCRIPTED = 'local/scripted';

/**
 * Why a model cannot run now, or null. A snapshot that says it per model (`usable: false` with a `reason`) is
 * taken at its word; today's snapshot does not, so this is the daemon's own check (`troupe models`' USABLE
 * column): its provider must be connected, and `local/scripted` needs a connected script (the `local` provider's
 * generation is 0 while it has none).
 */
export function unusable(model, providers) {
  if (model.usable === false) return model.reason ?? model.unusable_reason ?? 'cannot run now';
  if (model.usable === true) return null;
  const provider = providers.get(model.provider_id);
  if (!provider) return `provider ${model.provider_id} unknown`;
  if (!provider.connected) return `${provider.name || provider.provider_id} not connected`;
  if (model.model === LOCAL_SCRIPTED && provider.generation === 0) return 'no script connected';
  return null;
}

/**
 * What to do when a run (or a session) cannot start on `modelId`, in the console's words, or null when the model
 * looks runnable (the daemon's own message is shown then).
 */
export function refusalAdvice(modelId, snapshot) {
  if (!modelId || !snapshot) return null;
  const providers = new Map((snapshot.providers ?? []).map((p) => [p.provider_id, p]));
  const info = (snapshot.models ?? []).find((m) => m.model === modelId) ?? { model: modelId, provider_id: modelId.split('/')[0] };
  const why = unusable(info, providers);
  if (!why) return null;
  const other = 'Pick another model in the Model menu at the top';
  const provider = providers.get(info.provider_id);
  if (!provider) return `${modelId} cannot run: this daemon has no provider “${info.provider_id}”. ${other}.`;
  if (!provider.connected) {
    return `${modelId} cannot run: its provider ${provider.name || provider.provider_id} is not connected. ${other}, or connect the provider on the daemon's machine (\`troupe connect ${provider.provider_id}\`).`;
  }
  if (modelId === LOCAL_SCRIPTED) {
    return `${modelId} cannot run: it plays a script file, and none is connected. ${other} (local/echo needs nothing), or connect a script on the daemon's machine (\`troupe connect local --script FILE\`).`;
  }
  return `${modelId} cannot run now (${why}). ${other}.`;
}
