// Run detail: the run's state and durations, the operator commands (run-actions.js), its
// attempts (each a timeline of evidenced steps, attempt-timeline.js, with its control /
// observed / sync dimensions and the fences of its record), its output (output-panel.js)
// and its events (output notes folded into one row per stretch), all kept current from the
// run's event stream.

import { api, listAll, paths } from '../api.js';
import { renderState, stateLabel, stateOf, TERMINAL } from '../display.js';
import { enumName, h, replaceChildren, shortId, timeEl } from '../dom.js';
import { renderSteps } from '../attempt-timeline.js';
import { span, timeWithAge } from '../durations.js';
import { coalesced, fallbackPoller } from '../live-runs.js';
import { outputPanel } from '../output-panel.js';
import { allows, operatorButtons } from '../run-actions.js';
import { openStream } from '../stream.js';

function facts(pairs) {
  return h(
    'dl',
    { class: 'facts' },
    pairs
      .filter(([, value]) => value !== undefined)
      .map(([term, value]) => h('div', {}, h('dt', {}, term), h('dd', {}, value ?? ''))),
  );
}

function chip(dimension, value) {
  return h(
    'span',
    { class: 'chip', dataset: { dimension, value } },
    h('span', { class: 'chip-name' }, dimension),
    h('span', { class: 'chip-value' }, value || '—'),
  );
}

// openRecords: the attempts whose record the reader opened (kept across re-renders).
function renderAttempt(attempt, current, events, openRecords) {
  const status = enumName(attempt.status, 'ATTEMPT_STATUS');
  const observed = enumName(attempt.observed_state, 'OBSERVED_STATE');
  const sync = enumName(attempt.sync_state, 'SYNC_STATE');
  return h(
    'li',
    { class: `attempt${current ? ' current' : ''}`, dataset: { attemptId: attempt.id } },
    h(
      'h3',
      {},
      `Attempt #${attempt.attempt_no}`,
      current ? h('span', { class: 'muted' }, ' (current)') : null,
    ),
    h(
      'div',
      { class: 'dimensions', role: 'group', 'aria-label': 'State dimensions' },
      chip('control', status),
      chip('observed', observed),
      chip('sync', sync),
    ),
    renderSteps(attempt, events),
    h(
      'details',
      {
        class: 'attempt-record',
        open: openRecords.has(attempt.id),
        ontoggle: (event) => (event.target.open ? openRecords.add(attempt.id) : openRecords.delete(attempt.id)),
      },
      h('summary', {}, 'Attempt record (fences and times)'),
      facts([
        ['Claimed', timeEl(attempt.claim_time)],
        ['Start requested (fence)', timeEl(attempt.start_request_time)],
        ['Lease expires', timeEl(attempt.lease_expire_time)],
        ['Last heartbeat', timeEl(attempt.heartbeat_time)],
        ['Observed at', timeEl(attempt.observe_time)],
        ['Runtime seq', String(attempt.last_event_seq || 0)],
        ['Cancel requested', timeEl(attempt.cancel_request_time)],
        ['Started', timeEl(attempt.start_time)],
        ['Finished', timeEl(attempt.finish_time)],
        ['Runtime', [attempt.runtime_instance_id || '—', attempt.runtime_device_id ? ` / ${attempt.runtime_device_id}` : '']],
        ['Runtime task', h('span', { class: 'mono' }, attempt.runtime_task_id || '—')],
        ['Exit code', attempt.exit_code === undefined ? undefined : String(attempt.exit_code)],
        ['Ended because', attempt.termination_reason || undefined],
        ['Error', attempt.error_code ? `${attempt.error_code} ${attempt.error_summary || ''}` : undefined],
      ]),
    ),
  );
}

// Notes the output writes into the event log (that it began, progressed, hit the cap): a
// run of them is folded into one row with its count, opened on demand.
const OUTPUT_NOTES = new Set(['attempt.output_progressed', 'attempt.output_truncated', 'attempt.progress']);

function noteGroup() {
  const toggle = h('button', { type: 'button', class: 'link-button', 'aria-expanded': 'false' });
  const row = h('tr', { class: 'event-group' }, h('td', { colspan: '6' }, toggle));
  const group = { row, toggle, rows: [], first: 0, last: 0, open: false };
  toggle.addEventListener('click', () => {
    group.open = !group.open;
    toggle.setAttribute('aria-expanded', String(group.open));
    for (const r of group.rows) r.hidden = !group.open;
    labelGroup(group);
  });
  return group;
}

