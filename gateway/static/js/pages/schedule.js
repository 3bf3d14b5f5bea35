// One schedule (#/automations/<project>/<schedule>): its timing, next and upcoming fires,
// what it did last (the server's words), paused with its note, the commands, its recent
// events (fired, skipped, buffered, coalesced, missed, ...) and its runs, each run's state
// rendered by display.js like on every other page. The schedule and its events are read
// again every few seconds; the runs follow the project's event stream.

import { api, paths } from '../api.js';
import { enumName, formatTime, h, replaceChildren, shortId, timeEl } from '../dom.js';
import { coalesced, liveRuns } from '../live-runs.js';
import { RunsTable } from '../runs-table.js';
import {
  durationWords,
  nextFire,
  overlapWords,
  scheduleActions,
  statusBadge,
  timingWords,
} from '../schedules.js';

const POLL_MS = 2000;
const EVENTS_SHOWN = 50;
const RUNS_SHOWN = 50;

const newestFirst = (a, b) =>
  String(b.create_time || '').localeCompare(String(a.create_time || '')) || a.id.localeCompare(b.id);

function facts(pairs) {
  return h(
    'dl',
    { class: 'facts' },
    pairs
      .filter(([, value]) => value !== undefined)
      .map(([term, value]) => h('div', {}, h('dt', {}, term), h('dd', {}, value ?? ''))),
  );
}

const runLink = (runId) =>
  runId ? h('a', { href: `#/runs/${runId}`, class: 'mono', title: runId }, shortId(runId)) : h('span', { class: 'muted' }, '—');

function renderEvent(event) {
  return h(
    'tr',
    { dataset: { sequence: String(event.sequence), type: event.type } },
    h('td', { class: 'num optional' }, String(event.sequence)),
    h('td', {}, timeEl(event.create_time)),
    h('th', { scope: 'row' }, h('code', {}, event.type)),
    h('td', { class: 'message' }, event.message),
    h('td', { class: 'optional' }, event.run_id ? runLink(event.run_id) : ''),
  );
}

