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
        return h('option', { value: m.model, disabled: Boolean(why), title: m.name }, why ? `${m.model} — ${why}` : m.model);
      }),
    );
    if (selection?.model && !(snapshot?.models ?? []).some((m) => m.model === selection.model)) modelPicker.prepend(h('option', { value: selection.model }, `${selection.model} (not in the catalog)`));
    modelPicker.value = selection?.model ?? '';
    agentPicker.disabled = agents.length === 0;
    modelPicker.disabled = (snapshot?.models ?? []).length === 0;
  }

  return { el, render };
}

/** Why a model cannot run now, or null. */
export function unusable(model, providers) {
  const provider = providers.get(model.provider_id);
  if (!provider) return `provider ${model.provider_id} unknown`;
  if (provider.connected) return null;
  if (provider.auth_state === 'missing') return `${provider.name} not connected`;
  return `${provider.name}: ${provider.auth_state}`;
}