function labelGroup(group) {
  const n = group.rows.length;
  const span = group.first === group.last ? `#${group.first}` : `#${group.first}–#${group.last}`;
  group.toggle.textContent = `${n} output note${n === 1 ? '' : 's'} (${span}) — ${group.open ? 'hide' : 'show'}`;
}

function actor(event) {
  const a = event.actor || {};
  const type = enumName(a.type, 'ACTOR_TYPE');
  return a.id ? `${type}:${a.id}` : type;
}

function renderEvent(event) {
  const payload = event.payload && Object.keys(event.payload).length ? JSON.stringify(event.payload) : '';
  return h(
    'tr',
    { dataset: { sequence: String(event.sequence) } },
    h('td', { class: 'num' }, String(event.sequence)),
    h('td', {}, timeEl(event.create_time)),
    h('th', { scope: 'row' }, h('code', {}, event.type)),
    h('td', { class: 'optional' }, actor(event)),
    h('td', { class: 'mono optional' }, shortId(event.attempt_id)),
    h('td', { class: 'payload' }, payload ? h('code', {}, payload) : ''),
  );
}

// Queued for / ran for / ended after: fixed between two recorded times, counting while the
// later one has not happened yet.
function durations(run, state) {
  const done = TERMINAL.has(state);
  const rows = [];
  if (run.queue_time) {
    const until = run.start_time || (done ? run.finish_time : '');
    rows.push(['Queued for', h('span', { id: 'run-queued-for' }, span(run.queue_time, { to: until }))]);
  }
  if (run.start_time) {
    rows.push([run.finish_time ? 'Ran for' : 'Running for', h('span', { id: 'run-ran-for' }, span(run.start_time, { to: run.finish_time || '' }))]);
  }
  if (run.finish_time) {
    rows.push(['Ended after', h('span', { id: 'run-ended-after' }, span(run.create_time, { to: run.finish_time }), ' from creation')]);
  }
  return rows;
}

