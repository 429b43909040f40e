// Which agent and model a run starts with, as the pickers show it: plain data, no DOM (unit-tested with node).

/** `{agent, model}` (model: the model id) of a protocol RunSelection, or null when it names no agent. */
export function pickOf(selection) {
  return selection?.agent ? { agent: selection.agent, model: selection.model?.model ?? null } : null;
}

/** The runtime snapshot's first agent with its first model, or null (no snapshot yet, or no agents). */
export function snapshotDefault(snapshot) {
  const agent = snapshot?.agents?.[0];
  return agent ? { agent: agent.agent, model: agent.models?.[0]?.model ?? null } : null;
}

/** "coder · local/echo" for the header; '' when there is nothing to say. */
export function selectionLabel(selection) {
  if (!selection?.agent) return '';
  return selection.model ? `${selection.agent} · ${selection.model}` : selection.agent;
}

/** Whether two picks name the same agent and model. */
export function samePick(a, b) {
  return (a?.agent ?? null) === (b?.agent ?? null) && (a?.model ?? null) === (b?.model ?? null);
}

/**
 * What a console user can do about a run that failed because its model cannot run (the daemon's message speaks
 * of `setup_values` and `provider.connect`, which the console does not show), or null for any other failure.
 */
export function failureAdvice(message) {
  const text = message ?? '';
  if (/local\/scripted has no script/.test(text)) {
    return 'local/scripted plays a script file, and none is connected. Pick another model in the Model menu at the top (local/echo needs nothing), or connect a script on the daemon’s machine: troupe connect local --script FILE';
  }
  const provider = /the provider `([^`]+)` is not connected/.exec(text);
  if (provider) {
    return `The provider ${provider[1]} is not connected. Pick another model in the Model menu at the top, or connect it on the daemon’s machine: troupe connect ${provider[1]}`;
  }
  return null;
}
