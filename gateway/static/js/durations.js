// Durations and ages: "ran for 3 min 5 s", "created 2 min ago". A duration between two
// recorded times is fixed text; one that runs until now (queued for, running for, an age)
// is a <span data-tick-from> that one shared ticker rewrites each second: only that span's
// text changes, never the row or the table around it.

import { h } from './dom.js';

const TICK_MS = 1000;

// Milliseconds between two RFC 3339 times (to = now when absent); null when unknown.
export function between(fromIso, toIso) {
  if (!fromIso) return null;
  const from = Date.parse(fromIso);
  const to = toIso ? Date.parse(toIso) : Date.now();
  if (Number.isNaN(from) || Number.isNaN(to)) return null;
  return Math.max(0, to - from);
}

// "850 ms", "45 s", "3 min 5 s", "2 h 4 min", "3 d 2 h".
export function durationText(ms) {
  if (ms === null || ms === undefined) return '—';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${s % 60} s`;
  const hours = Math.floor(m / 60);
  if (hours < 24) return `${hours} h ${m % 60} min`;
  return `${Math.floor(hours / 24)} d ${hours % 24} h`;
}

// "just now", "12 s ago", "3 min ago", "2 h ago", "3 d ago": coarse on purpose, beside the
// absolute time (which stays the exact, shared text).
export function agoText(ms) {
  if (ms === null || ms === undefined) return '';
  const s = Math.floor(ms / 1000);
  if (s < 5) return 'just now';
  if (s < 60) return `${s} s ago`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ago`;
  const hours = Math.floor(m / 60);
  if (hours < 24) return `${hours} h ago`;
  return `${Math.floor(hours / 24)} d ago`;
}

const FORMATS = {
  duration: (ms) => durationText(ms),
  ago: (ms) => agoText(ms),
};

function text(el) {
  const ms = between(el.dataset.tickFrom, el.dataset.tickTo);
  return `${el.dataset.tickPrefix || ''}${FORMATS[el.dataset.tickFormat || 'duration'](ms)}`;
}

// A duration from `from` to `to`; without `to` it keeps counting (ticks) until replaced.
// format: 'duration' or 'ago'; prefix: text before it ("for ").
export function span(from, { to = '', format = 'duration', prefix = '', cls = 'tick' } = {}) {
  if (!from) return h('span', { class: 'muted' }, '—');
  const dataset = { tickFrom: from, tickFormat: format };
  if (to) dataset.tickTo = to;
  if (prefix) dataset.tickPrefix = prefix;
  const el = h('span', { class: cls, dataset });
  el.textContent = text(el);
  if (!to) el.dataset.ticking = 'true';
  return el;
}

// An absolute time with its age beside it: "2026-12-02 06:21:03 · 3 min ago".
export function timeWithAge(timeEl, iso) {
  if (!iso) return timeEl;
  return [timeEl, h('span', { class: 'muted age' }, ' · ', span(iso, { format: 'ago' }))];
}

let timer = null;

function tick() {
  for (const el of document.querySelectorAll('[data-ticking="true"]')) {
    const next = text(el);
    if (el.textContent !== next) el.textContent = next;
  }
}

// One interval for the whole app; pages need not start or stop it.
export function startTicker() {
  if (timer === null) timer = setInterval(tick, TICK_MS);
}
