// The runs list's filters: state, owner, agent, task, time range and free text, kept in
// the address (#/queue?state=running&owner=x) so a link reproduces the view. The list and
// its per-state counts are the server's answers for the filter (GET .../runs and
// GET .../runs:count, gateway/routes/run_filters.py), so no match hides behind a page of
// runs; matches() only decides whether a run that changed while shown still belongs.

import { stateLabel, stateOf } from './display.js';
import { h } from './dom.js';

export const KEYS = ['state', 'owner', 'agent', 'task', 'from', 'to', 'q'];

// Every display state, in the server's order (DisplayState).
export const STATES = [
  'pending_approval', 'queued', 'starting', 'waiting_runtime', 'running', 'cancelling', 'unknown',
  'waiting_approval', 'retry_wait', 'lost', 'succeeded', 'failed', 'cancelled', 'timed_out',
  'paused', 'dead_letter',
];

// Pure: the filter in a hash like "#/queue?state=running&q=abc".
export function parseFilter(hash) {
  const at = hash.indexOf('?');
  const params = new URLSearchParams(at < 0 ? '' : hash.slice(at + 1));
  const filter = {};
  for (const key of KEYS) filter[key] = (params.get(key) || '').trim();
  if (filter.state && !STATES.includes(filter.state)) filter.state = '';
  return filter;
}

// Pure: "?state=running&owner=x" (set keys only, in KEYS order), or "".
export function filterQuery(filter) {
  const params = new URLSearchParams();
  for (const key of KEYS) if (filter[key]) params.set(key, filter[key]);
  const text = params.toString();
  return text ? `?${text}` : '';
}

export function isEmpty(filter) {
  return KEYS.every((key) => !filter[key]);
}

// Pure: the REST query of the filter; `withState` false for the counts (every state).
export function serverQuery(filter, withState = true) {
  return {
    display_state: withState && filter.state ? filter.state : undefined,
    owner_id: filter.owner || undefined,
    agent_id: filter.agent || undefined,
    task_id: filter.task || undefined,
    create_time_from: filter.from || undefined,
    create_time_to: filter.to || undefined,
    text: filter.q || undefined,
  };
}

// Pure: whether `run` passes the filter, by the server's rules (runs:count's description).
export function matches(run, filter) {
  if (filter.state && stateOf(run) !== filter.state) return false;
  if (filter.owner && run.owner_id !== filter.owner) return false;
  if (filter.agent && run.agent_id !== filter.agent) return false;
  if (filter.task && run.task_id !== filter.task) return false;
  const created = Date.parse(run.create_time || '');
  if (filter.from && !(created >= Date.parse(filter.from))) return false;
  if (filter.to && !(created < Date.parse(filter.to))) return false;
  if (filter.q) {
    const hay = [run.id, run.task_id, run.owner_id, run.agent_id, run.trigger_id, run.error_code]
      .map((v) => v || '')
      .join(' ')
      .toLowerCase();
    if (!hay.includes(filter.q.toLowerCase())) return false;
  }
  return true;
}

// An ISO time as a datetime-local value (local time, to the second), and back.
function toLocal(iso) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return '';
  return new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 19);
}
function fromLocal(value) {
  const d = new Date(value);
  return value && !Number.isNaN(d.getTime()) ? d.toISOString() : '';
}

// The filter form; onChange(next filter) on every change (text fields debounced).
export function filterForm(filter, onChange) {
  const field = (key, label, attrs = {}) => {
    const id = `filter-${key}`;
    const input = h('input', { id, name: key, autocomplete: 'off', spellcheck: 'false', ...attrs });
    input.value = key === 'from' || key === 'to' ? (filter[key] ? toLocal(filter[key]) : '') : filter[key];
    return { key, input, element: h('div', { class: 'filter-field' }, h('label', { for: id }, label), input) };
  };
  const state = h(
    'select',
    { id: 'filter-state', name: 'state' },
    h('option', { value: '' }, 'any state'),
    STATES.map((s) => h('option', { value: s }, stateLabel(s))),
  );
  state.value = filter.state;
  const fields = [
    field('q', 'Text', { type: 'search', placeholder: 'id, task, owner, agent, trigger, error' }),
    field('owner', 'Owner'),
    field('agent', 'Agent'),
    field('task', 'Task'),
    field('from', 'Created from', { type: 'datetime-local', step: '1' }),
    field('to', 'Created before', { type: 'datetime-local', step: '1' }),
  ];
  const read = () => {
    const next = { state: state.value };
    for (const f of fields) {
      next[f.key] = f.key === 'from' || f.key === 'to' ? fromLocal(f.input.value) : f.input.value.trim();
    }
    return next;
  };
  let timer = null;
  const changed = (delay) => {
    clearTimeout(timer);
    timer = setTimeout(() => onChange(read()), delay);
  };
  state.addEventListener('change', () => changed(0));
  for (const f of fields) {
    f.input.addEventListener('change', () => changed(0));
    if (f.key === 'q') f.input.addEventListener('input', () => changed(300));
  }
  const clear = h('button', { type: 'button', id: 'filter-clear' }, 'Clear filters');
  clear.addEventListener('click', () => {
    state.value = '';
    for (const f of fields) f.input.value = '';
    changed(0);
  });
  const form = h(
    'form',
    { class: 'run-filters', id: 'run-filters', role: 'search', 'aria-label': 'Filter runs', onsubmit: (e) => e.preventDefault() },
    h('div', { class: 'filter-field' }, h('label', { for: 'filter-state' }, 'State'), state),
    fields.map((f) => f.element),
    clear,
  );
  return { element: form, setState: (value) => { state.value = value; changed(0); } };
}

// The counts bar: one button per display state with runs (and the selected one), and All.
// answer: a CountRunsResponse; onPick(state or '').
export function renderCounts(answer, selected, onPick) {
  const counts = new Map();
  for (const entry of answer.counts || []) {
    counts.set(String(entry.display_state).replace(/^DISPLAY_STATE_/, '').toLowerCase(), Number(entry.count));
  }
  const button = (state, label, n) =>
    h(
      'button',
      { type: 'button', class: 'count-button', dataset: { state: state || 'all' }, 'aria-pressed': String(selected === state), onclick: () => onPick(state) },
      h('span', { class: 'count-label' }, label),
      ' ',
      h('span', { class: 'count' }, String(n)),
    );
  const items = [button('', 'all', Number(answer.total || 0))];
  for (const state of STATES) {
    if (counts.has(state) || selected === state) items.push(button(state, stateLabel(state), counts.get(state) || 0));
  }
  if (answer.complete === false) items.push(h('span', { class: 'muted' }, ' (counted the newest matches only)'));
  return items;
}
