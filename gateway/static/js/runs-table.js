// A table of runs keyed by run id. A changed run patches its own row (cells replaced in
// place, the row moved only if its sort place changed); a row is added only for a run the
// table did not show before. So a state change can never show up as a second row.

import { h, replaceChildren, shortId, timeEl, enumName } from './dom.js';
import { renderState, stateOf, TERMINAL } from './display.js';
import { span, timeWithAge } from './durations.js';

// Columns marked optional are hidden on narrow screens so that the state stays in view.
export const columns = {
  position: {
    label: 'Position',
    render: (run) => (Number(run.queue_position || 0) > 0 ? String(run.queue_position) : '—'),
  },
  run: {
    label: 'Run',
    render: (run) => h('a', { href: `#/runs/${run.id}`, class: 'mono', title: run.id }, shortId(run.id)),
  },
  task: { label: 'Task', render: (run) => run.task_id || '' },
  owner: { optional: true, label: 'Owner', render: (run) => run.owner_id || '' },
  agent: { optional: true, label: 'Agent', render: (run) => run.agent_id || h('span', { class: 'muted' }, '—') },
  trigger: {
    optional: true,
    label: 'Trigger',
    render: (run) => [run.trigger_type || 'manual', run.trigger_id ? ` · ${run.trigger_id}` : ''],
  },
  state: { label: 'State', render: (run) => renderState(run), cell: 'state-cell' },
  status: { optional: true, label: 'Stored status', render: (run) => enumName(run.status, 'RUN_STATUS') },
  attempts: { optional: true, label: 'Attempts', render: (run) => String(run.attempt_count || 0) },
  created: { optional: true, label: 'Created', render: (run) => timeEl(run.create_time) },
  // The absolute time with its age beside it; the age ticks in place (durations.js).
  createdAge: { optional: true, label: 'Created', render: (run) => timeWithAge(timeEl(run.create_time), run.create_time) },
  duration: { optional: true, label: 'Duration', render: (run) => elapsed(run), cell: 'duration-cell' },
};

// How long the run has waited or run: fixed once it ended, counting while it lasts.
function elapsed(run) {
  if (TERMINAL.has(stateOf(run))) {
    return run.start_time
      ? span(run.start_time, { to: run.finish_time || run.update_time, prefix: 'ran ' })
      : span(run.create_time, { to: run.finish_time || run.update_time, prefix: 'ended after ' });
  }
  if (run.start_time) return span(run.start_time, { prefix: 'for ' });
  return span(run.queue_time || run.create_time, { prefix: 'waiting ' });
}

function cellClass(key) {
  const column = columns[key];
  return [column.cell, column.optional ? 'optional' : ''].filter(Boolean).join(' ') || undefined;
}

// Versions are int64 strings in proto3 JSON; compare them as numbers of any size.
function newer(a, b) {
  try {
    return BigInt(a.version || 0) >= BigInt(b.version || 0);
  } catch {
    return true;
  }
}

export class RunsTable {
  // keys: column keys; compare(a, b): row order; caption: text for screen readers.
  constructor({ keys, compare, caption, emptyText = 'No runs.', name }) {
    this.keys = keys;
    this.compare = compare || null;
    this.runs = new Map();
    this.rows = new Map();
    this.tbody = h('tbody');
    this.empty = h('p', { class: 'empty muted' }, emptyText);
    this.table = h(
      'table',
      { class: 'runs', dataset: { table: name || '' } },
      h('caption', { class: 'visually-hidden' }, caption),
      h(
        'thead',
        {},
        h('tr', {}, keys.map((key) => h('th', { scope: 'col', class: cellClass(key) }, columns[key].label))),
      ),
      this.tbody,
    );
    this.element = h('div', { class: 'table-wrap' }, this.table, this.empty);
    this.syncEmpty();
  }

  has(runId) {
    return this.rows.has(runId);
  }

  get size() {
    return this.rows.size;
  }

  // Shows `run`; returns the previous version of it, or null when the row is new.
  upsert(run) {
    const before = this.runs.get(run.id) || null;
    if (before && !newer(run, before)) return before;
    this.runs.set(run.id, run);
    let row = this.rows.get(run.id);
    if (!row) {
      row = h('tr', { dataset: { runId: run.id } });
      this.rows.set(run.id, row);
    }
    replaceChildren(
      row,
      this.keys.map((key) =>
        h(
          key === 'run' ? 'th' : 'td',
          { class: cellClass(key), scope: key === 'run' ? 'row' : undefined },
          columns[key].render(run),
        ),
      ),
    );
    this.place(run, row);
    this.syncEmpty();
    return before;
  }

  remove(runId) {
    const row = this.rows.get(runId);
    if (row) row.remove();
    this.rows.delete(runId);
    this.runs.delete(runId);
    this.syncEmpty();
  }

  place(run, row) {
    if (!this.compare) {
      if (!row.parentNode) this.tbody.append(row);
      return;
    }
    const next = [...this.tbody.children].find(
      (other) => other !== row && this.compare(run, this.runs.get(other.dataset.runId)) < 0,
    );
    const already = next ? row.nextElementSibling === next : row.parentNode && !row.nextElementSibling;
    if (already && row.parentNode) return;
    if (next) this.tbody.insertBefore(row, next);
    else this.tbody.append(row);
  }

  syncEmpty() {
    this.empty.hidden = this.rows.size > 0;
    this.table.hidden = this.rows.size === 0;
  }
}
