// Runtimes: the runtime instances connected now and those seen recently whose heartbeats
// stopped, as the capacity service lists them (GET /v1/runtimes): D, O, the runtime's own
// active count, the last heartbeat and its age, lineage and agent version. Connected and
// stale are the server's words (a fresh observation or not); the page never infers them.
// The list is polled; the ages tick every second in place, without re-rendering the table.

import { api, paths } from '../api.js';
import { enumName, h, replaceChildren, timeEl } from '../dom.js';
import { durationText } from '../durations.js';

const POLL_MS = 2000;
const TICK_MS = 1000;
// Optional columns are hidden on narrow screens (app.css .optional) so D, O and the state stay in view.
const HEADINGS = [
  ['Owner / instance'], ['State'], ['Devices', 'optional'],
  ['D', '', 'D: the device limit, from the last heartbeat'],
  ['O', '', 'O: occupied slots, runtime active merged with the durable rows by task id'],
  ['Active', '', 'what the runtime reported running'], ['Queued', 'optional', "the runtime's own queue"],
  ['Last heartbeat'], ['Lineage', 'optional'], ['Agent version'],
];

// A proto3 JSON Duration ("12.5s") in milliseconds.
function durationMs(text) {
  const seconds = Number.parseFloat(String(text || '0').replace(/s$/, ''));
  return Number.isNaN(seconds) ? 0 : Math.round(seconds * 1000);
}

// The heartbeat's age in the app's duration words (durations.js), whole seconds: "4 s ago".
export function ageText(ms) {
  return ms < 1000 ? '0 s ago' : `${durationText(ms)} ago`;
}

function stateCell(runtime) {
  const state = enumName(runtime.state, 'RUNTIME_STATE') || 'unknown';
  return h(
    'span',
    { class: 'runtime-state', dataset: { state, lastKnown: '' } },
    h('span', { class: 'runtime-state-label' }, state),
    h('span', { class: 'state-detail' }, runtime.state_detail || ''),
  );
}

export function mount(ctx) {
  const tbody = h('tbody');
  const table = h(
    'table',
    { class: 'runtimes', dataset: { table: 'runtimes' } },
    h('caption', { class: 'visually-hidden' }, 'Runtime instances'),
    h('thead', {}, h('tr', {}, HEADINGS.map(([label, optional, title]) => h('th', { scope: 'col', class: optional || undefined, title }, label)))),
    tbody,
  );
  const note = h('p', { class: 'muted runtimes-note' });
  const empty = h('p', { class: 'muted empty' }, 'No runtime is connected, and none was seen recently.');
  ctx.main.append(h('h1', { tabindex: '-1' }, 'Runtimes'), note, empty, h('div', { class: 'table-wrap' }, table));

  // key -> { row, age element, server age (ms) at read, local time of the read }
  const rows = new Map();
  const tick = () => {
    const now = Date.now();
    for (const entry of rows.values()) entry.age.textContent = ageText(entry.ageMs + (now - entry.readAt));
  };

  let timer = null;
  let stopped = false;
  const poll = async () => {
    clearTimeout(timer);
    try {
      const answer = await api(paths.runtimes());
      const readAt = Date.now();
      const seen = new Set();
      for (const runtime of answer.runtimes || []) {
        const key = JSON.stringify([runtime.owner_id, runtime.runtime_instance_id]);
        seen.add(key);
        let entry = rows.get(key);
        if (!entry) {
          entry = { row: h('tr', { dataset: { instance: runtime.runtime_instance_id, owner: runtime.owner_id } }) };
          rows.set(key, entry);
        }
        tbody.append(entry.row); // the server's order: connected first
        entry.age = h('span', { class: 'hb-age' });
        entry.ageMs = durationMs(runtime.heartbeat_age);
        entry.readAt = readAt;
        const state = enumName(runtime.state, 'RUNTIME_STATE');
        entry.row.dataset.state = state;
        replaceChildren(
          entry.row,
          h('th', { scope: 'row' }, `${runtime.owner_id} / ${runtime.runtime_instance_id}`),
          h('td', { class: 'state-cell' }, stateCell(runtime)),
          h('td', { class: 'mono optional' }, (runtime.routes || []).map((r) => `${r.device_id}${r.kind ? ` (${r.kind})` : ''}`).join(', ')),
          h('td', { class: 'num rt-limit' }, String(runtime.limit || 0)),
          h('td', { class: 'num rt-occupied' }, String(runtime.occupied || 0)),
          h('td', { class: 'num rt-active' }, String(runtime.runtime_active || 0)),
          h('td', { class: 'num optional' }, String(runtime.queued || 0)),
          h('td', { class: 'rt-heartbeat' }, timeEl(runtime.last_heartbeat_time), ' · ', entry.age),
          h(
            'td',
            { class: 'rt-lineage optional' },
            runtime.lineage || h('span', { class: 'muted' }, 'none'),
            runtime.replace_time ? h('span', { class: 'rt-replaced' }, ' · replaced ', timeEl(runtime.replace_time)) : null,
          ),
          h('td', { class: 'rt-version mono' }, runtime.agent_version || h('span', { class: 'muted' }, 'not reported')),
        );
      }
      for (const [key, entry] of rows) {
        if (seen.has(key)) continue;
        entry.row.remove(); // past the retention: the server no longer lists it
        rows.delete(key);
      }
      const ttl = Number(answer.observation_ttl_ms || 0) / 1000;
      const kept = Math.round(Number(answer.seen_retention_ms || 0) / 60000);
      note.textContent =
        `Connected: a heartbeat arrived within the observation TTL (${ttl} s). ` +
        `Stale: none since then; claims for it stopped; listed for ${kept} min after its last heartbeat.`;
      tick();
      ctx.clearError();
    } catch (error) {
      ctx.showError(error);
    }
    empty.hidden = rows.size > 0;
    table.hidden = rows.size === 0;
    if (!stopped) timer = setTimeout(poll, POLL_MS);
  };
  const ticker = setInterval(tick, TICK_MS);
  poll();
  return {
    title: 'Runtimes',
    dispose: () => {
      stopped = true;
      clearTimeout(timer);
      clearInterval(ticker);
    },
  };
}
