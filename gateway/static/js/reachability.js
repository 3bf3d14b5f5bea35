// Whether truerun can be reached. Every request of the dashboard goes through fetch(), so
// this module watches their outcomes (it wraps window.fetch once; no page has to remember):
// a network failure means the gateway is unreachable, a 503 problem+json that the services
// behind it are. After a short grace with no good answer, a banner says so and since when,
// and every state on screen is marked "last known" (a run shown `running` must not go on
// claiming it). While down, a probe asks every 2 s; the first good answer removes the banner
// and the page is read again (onBack).

import { token } from './auth.js';
import { h } from './dom.js';

const GRACE_MS = 1500;
const PROBE_MS = 2000;
const PROBE_PATH = '/v1/agents';
// What a page marks: run states (display.js) and anything a page flags with data-last-known.
const MARKED = '.state, [data-last-known]';

let banner = null;
let root = null;
let onBack = () => {};
let failingSince = null; // when the first failure after a good answer happened
let reason = '';
let shown = false;
let graceTimer = null;
let probeTimer = null;
let observer = null;

const pad = (n) => String(n).padStart(2, '0');
const clock = (d) => `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;

function mark(node) {
  if (!(node instanceof Element)) return;
  const found = node.matches(MARKED) ? [node] : [];
  found.push(...node.querySelectorAll(MARKED));
  for (const el of found) {
    if (el.classList.contains('stale')) continue;
    el.classList.add('stale');
    el.append(h('span', { class: 'last-known' }, 'last known'));
  }
  for (const row of node.querySelectorAll('tr')) row.classList.add('stale');
}

function unmark() {
  for (const el of root.querySelectorAll('.last-known')) el.remove();
  for (const el of root.querySelectorAll('.stale')) el.classList.remove('stale');
}

function show() {
  if (failingSince === null) return;
  const since = clock(failingSince);
  banner.textContent =
    reason === 'services'
      ? `truerun's services are unavailable since ${since} (the gateway answers 503); showing what was last known.`
      : `truerun is unreachable since ${since}; showing what was last known.`;
  banner.dataset.reason = reason;
  banner.hidden = false;
  if (shown) return; // the sentence may change (gateway <-> services); the marks stay
  shown = true;
  document.documentElement.classList.add('server-down');
  mark(root);
  // Whatever a page adds while truerun is away is just as old: mark it too.
  observer = new MutationObserver((changes) => {
    for (const change of changes) for (const node of change.addedNodes) mark(node);
  });
  observer.observe(root, { childList: true, subtree: true });
}

function failed(why) {
  if (failingSince === null) {
    failingSince = new Date();
    graceTimer = setTimeout(show, GRACE_MS);
  }
  reason = why;
  if (shown) show();
  probeSoon();
}

function answered() {
  const wasShown = shown;
  failingSince = null;
  shown = false;
  clearTimeout(graceTimer);
  clearTimeout(probeTimer);
  probeTimer = null;
  if (!wasShown) return;
  if (observer) observer.disconnect();
  observer = null;
  banner.hidden = true;
  document.documentElement.classList.remove('server-down');
  unmark();
  onBack();
}

function probeSoon() {
  if (probeTimer !== null) return;
  probeTimer = setTimeout(async () => {
    probeTimer = null;
    const headers = token() ? { Authorization: `Bearer ${token()}` } : {};
    try {
      await window.fetch(PROBE_PATH, { headers, cache: 'no-store' });
    } catch {
      // recorded by the fetch wrapper, which probes again
    }
  }, PROBE_MS);
}

function isServicesDown(response) {
  const type = response.headers.get('content-type') || '';
  return response.status === 503 && type.startsWith('application/problem+json');
}

// bannerEl: the banner's slot; main: where the states are; back(): re-read the page.
export function watchReachability(bannerEl, main, back) {
  banner = bannerEl;
  root = main;
  onBack = back;
  const realFetch = window.fetch.bind(window);
  window.fetch = async (input, init) => {
    let response;
    try {
      response = await realFetch(input, init);
    } catch (error) {
      // A page closing its own stream aborts it: that is no failure of truerun.
      if (!(init && init.signal && init.signal.aborted)) failed('gateway');
      throw error;
    }
    if (isServicesDown(response)) failed('services');
    else answered();
    return response;
  };
}

// A stream that dropped is a hint, not a proof: probe now rather than wait for a page.
export function streamDropped() {
  probeSoon();
}
