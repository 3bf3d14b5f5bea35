// My Work: the runs of one owner. The owner is chosen here and remembered in localStorage.

import { listAll, paths } from '../api.js';
import { h } from '../dom.js';
import { liveRuns } from '../live-runs.js';
import { RunsTable } from '../runs-table.js';
import { stateOf } from '../display.js';

const KEY = 'truerun.owner';

export function mount(ctx) {
  const owner = localStorage.getItem(KEY) || '';
  const input = h('input', {
    id: 'owner-input',
    name: 'owner',
    value: owner,
    autocomplete: 'off',
    spellcheck: 'false',
    list: 'owner-options',
    required: true,
  });
  const options = h('datalist', { id: 'owner-options' });
  const form = h(
    'form',
    {
      class: 'inline-form',
      id: 'owner-form',
      onsubmit: (event) => {
        event.preventDefault();
        localStorage.setItem(KEY, input.value.trim());
        ctx.rerender();
      },
    },
    h('label', { for: 'owner-input' }, 'Owner'),
    input,
    options,
    h('button', { type: 'submit' }, 'Show'),
  );
  ctx.main.append(h('h1', { tabindex: '-1' }, 'My Work'), form);

  // Owners seen in the project's recent runs, as suggestions.
  listAll(paths.runs(ctx.project), 'runs', {}, 200)
    .then((runs) => {
      for (const id of [...new Set(runs.map((run) => run.owner_id).filter(Boolean))].sort()) {
        options.append(h('option', { value: id }));
      }
    })
    .catch(() => {});

  if (!owner) {
    ctx.main.append(h('p', { class: 'muted' }, 'Choose an owner to see their runs.'));
    return { title: 'My Work', dispose: () => {} };
  }
  const table = new RunsTable({
    name: 'mywork',
    keys: ['run', 'task', 'agent', 'trigger', 'state', 'duration', 'attempts', 'createdAge'],
    compare: (a, b) =>
      String(b.create_time || '').localeCompare(String(a.create_time || '')) || a.id.localeCompare(b.id),
    caption: `Runs of ${owner}`,
    emptyText: `${owner} has no runs in this project.`,
  });
  ctx.main.append(h('h2', {}, `Runs of ${owner}`), table.element);
  const view = {
    accept: (run) => run.owner_id === owner,
    has: (id) => table.has(id),
    queued: () => [...table.runs.values()].some((run) => stateOf(run) === 'queued'),
    upsert: (run) => table.upsert(run),
  };
  const live = liveRuns(ctx, view, () =>
    listAll(paths.runs(ctx.project), 'runs', { owner_id: owner }, 300),
  );
  return { title: `My Work — ${owner}`, dispose: live.close };
}
