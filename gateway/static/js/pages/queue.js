// Queue: the runs waiting for a runtime (with their queue position) and the active ones,
// then the most recently finished. With a filter (run-filters.js, kept in the address) it
// shows the runs the server finds for it, in the same order, with the server's count of
// each display state for the filter above the table.

import { api, listAll, paths } from '../api.js';
import { ACTIVE, TERMINAL, stateOf } from '../display.js';
import { h, replaceChildren } from '../dom.js';
import { liveRuns } from '../live-runs.js';
import { filterForm, filterQuery, isEmpty, matches, parseFilter, renderCounts, serverQuery } from '../run-filters.js';
import { RunsTable } from '../runs-table.js';

const RECENT_FINISHED = 20;
const MAX_ROWS = 300;
const COUNTS_EVERY_MS = 5000; // counts also move for runs the page does not show

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
  let filter = parseFilter(window.location.hash);
  const table = new RunsTable({
    name: 'queue',
    keys: ['position', 'run', 'task', 'owner', 'agent', 'trigger', 'state', 'duration', 'attempts', 'createdAge'],
    compare,
    caption: 'Queued and active runs, then recently finished runs',
    emptyText: 'Nothing queued, running or recently finished in this project.',
  });
  const summary = h('p', { class: 'summary', id: 'queue-summary' });
  const counts = h('div', { class: 'state-counts', id: 'state-counts', role: 'group', 'aria-label': 'Runs per state for this filter' });
  const shown = h('p', { class: 'muted', id: 'queue-shown' });
  const updateSummary = () => {
    let queued = 0;
    let active = 0;
    for (const run of table.runs.values()) {
      if (stateOf(run) === 'queued') queued += 1;
      else if (ACTIVE.has(stateOf(run))) active += 1;
    }
    summary.textContent = `${queued} queued · ${active} active`;
    table.empty.textContent = isEmpty(filter) ? 'Nothing queued, running or recently finished in this project.' : 'No runs match this filter.';
    shown.textContent = isEmpty(filter) ? '' : `${table.size} shown${table.size >= MAX_ROWS ? ` (the newest ${MAX_ROWS})` : ''}`;
  };

  let countsSeq = 0;
  const loadCounts = async () => {
    const mine = ++countsSeq;
    try {
      const answer = await api(paths.runCounts(ctx.project), { query: serverQuery(filter, false) });
      if (mine !== countsSeq) return; // a newer filter's answer wins
      replaceChildren(counts, renderCounts(answer, filter.state, (state) => form.setState(state)));
      counts.dataset.filter = filterQuery(filter);
    } catch (error) {
      ctx.showError(error);
    }
  };
  let countsTimer = null;
  const countsSoon = () => {
    clearTimeout(countsTimer);
    countsTimer = setTimeout(loadCounts, 300);
  };

  const apply = (next) => {
    filter = next;
    // replaceState, not a hash change: the page stays mounted; the address is the view.
    window.history.replaceState(null, '', `#/queue${filterQuery(filter)}`);
    for (const id of [...table.runs.keys()]) table.remove(id);
    updateSummary();
    live.reload();
    loadCounts();
  };
  const form = filterForm(filter, apply);
  ctx.main.append(h('h1', { tabindex: '-1' }, 'Queue'), form.element, counts, summary, shown, table.element);

  const view = {
    // A shown run is always re-read (it may leave the filter); a new one must match it.
    accept: (run) => table.has(run.id) || isEmpty(filter) || matches(run, filter),
    has: (id) => table.has(id),
    queued: () => [...table.runs.values()].some((run) => stateOf(run) === 'queued'),
    upsert: (run) => {
      let before;
      if (!isEmpty(filter) && !matches(run, filter)) {
        before = table.runs.get(run.id) || null;
        table.remove(run.id);
      } else before = table.upsert(run);
      updateSummary();
      countsSoon();
      return before;
    },
  };
  const load = async () => {
    if (!isEmpty(filter)) return listAll(paths.runs(ctx.project), 'runs', serverQuery(filter), MAX_ROWS);
    const runs = await listAll(paths.runs(ctx.project), 'runs', {}, MAX_ROWS);
    const finished = runs.filter((run) => TERMINAL.has(stateOf(run))).slice(0, RECENT_FINISHED);
    const keep = new Set(finished.map((run) => run.id));
    // A run already on screen stays there (it finished while watched); others that finished
    // long ago are not part of the queue.
    return runs.filter((run) => !TERMINAL.has(stateOf(run)) || keep.has(run.id) || table.has(run.id));
  };
  updateSummary();
  const live = liveRuns(ctx, view, load);
  loadCounts();
  const poll = setInterval(loadCounts, COUNTS_EVERY_MS);
  const dispose = () => {
    clearInterval(poll);
    clearTimeout(countsTimer);
    live.close();
  };
  return { title: 'Queue', dispose };
}
