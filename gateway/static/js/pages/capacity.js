// Capacity: per runtime instance (owner + instance), D, O, the runtime's active count, the
// durable rows, the merged task set and the observation's age. The instances are those the
// capacity service lists (GET /v1/runtimes), those the project's recent attempts ran on,
// plus any added here (remembered in localStorage).

import { api, listAll, paths } from '../api.js';
import { formatDuration, h, replaceChildren, shortId } from '../dom.js';

const KEY = 'truerun.instances';
const POLL_MS = 2000;

function remembered() {
  try {
    return JSON.parse(localStorage.getItem(KEY) || '[]');
  } catch {
    return [];
  }
}

function taskList(ids) {
  if (!ids || ids.length === 0) return h('span', { class: 'muted' }, 'none');
  return h('ul', { class: 'tasks' }, ids.map((id) => h('li', { class: 'mono', title: id }, shortId(id))));
}

export function mount(ctx) {
  const owner = h('input', { id: 'cap-owner', name: 'owner', autocomplete: 'off', required: true, size: 12 });
  const instance = h('input', { id: 'cap-instance', name: 'instance', autocomplete: 'off', required: true, size: 12 });
  const tbody = h('tbody');
  const table = h(
    'table',
    { class: 'capacity', dataset: { table: 'capacity' } },
    h('caption', { class: 'visually-hidden' }, 'Occupancy per runtime instance'),
    h(
      'thead',
      {},
      h(
        'tr',
        {},
        ['Owner / instance', 'D (limit)', 'O (occupied)', 'Runtime active', 'Durable rows', 'Free', 'Merged task set', 'Durable only', 'Observation age']
          .map((label) => h('th', { scope: 'col' }, label)),
      ),
    ),
    tbody,
  );
  const empty = h('p', { class: 'muted empty' }, 'No runtime instance seen yet. Add one above.');
  ctx.main.append(
    h('h1', { tabindex: '-1' }, 'Capacity'),
    h(
      'form',
      {
        class: 'inline-form',
        onsubmit: (event) => {
          event.preventDefault();
          const pair = [owner.value.trim(), instance.value.trim()];
          const list = remembered().filter((p) => p[0] !== pair[0] || p[1] !== pair[1]);
          localStorage.setItem(KEY, JSON.stringify([...list, pair]));
          poll();
        },
      },
      h('label', { for: 'cap-owner' }, 'Owner'),
      owner,
      h('label', { for: 'cap-instance' }, 'Instance'),
      instance,
      h('button', { type: 'submit' }, 'Add'),
    ),
    empty,
    h('div', { class: 'table-wrap' }, table),
  );

  const rows = new Map();
  const rowFor = (key) => {
    let row = rows.get(key);
    if (!row) {
      row = h('tr', { dataset: { instance: key } });
      rows.set(key, row);
      tbody.append(row);
    }
    return row;
  };

  const instances = async () => {
    const runs = await listAll(paths.runs(ctx.project), 'runs', {}, 300);
    const pairs = new Map();
    for (const run of runs) {
      const id = run.current_attempt && run.current_attempt.runtime_instance_id;
      if (id) pairs.set(JSON.stringify([run.owner_id, id]), [run.owner_id, id]);
    }
    // And every runtime the capacity service lists (connected, or seen in the last minutes).
    const listed = await api(paths.runtimes());
    for (const r of listed.runtimes || []) {
      const pair = [r.owner_id, r.runtime_instance_id];
      pairs.set(JSON.stringify(pair), pair);
    }
    for (const pair of remembered()) pairs.set(JSON.stringify(pair), pair);
    return [...pairs.entries()].sort(([a], [b]) => a.localeCompare(b));
  };

  let timer = null;
  let stopped = false;
  const poll = async () => {
    clearTimeout(timer);
    try {
      for (const [key, [ownerId, instanceId]] of await instances()) {
        const o = await api(paths.occupancy(ownerId, instanceId));
        const fresh = Boolean(o.observation_fresh);
        replaceChildren(
          rowFor(key),
          h('th', { scope: 'row' }, `${ownerId} / ${instanceId}`),
          h('td', { class: 'num' }, String(o.limit || 0)),
          h('td', { class: 'num' }, String(o.occupied || 0)),
          h('td', { class: 'num' }, String(o.runtime_active || 0)),
          h('td', { class: 'num' }, String(o.durable_rows || 0)),
          h('td', { class: 'num' }, String(o.free_slots || 0)),
          h('td', {}, taskList(o.merged_task_ids)),
          h('td', {}, taskList(o.durable_only_task_ids)),
          h(
            'td',
            { dataset: { fresh: String(fresh) } },
            fresh ? formatDuration(o.observation_age) : `stale (${formatDuration(o.observation_age)}); claims stopped`,
          ),
        );
      }
      ctx.clearError();
    } catch (error) {
      ctx.showError(error);
    }
    empty.hidden = rows.size > 0;
    table.hidden = rows.size === 0;
    // Polled, not streamed: the observation's age changes with time, not with events.
    if (!stopped) timer = setTimeout(poll, POLL_MS);
  };
  poll();
  return {
    title: 'Capacity',
    dispose: () => {
      stopped = true;
      clearTimeout(timer);
    },
  };
}