export function mount(ctx, runId) {
  const heading = h('h1', { tabindex: '-1' }, `Run `, h('span', { class: 'mono' }, shortId(runId)));
  const stateBox = h('div', { class: 'run-state', dataset: { runId } });
  const factsBox = h('div', { class: 'run-facts' });
  const actions = h('div', { class: 'actions', role: 'group', 'aria-label': 'Commands' });
  const timeline = h('ol', { class: 'timeline', 'aria-label': 'Attempts, oldest first' });
  const eventsBody = h('tbody');
  const eventsTable = h(
    'table',
    { class: 'events' },
    h('caption', { class: 'visually-hidden' }, 'Events of the run, by sequence'),
    h(
      'thead',
      {},
      h(
        'tr',
        {},
        h('th', { scope: 'col' }, '#'),
        h('th', { scope: 'col' }, 'Time'),
        h('th', { scope: 'col' }, 'Event'),
        h('th', { scope: 'col', class: 'optional' }, 'Actor'),
        h('th', { scope: 'col', class: 'optional' }, 'Attempt'),
        h('th', { scope: 'col' }, 'Details'),
      ),
    ),
    eventsBody,
  );
  const output = outputPanel(ctx, runId);
  ctx.main.append(
    h('p', { class: 'crumbs' }, h('a', { href: '#/queue' }, 'Queue'), ' / run'),
    heading,
    stateBox,
    actions,
    factsBox,
    h('section', { 'aria-labelledby': 'attempts-h' }, h('h2', { id: 'attempts-h' }, 'Attempts'), timeline),
    output.element,
    h('section', { 'aria-labelledby': 'events-h' }, h('h2', { id: 'events-h' }, 'Events'), h('div', { class: 'table-wrap' }, eventsTable)),
  );

  let run = null;
  let lastSequence = 0;
  const allEvents = [];
  const openRecords = new Set();
  let group = null; // the output-note group the next note joins, while notes follow notes

  const addEvents = (events) => {
    for (const event of [...events].sort((a, b) => Number(a.sequence) - Number(b.sequence))) {
      // Events are append-only facts numbered per run without gaps: each is shown once, in
      // order; after a gap the rest comes from the list that refresh() reads.
      if (Number(event.sequence) <= lastSequence) continue;
      if (Number(event.sequence) !== lastSequence + 1) break;
      lastSequence = Number(event.sequence);
      allEvents.push(event);
      const row = renderEvent(event);
      if (!OUTPUT_NOTES.has(event.type)) {
        group = null;
        eventsBody.append(row);
        continue;
      }
      if (!group) {
        group = noteGroup();
        group.first = lastSequence;
        eventsBody.append(group.row);
      }
      row.hidden = !group.open;
      row.classList.add('event-note');
      group.rows.push(row);
      group.last = lastSequence;
      eventsBody.append(row);
      labelGroup(group);
    }
  };

  const command = async (verb, body, label) => {
    try {
      await api(`${paths.run(ctx.project, runId)}:${verb}`, {
        method: 'POST',
        body,
        headers: run && run.etag ? { 'If-Match': run.etag } : {},
      });
      ctx.announce(`${label} sent for run ${shortId(runId)}`);
      refresh('run');
    } catch (error) {
      ctx.showError(error);
      refresh('run');
    }
  };

  const renderRun = (next) => {
    const before = run;
    run = next;
    const state = stateOf(next);
    replaceChildren(stateBox, renderState(next));
    if (before && stateOf(before) !== state) {
      ctx.announce(`Run ${shortId(runId)} is now ${stateLabel(state)}`);
    }
    replaceChildren(
      factsBox,
      facts([
        ['Task', next.task_id],
        ['Owner', next.owner_id],
        ['Agent', next.agent_id || '—'],
        ['Trigger', `${next.trigger_type || 'manual'}${next.trigger_id ? ` · ${next.trigger_id}` : ''}`],
        ['Stored status', enumName(next.status, 'RUN_STATUS')],
        ['Version', String(next.version || '')],
        ['Attempts', `${next.attempt_count || 0} of ${next.max_attempts || 1}`],
        ['Created', timeWithAge(timeEl(next.create_time), next.create_time)],
        ['Queued', timeEl(next.queue_time)],
        ['Started', timeEl(next.start_time)],
        ['Finished', timeEl(next.finish_time)],
        ...durations(next, state),
        ['Cancel requested', next.cancel_request_time ? [timeEl(next.cancel_request_time), next.cancel_reason ? ` — ${next.cancel_reason}` : ''] : undefined],
        ['Error', next.error_code ? `${next.error_code} ${next.error_summary || ''}` : undefined],
        ['Retry of', next.retry_of_run_id ? h('a', { href: `#/runs/${next.retry_of_run_id}`, class: 'mono' }, shortId(next.retry_of_run_id)) : undefined],
      ]),
    );
    // What is offered is the server's allowed_commands (run-actions.js), never derived here.
    replaceChildren(
      actions,
      operatorButtons(ctx, next, () => run, () => refresh('run')),
      h('button', { type: 'button', id: 'cancel-run', disabled: !allows(next, 'cancel'), onclick: () => command('cancel', { reason: 'cancelled from the dashboard' }, 'Cancel') }, 'Cancel run'),
      h('button', { type: 'button', id: 'retry-run', disabled: !allows(next, 'retry'), onclick: () => command('retry', {}, 'Retry') }, 'Retry as a new run'),
      allows(next, 'approve')
        ? h('button', { type: 'button', id: 'approve-run', onclick: () => command('approve', {}, 'Approve') }, 'Approve')
        : null,
    );
  };

  const refresh = coalesced(async () => {
    try {
      const [next, attempts] = await Promise.all([
        api(paths.run(ctx.project, runId)),
        api(paths.attempts(ctx.project, runId)),
      ]);
      renderRun(next);
      if (Number(next.event_sequence || 0) > lastSequence) {
        addEvents(await listAll(paths.events(ctx.project, runId), 'events', {}, 5000));
      }
      const list = (attempts.attempts || []).sort((a, b) => a.attempt_no - b.attempt_no);
      replaceChildren(timeline, list.map((attempt) => renderAttempt(attempt, attempt.id === next.current_attempt_id, allEvents, openRecords)));
      ctx.clearError();
    } catch (error) {
      ctx.showError(error);
    }
  });

  const fallback = fallbackPoller(() => refresh('run'));
  fallback.set(false);
  const stream = openStream(paths.runStream(ctx.project, runId), {
    onStatus: (connected) => fallback.set(connected),
    onConnect: () => refresh('run'),
    onEvent: (event) => {
      if (!event || event.run_id !== runId) return;
      addEvents([event]);
      refresh('run');
    },
  });
  refresh('run');
  const dispose = () => {
    fallback.stop();
    stream.close();
    output.dispose();
    for (const dialog of document.querySelectorAll('dialog.op-dialog')) dialog.remove();
  };
  return { title: `Run ${shortId(runId)}`, dispose };
}