export function mount(ctx, project, scheduleId) {
  // The schedule's project, whichever one the project field names.
  const here = { ...ctx, project };
  const base = paths.schedule(project, scheduleId);
  const stateBox = h('div', { class: 'sched-state' });
  const actions = h('div', { class: 'sched-commands' });
  const factsBox = h('div', { class: 'schedule-facts' });
  const runs = new RunsTable({
    name: 'schedule-runs',
    keys: ['run', 'trigger', 'state', 'duration', 'attempts', 'createdAge'],
    compare: newestFirst,
    caption: `Runs of schedule ${scheduleId}, newest first`,
    emptyText: 'No runs yet.',
  });
  const eventsBody = h('tbody');
  const eventsTable = h(
    'table',
    { class: 'sched-events' },
    h('caption', { class: 'visually-hidden' }, `What schedule ${scheduleId} did, newest first`),
    h(
      'thead',
      {},
      h(
        'tr',
        {},
        h('th', { scope: 'col', class: 'optional' }, '#'),
        h('th', { scope: 'col' }, 'Time'),
        h('th', { scope: 'col' }, 'Event'),
        h('th', { scope: 'col' }, 'What happened'),
        h('th', { scope: 'col', class: 'optional' }, 'Run'),
      ),
    ),
    eventsBody,
  );
  ctx.main.append(
    h('p', { class: 'crumbs' }, h('a', { href: '#/automations' }, 'Automations'), ` / ${project} / schedule`),
    h('h1', { tabindex: '-1' }, 'Schedule ', h('span', { class: 'mono' }, scheduleId)),
    stateBox,
    actions,
    factsBox,
    h('section', { 'aria-labelledby': 'sched-runs-h' }, h('h2', { id: 'sched-runs-h' }, 'Runs'), runs.element),
    h('section', { 'aria-labelledby': 'sched-events-h' }, h('h2', { id: 'sched-events-h' }, 'Events'), h('div', { class: 'table-wrap' }, eventsTable)),
  );

  let editing = false;
  let timer = null;
  let stopped = false;

  const render = (schedule, upcoming) => {
    replaceChildren(stateBox, statusBadge(schedule));
    if (!editing) {
      replaceChildren(
        actions,
        scheduleActions(here, schedule, {
          done: () => refresh('schedule'),
          busy: (now) => {
            editing = now;
          },
        }),
      );
    }
    const zone = upcoming.time_zone || (schedule.spec && schedule.spec.time_zone) || 'UTC';
    const fires = upcoming.fires || [];
    const buffered = schedule.buffered_fire_times || [];
    const open = schedule.open_run_ids || [];
    const template = schedule.template || {};
    replaceChildren(
      factsBox,
      facts([
        ['Name', schedule.display_name || schedule.schedule_id],
        ['Timing', timingWords(schedule)],
        ['Next fire', nextFire(schedule)],
        [
          `Upcoming (${zone})`,
          fires.length
            ? h('ul', { class: 'upcoming' }, fires.map((f) => h('li', {}, h('time', { datetime: f.fire_time }, String(f.local_time || '').replace('T', ' ')))))
            : h('span', { class: 'muted' }, 'none'),
        ],
        ['Last fire', timeEl(schedule.last_fire_time)],
        ['Last outcome', h('span', { class: 'last-outcome' }, schedule.last_outcome || '—')],
        ['Last run', runLink(schedule.last_run_id)],
        ['Missed (recorded, never run)', h('span', { class: 'missed' }, String(schedule.missed_total || 0))],
        ['Overlap', overlapWords(schedule)],
        [
          'Catch-up',
          `${enumName(schedule.catchup_policy, 'CATCHUP_POLICY') || 'one'} within ${durationWords(schedule.catchup_window) || '0s'}`,
        ],
        ['Buffered fires', buffered.length ? buffered.map((t) => formatTime(t)).join(', ') : '0'],
        ['Unfinished runs', open.length ? open.map((id, i) => [i ? ', ' : '', runLink(id)]) : '0'],
        ['Runs', `${template.task_id || ''} for ${template.owner_id || ''}${template.agent_id ? ` on ${template.agent_id}` : ''}`],
        ['Webhook', schedule.webhook_enabled ? h('code', {}, `POST ${schedule.webhook_path}`) : 'off'],
        ['Created', [timeEl(schedule.create_time), schedule.created_by ? ` by ${schedule.created_by}` : '']],
        ['Updated', timeEl(schedule.update_time)],
      ]),
    );
  };

  // One read at a time: a command's refresh and the timer's share it.
  const refresh = coalesced(async () => {
    try {
      const [schedule, upcoming, events] = await Promise.all([
        api(base),
        api(paths.scheduleUpcoming(project, scheduleId), { query: { count: 5 } }),
        api(paths.scheduleEvents(project, scheduleId), { query: { page_size: EVENTS_SHOWN } }),
      ]);
      render(schedule, upcoming);
      replaceChildren(eventsBody, (events.events || []).map(renderEvent));
      ctx.clearError();
    } catch (error) {
      ctx.showError(error);
    }
  });
  const tick = async () => {
    await refresh('schedule');
    if (!stopped) timer = setTimeout(tick, POLL_MS);
  };

  const trigger = `schedule:${scheduleId}`;
  const view = {
    accept: (run) => run.trigger_id === trigger && run.project_id === project,
    has: (id) => runs.has(id),
    queued: () => false,
    upsert: (run) => runs.upsert(run),
  };
  const load = async () =>
    (await api(paths.scheduleRuns(project, scheduleId), { query: { page_size: RUNS_SHOWN } })).runs || [];
  const live = liveRuns(here, view, load);
  tick();
  return {
    title: `Schedule ${scheduleId}`,
    dispose: () => {
      stopped = true;
      clearTimeout(timer);
      live.close();
    },
  };
}
