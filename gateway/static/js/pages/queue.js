// Queue: the runs waiting for a runtime (with their queue position) and the active ones,
// then the most recently finished.

import { listAll, paths } from '../api.js';
import { ACTIVE, TERMINAL, stateOf } from '../display.js';
import { h } from '../dom.js';
import { liveRuns } from '../live-runs.js';
import { RunsTable } from '../runs-table.js';

const RECENT_FINISHED = 20;

function rank(run) {
  const state = stateOf(run);
  if (ACTIVE.has(state)) return 0;
  if (state === 'queued') return 1;
  if (!TERMINAL.has(state)) return 2;
  return 3;
}

function compare(a, b) {
  const byRank = rank(a) - rank(b);
  if (byRank !== 0) return byRank;
  if (rank(a) === 1) return Number(a.queue_position || 0) - Number(b.queue_position || 0);
  return String(b.create_time || '').localeCompare(String(a.create_time || '')) || a.id.localeCompare(b.id);
}

export function mount(ctx) {
  const table = new RunsTable({
    name: 'queue',
    keys: ['position', 'run', 'task', 'owner', 'agent', 'trigger', 'state', 'attempts', 'created'],
    compare,
    caption: 'Queued and active runs, then recently finished runs',
    emptyText: 'Nothing queued, running or recently finished in this project.',
  });
  const summary = h('p', { class: 'summary', id: 'queue-summary' });
  const updateSummary = () => {
    let queued = 0;
    let active = 0;
    for (const run of table.runs.values()) {
      if (stateOf(run) === 'queued') queued += 1;
      else if (ACTIVE.has(stateOf(run))) active += 1;
    }
    summary.textContent = `${queued} queued · ${active} active`;
  };
  ctx.main.append(h('h1', { tabindex: '-1' }, 'Queue'), summary, table.element);

  const view = {
    accept: () => true,
    has: (id) => table.has(id),
    queued: () => [...table.runs.values()].some((run) => stateOf(run) === 'queued'),
    upsert: (run) => {
      const before = table.upsert(run);
      updateSummary();
      return before;
    },
  };
  const load = async () => {
    const runs = await listAll(paths.runs(ctx.project), 'runs', {}, 300);
    const finished = runs.filter((run) => TERMINAL.has(stateOf(run))).slice(0, RECENT_FINISHED);
    const keep = new Set(finished.map((run) => run.id));
    // A run already on screen stays there (it finished while watched); others that finished
    // long ago are not part of the queue.
    return runs.filter((run) => !TERMINAL.has(stateOf(run)) || keep.has(run.id) || table.has(run.id));
  };
  updateSummary();
  const live = liveRuns(ctx, view, load);
  return { title: 'Queue', dispose: live.close };
}
