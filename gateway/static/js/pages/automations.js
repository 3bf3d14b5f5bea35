// Automations: the project's schedules (timing, next fire, last outcome, missed fires,
// overlap policy, paused with its note; Pause, Resume, Fire now), and below them the runs not
// started by hand (trigger_type other than manual, or a schedule's), one table per task and
// trigger. One
// schedule's own page (#/automations/<project>/<schedule>) is pages/schedule.js.

import { listAll, paths } from '../api.js';
import { h, replaceChildren } from '../dom.js';
import { coalesced, liveRuns } from '../live-runs.js';
import { RunsTable } from '../runs-table.js';
import { stateOf } from '../display.js';
import {
  nextFire,
  overlapWords,
  scheduleActions,
  scheduleLink,
  statusBadge,
  timingWords,
} from '../schedules.js';
import * as schedulePage from './schedule.js';

const MANUAL = new Set(['', 'manual', 'manual_retry']);
// Schedules are read again this often (a next fire "in 3 s" must not stay on screen long).
export const SCHEDULES_POLL_MS = 2000;

const groupKey = (run) => JSON.stringify([run.task_id, run.trigger_type, run.trigger_id || '']);

const newestFirst = (a, b) =>
  String(b.create_time || '').localeCompare(String(a.create_time || '')) || a.id.localeCompare(b.id);

export function mount(ctx, arg) {
  if (arg && arg.schedule) return schedulePage.mount(ctx, arg.project, arg.schedule);
  ctx.main.append(h('h1', { tabindex: '-1' }, 'Automations'));
  const schedules = schedulesSection(ctx);
  const runs = runsSection(ctx);
  return {
    title: 'Automations',
    dispose: () => {
      schedules.dispose();
      runs.dispose();
    },
  };
}

function schedulesSection(ctx) {
  const tbody = h('tbody');
  const heads = [
    ['Schedule'],
    ['Timing', 'optional'],
    ['Next fire'],
    ['Last outcome', 'optional'],
    ['Missed', 'optional'],
    ['Overlap', 'optional'],
    ['Status'],
    ['Commands'],
  ];
  const table = h(
    'table',
    { class: 'schedules' },
    h('caption', { class: 'visually-hidden' }, 'Schedules of this project'),
    h('thead', {}, h('tr', {}, heads.map(([label, cls]) => h('th', { scope: 'col', class: cls }, label)))),
    tbody,
  );
  const empty = h('p', { class: 'muted empty' }, 'No schedules in this project.');
  ctx.main.append(
    h(
      'section',
      { 'aria-labelledby': 'schedules-h' },
      h('h2', { id: 'schedules-h' }, 'Schedules'),
      empty,
      h('div', { class: 'table-wrap' }, table),
    ),
  );
  const rows = new Map(); // schedule id -> { row, editing }

  let timer = null;
  let stopped = false;
  // One read at a time: a command's refresh and the timer's share it.
  const read = coalesced(async () => {
    try {
      const found = await listAll(paths.schedules(ctx.project), 'schedules', {}, 500);
      const ids = new Set(found.map((s) => s.schedule_id));
      for (const [id, entry] of rows) {
        if (!ids.has(id)) {
          entry.row.remove();
          rows.delete(id);
        }
      }
      for (const schedule of found) render(schedule);
      ctx.clearError();
    } catch (error) {
      ctx.showError(error);
    }
    empty.hidden = rows.size > 0;
    table.hidden = rows.size === 0;
  });
  const poll = async () => {
    await read('schedules');
    if (!stopped) timer = setTimeout(poll, SCHEDULES_POLL_MS);
  };

  const render = (schedule) => {
    let entry = rows.get(schedule.schedule_id);
    if (!entry) {
      entry = { row: h('tr', { dataset: { scheduleId: schedule.schedule_id } }), editing: false, actions: null };
      rows.set(schedule.schedule_id, entry);
      tbody.append(entry.row); // the services list schedules by id
    }
    const current = entry;
    if (!current.editing || !current.actions) {
      current.actions = h(
        'td',
        { class: 'commands' },
        scheduleActions(ctx, schedule, {
          done: () => read('schedules'),
          busy: (editing) => {
            current.editing = editing;
          },
        }),
      );
    }
    replaceChildren(
      current.row,
      h('th', { scope: 'row' }, scheduleLink(schedule), schedule.display_name ? h('div', { class: 'muted mono' }, schedule.schedule_id) : null),
      h('td', { class: 'optional timing' }, timingWords(schedule)),
      h('td', {}, nextFire(schedule)),
      h('td', { class: 'optional last-outcome' }, schedule.last_outcome || h('span', { class: 'muted' }, '—')),
      h('td', { class: 'optional num missed' }, String(schedule.missed_total || 0)),
      h('td', { class: 'optional overlap' }, overlapWords(schedule)),
      h('td', { class: 'status' }, statusBadge(schedule)),
      current.actions,
    );
  };

  poll();
  return {
    dispose: () => {
      stopped = true;
      clearTimeout(timer);
    },
  };
}

function runsSection(ctx) {
  const container = h('div', { class: 'groups' });
  const empty = h('p', { class: 'muted empty' }, 'No automation runs in this project.');
  ctx.main.append(
    h('section', { 'aria-labelledby': 'automation-runs-h' }, h('h2', { id: 'automation-runs-h' }, 'Runs by trigger'), empty, container),
  );
  const groups = new Map();

  const tableFor = (run) => {
    const key = groupKey(run);
    let group = groups.get(key);
    if (!group) {
      const trigger = `${run.trigger_type}${run.trigger_id ? ` · ${run.trigger_id}` : ''}`;
      const title = `${run.task_id} — ${trigger}`;
      const table = new RunsTable({
        name: 'automation',
        keys: ['run', 'owner', 'agent', 'state', 'duration', 'attempts', 'createdAge'],
        compare: newestFirst,
        caption: `Runs of ${title}`,
      });
      const section = h(
        'section',
        { class: 'group', dataset: { group: key }, 'aria-label': title },
        h('h3', {}, h('span', {}, run.task_id), h('span', { class: 'muted' }, ` — ${trigger}`)),
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
    // A schedule's run fired by hand (trigger_type manual) is still the schedule's.
    accept: (run) => !MANUAL.has(run.trigger_type || '') || String(run.trigger_id || '').startsWith('schedule:'),
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
  return { dispose: live.close };
}
