// The MCP servers of the daemon's config.toml (the runtime snapshot's `mcp_servers`, kept current by
// `runtime.changed`): a "Tools" button in the top bar that says when a server is not working, and the panel it
// opens, listing each server with its transport, its state (starting, ready, restarting, failed, disabled), why it
// failed or restarts, how often it restarted, and the tools a ready one offers with the names the model calls them
// by. As `troupe mcp list` prints them.
import { fill, h } from '../dom.js';

/** The servers that are not working now (failed or restarting): what the button counts. */
export function troubled(servers) {
  return (servers ?? []).filter((server) => server.state === 'failed' || server.state === 'restarting');
}

/** The button's words: "Tools", and how many servers failed or restart when any do. */
export function buttonWords(servers) {
  const failed = (servers ?? []).filter((server) => server.state === 'failed').length;
  const restarting = (servers ?? []).filter((server) => server.state === 'restarting').length;
  const parts = [];
  if (failed) parts.push(`${failed} failed`);
  if (restarting) parts.push(`${restarting} restarting`);
  return parts.length ? `Tools · ${parts.join(', ')}` : 'Tools';
}

export function createTools() {
  const button = h('button', { type: 'button', class: 'secondary small tools-toggle', 'data-testid': 'tools-toggle', 'aria-expanded': 'false', 'aria-controls': 'tools-panel' }, 'Tools');
  const heading = h('h2', { id: 'tools-heading', tabindex: '-1' }, 'MCP servers');
  const close = h('button', { type: 'button', class: 'secondary small', 'data-testid': 'tools-close' }, 'Close');
  const list = h('ul', { class: 'mcp-servers', 'aria-labelledby': 'tools-heading' });
  const el = h('section', { class: 'tools-panel', id: 'tools-panel', 'data-testid': 'tools-panel', 'aria-labelledby': 'tools-heading', hidden: true }, h('div', { class: 'tools-head' }, heading, close), list);
  let shownKey = null;

  const setOpen = (open) => {
    el.hidden = !open;
    button.setAttribute('aria-expanded', String(open));
    if (open) heading.focus();
  };
  button.addEventListener('click', () => setOpen(el.hidden));
  close.addEventListener('click', () => {
    setOpen(false);
    button.focus();
  });
  el.addEventListener('keydown', (event) => {
    if (event.key === 'Escape') {
      event.stopPropagation();
      setOpen(false);
      button.focus();
    }
  });

  function serverView(server) {
    const tools = server.tools ?? [];
    return h(
      'li',
      { class: 'mcp-server', 'data-testid': 'mcp-server', 'data-name': server.name, 'data-state': server.state },
      h(
        'p',
        { class: 'mcp-server-line' },
        h('strong', null, server.name),
        h('span', { class: 'dim' }, ` (${server.transport}) `),
        h('span', { class: `badge mcp-${server.state}`, 'data-testid': 'mcp-state' }, server.state),
        server.state === 'ready' ? h('span', { class: 'dim' }, ` ${tools.length} tool${tools.length === 1 ? '' : 's'}`) : null,
        server.restarts ? h('span', { class: 'dim' }, ` · ${server.restarts} restart${server.restarts === 1 ? '' : 's'}`) : null,
      ),
      server.reason ? h('p', { class: 'mcp-reason', 'data-testid': 'mcp-reason' }, server.reason) : null,
      tools.length
        ? h(
            'ul',
            { class: 'mcp-tools', 'aria-label': `Tools of ${server.name}` },
            tools.map((tool) => h('li', { 'data-testid': 'mcp-tool' }, h('code', null, tool.called_as), tool.name !== tool.called_as ? h('span', { class: 'dim' }, ` ${tool.name}`) : null)),
          )
        : null,
    );
  }

  /** `servers`: the snapshot's `mcp_servers` (absent from a daemon without MCP: none). */
  function render(servers) {
    const all = servers ?? [];
    const key = JSON.stringify(all);
    if (key === shownKey) return;
    shownKey = key;
    const words = buttonWords(all);
    fill(button, words);
    button.classList.toggle('trouble', troubled(all).length > 0);
    fill(
      list,
      all.length
        ? all.map(serverView)
        : h('li', { class: 'dim' }, 'No MCP servers. Add one as ', h('code', null, '[mcp_servers.NAME]'), ' with ', h('code', null, 'command'), ' or ', h('code', null, 'url'), ' to the daemon’s config.toml, then restart it.'),
    );
  }

  return { el, button, render };
}
