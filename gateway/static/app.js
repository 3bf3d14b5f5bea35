// The dashboard's entry point: hash routes, the project and token, and the page frame.
// Each page module mounts into <main> and returns a dispose function that closes its streams
// and timers when another page is shown.

import { ApiError, onUnauthorized } from './js/api.js';
import { adoptFragment, setToken } from './js/auth.js';
import { h } from './js/dom.js';
import { startTicker } from './js/durations.js';
import { streamDropped, watchReachability } from './js/reachability.js';
import { onStreamStatus } from './js/stream.js';
import { setupTheme } from './js/theme.js';
import * as agents from './js/pages/agents.js';
import * as automations from './js/pages/automations.js';
import * as capacity from './js/pages/capacity.js';
import * as mywork from './js/pages/mywork.js';
import * as queue from './js/pages/queue.js';
import * as run from './js/pages/run.js';
import * as runtimes from './js/pages/runtimes.js';
import * as longTask from './js/long-tasks/inspector.js';
import { mountGroup } from './js/long-tasks/group.js';

const PROJECT_KEY = 'truerun.project';
const pages = { queue, mywork, automations, capacity, agents, runtimes };

const main = document.getElementById('view');
const announcer = document.getElementById('announcer');
const projectInput = document.getElementById('project-input');
const conn = document.getElementById('conn');

let current = null;
let needToken = false;

function project() {
  return localStorage.getItem(PROJECT_KEY) || 'default';
}

function announce(text) {
  // Cleared first so that the same sentence twice is still read out.
  announcer.textContent = '';
  requestAnimationFrame(() => {
    announcer.textContent = text;
  });
}

function errorBox() {
  let box = main.querySelector('.error');
  if (!box) {
    box = h('div', { class: 'error', role: 'alert' });
    box.hidden = true;
    main.prepend(box);
  }
  return box;
}

function showError(error) {
  const box = errorBox();
  const reason = error instanceof ApiError && error.reason ? ` (${error.reason})` : '';
  box.textContent = `${error.message || error}${reason}`;
  box.hidden = false;
}

function clearError() {
  const box = main.querySelector('.error');
  if (box) box.hidden = true;
}

function tokenForm() {
  const input = h('input', { id: 'token-input', type: 'password', autocomplete: 'off', required: true });
  return h(
    'form',
    {
      class: 'token-form',
      id: 'token-form',
      onsubmit: (event) => {
        event.preventDefault();
        setToken(input.value.trim());
        needToken = false;
        render();
      },
    },
    h('h1', { tabindex: '-1' }, 'Sign in'),
    h('p', {}, 'The gateway needs an access token for this project.'),
    h('label', { for: 'token-input' }, 'Access token'),
    input,
    h('button', { type: 'submit' }, 'Use token'),
  );
}

function route() {
  const path = window.location.hash.replace(/^#/, '') || '/queue';
  const runMatch = path.match(/^\/runs\/([^/?]+)/);
  if (runMatch) return { page: 'run', arg: decodeURIComponent(runMatch[1]) };
  const taskMatch = path.match(/^\/tasks\/([^/?]+)/);
  if (taskMatch) return { page: 'task', arg: decodeURIComponent(taskMatch[1]) };
  // One schedule: #/automations/<project>/<schedule>.
  const scheduleMatch = path.match(/^\/automations\/([^/?]+)\/([^/?]+)/);
  if (scheduleMatch) {
    const [project, schedule] = scheduleMatch.slice(1).map(decodeURIComponent);
    return { page: 'automations', arg: { project, schedule } };
  }
  const name = path.replace(/^\//, '').split(/[/?]/)[0];
  return { page: pages[name] ? name : 'queue', arg: null };
}

function render() {
  if (current) current.dispose();
  current = null;
  main.replaceChildren();
  const { page, arg } = route();
  for (const link of document.querySelectorAll('nav a')) {
    const active = link.dataset.page === page;
    if (active) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  if (needToken) {
    main.append(tokenForm());
    document.title = 'Sign in — truerun';
    return;
  }
  errorBox();
  const ctx = { project: project(), main, announce, showError, clearError, rerender: render };
  const mount = { run: run.mount, task: longTask.mount }[page] || pages[page].mount;
  current = mount(ctx, arg);
  document.title = `${current.title} — truerun`;
}

function start() {
  const found = adoptFragment();
  if (found.project) localStorage.setItem(PROJECT_KEY, found.project);
  projectInput.value = project();
  // Enter in the field fires `change` (which switches the project); the form only must not
  // submit itself.
  document.getElementById('project-form').addEventListener('submit', (event) => {
    event.preventDefault();
  });
  // The long tasks' "In progress" group and header badge live outside <main>: every page.
  const remountGroup = mountGroup(
    document.getElementById('long-tasks'), document.getElementById('lt-badge'), project, showError);
  projectInput.addEventListener('change', () => {
    localStorage.setItem(PROJECT_KEY, projectInput.value.trim() || 'default');
    remountGroup();
    render();
  });
  setupTheme(document.getElementById('theme-toggle'));
  startTicker();
  // When truerun answers again the page is mounted afresh: everything on it is read again.
  watchReachability(document.getElementById('server-banner'), main, render);
  onStreamStatus((status) => {
    conn.dataset.conn = status;
    conn.textContent = { live: 'live', reconnecting: 'reconnecting…', idle: 'offline' }[status];
    if (status === 'reconnecting') streamDropped();
  });
  onUnauthorized(() => {
    if (needToken) return;
    needToken = true;
    render();
  });
  window.addEventListener('hashchange', () => {
    render();
    // Move focus to the new page's heading so keyboard and screen-reader users land there.
    const heading = main.querySelector('h1');
    if (heading) heading.focus();
  });
  render();
}

start();
