// Automations: runs not started by hand (trigger_type other than manual), one table per
// task and trigger.

import { listAll, paths } from '../api.js';
import { h } from '../dom.js';
import { liveRuns } from '../live-runs.js';
import { RunsTable } from '../runs-table.js';
import { stateOf } from '../display.js';

const MANUAL = new Set(['', 'manual', 'manual_retry']);

const groupKey = (run) => JSON.stringify([run.task_id, run.trigger_type, run.trigger_id || '']);

const newestFirst = (a, b) =>
  String(b.create_time || '').localeCompare(String(a.create_time || '')) || a.id.localeCompare(b.id);

export function mount(ctx) {
  const container = h('div', { class: 'groups' });
  const empty = h('p', { class: 'muted empty' }, 'No automation runs in this project.');
  ctx.main.append(h('h1', { tabindex: '-1' }, 'Automations'), empty, container);
  const groups = new Map();

  const tableFor = (run) => {
    const key = groupKey(run);
    let group = groups.get(key);
    if (!group) {
      const trigger = `${run.trigger_type}${run.trigger_id ? ` · ${run.trigger_id}` : ''}`;
      const title = `${run.task_id} — ${trigger}`;
      const table = new RunsTable({
        name: 'automation',
        keys: ['run', 'owner', 'agent', 'state', 'attempts', 'created'],
        compare: newestFirst,
        caption: `Runs of ${title}`,
      });
      const section = h(
        'section',
        { class: 'group', dataset: { group: key }, 'aria-label': title },
        h('h2', {}, h('span', {}, run.task_id), h('span', { class: 'muted' }, ` — ${trigger}`)),
        table.element,
      );
      group = { key, title, table, section };
      groups.set(key, group);
      const sorted = [...groups.values()].sort((a, b) => a.title.localeCompare(b.title));
      const after = sorted[sorted.indexOf(group) + 1];
      container.insertBefore(section, after ? after.section : null);
      empty.hidden = true;
    }
    return group.table;
  };

  const view = {
    accept: (run) => !MANUAL.has(run.trigger_type || ''),
    has: (id) => [...groups.values()].some((group) => group.table.has(id)),
    queued: () =>
      [...groups.values()].some((group) =>
        [...group.table.runs.values()].some((run) => stateOf(run) === 'queued'),
      ),
    upsert: (run) => tableFor(run).upsert(run),
  };
  const load = async () =>
    (await listAll(paths.runs(ctx.project), 'runs', {}, 500)).filter(view.accept);
  const live = liveRuns(ctx, view, load);
  return { title: 'Automations', dispose: live.close };
}
