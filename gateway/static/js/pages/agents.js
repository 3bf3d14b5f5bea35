// Agents: every configured agent (GET /v1/agents: what the capacity service knows, whether
// or not a run names it) and every agent the project's runs name; each with its
// concurrency R, the live attempts it holds now, and those runs.

import { api, listAll, paths } from '../api.js';
import { ACTIVE, renderState, stateOf } from '../display.js';
import { enumName, h, replaceChildren, shortId, timeEl } from '../dom.js';

const POLL_MS = 3000;

export function mount(ctx) {
  const list = h('div', { class: 'agents' });
  const empty = h('p', { class: 'muted empty' }, 'No agent is configured, and no run in this project names one.');
  ctx.main.append(h('h1', { tabindex: '-1' }, 'Agents'), empty, list);
  const cards = new Map();

  let timer = null;
  let stopped = false;
  const poll = async () => {
    clearTimeout(timer);
    try {
      const [runs, listed] = await Promise.all([
        listAll(paths.runs(ctx.project), 'runs', {}, 500),
        api(paths.agents()),
      ]);
      const configured = new Map((listed.agents || []).map((agent) => [agent.agent_id, agent]));
      const byAgent = new Map([...configured.keys()].map((agentId) => [agentId, []]));
      for (const run of runs) {
        if (!run.agent_id) continue;
        if (!byAgent.has(run.agent_id)) byAgent.set(run.agent_id, []);
        byAgent.get(run.agent_id).push(run);
      }
      for (const agentId of [...byAgent.keys()].sort()) {
        // An agent named by runs but never configured has no R yet.
        const agent = configured.get(agentId) || null;
        const live = byAgent.get(agentId).filter((run) => ACTIVE.has(stateOf(run)));
        let card = cards.get(agentId);
        if (!card) {
          card = h('section', { class: 'agent', dataset: { agentId }, 'aria-label': `Agent ${agentId}` });
          cards.set(agentId, card);
          list.append(card);
        }
        replaceChildren(
          card,
          h('h2', {}, agentId),
          h(
            'dl',
            { class: 'facts' },
            h('div', {}, h('dt', {}, 'R (concurrency)'), h('dd', { class: 'agent-r' }, agent ? String(agent.concurrency) : 'not configured')),
            h('div', {}, h('dt', {}, 'Live attempts'), h('dd', { class: 'agent-live' }, agent ? String(agent.live_attempts || 0) : String(live.length))),
            h('div', {}, h('dt', {}, 'Workspace'), h('dd', {}, agent ? `${enumName(agent.workspace_kind, 'WORKSPACE_KIND') || '—'} ${agent.workspace_path || ''}` : '—')),
            h('div', {}, h('dt', {}, 'Fairness weight'), h('dd', {}, agent ? String(agent.fairness_weight || 1) : '—')),
            h('div', {}, h('dt', {}, 'Settings changed'), h('dd', {}, timeEl(agent && agent.update_time))),
          ),
          live.length
            ? h(
                'ul',
                { class: 'live-runs', 'aria-label': `Live runs of ${agentId}` },
                live.map((run) => h('li', { dataset: { runId: run.id } }, h('a', { href: `#/runs/${run.id}`, class: 'mono' }, shortId(run.id)), ' ', renderState(run))),
              )
            : h('p', { class: 'muted' }, 'No live attempts.'),
        );
      }
      ctx.clearError();
    } catch (error) {
      ctx.showError(error);
    }
    empty.hidden = cards.size > 0;
    if (!stopped) timer = setTimeout(poll, POLL_MS);
  };
  poll();
  return {
    title: 'Agents',
    dispose: () => {
      stopped = true;
      clearTimeout(timer);
    },
  };
}
