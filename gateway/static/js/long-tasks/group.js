// The "In progress" group shown above every page and the header badge ("2 in progress · 1
// waiting for you"): one row per active long task of the project and per task finished in
// the last day (the stream sends only those), newest first, each patched in place.

import { h } from '../dom.js';
import { command, follow } from './live.js';
import { maybeNotify, permissionButton } from './notify.js';
import { DIRECT, fill, row, taskHref } from './rows.js';

const WAITING = new Set(['waiting_for_you', 'recovery_required']);

export function badgeText(tasks) {
  let active = 0;
  let waiting = 0;
  for (const task of tasks.values()) {
    if (task.finish_time) continue;
    if (WAITING.has(task.display_state)) waiting += 1;
    else active += 1;
  }
  if (!active && !waiting) return '';
  const parts = [];
  if (active) parts.push(`${active} in progress`);
  if (waiting) parts.push(`${waiting} waiting for you`);
  return parts.join(' · ');
}

// Mounts the group into `host` and the badge into `badge`; `project()` names the project.
// Returns remount(), called when the project changes.
export function mountGroup(host, badge, project, showError) {
  const list = h('ul', { class: 'lt-list', id: 'lt-list' });
  const empty = h('p', { class: 'muted lt-empty' }, 'No long tasks in progress.');
  const heading = h('h2', { id: 'lt-heading', tabindex: '-1' }, 'In progress');
  host.replaceChildren(h('div', { class: 'lt-head' }, heading, permissionButton()), empty, list);
  badge.addEventListener('click', () => {
    host.hidden = false;
    host.scrollIntoView({ block: 'nearest' });
    heading.focus();
  });

  const act = async (task) => {
    if (!DIRECT.has(task.display_action)) {
      window.location.hash = taskHref(task.long_task_id);
      return;
    }
    try {
      await command(project(), task, task.display_action);
    } catch (error) {
      showError(error);
    }
  };

  const render = (tasks, changed) => {
    if (changed) maybeNotify(changed);
    const ordered = [...tasks.values()].sort((a, b) =>
      String(b.create_time).localeCompare(String(a.create_time)),
    );
    const rows = new Map([...list.children].map((el) => [el.dataset.longTaskId, el]));
    for (const task of ordered) {
      let el = rows.get(task.long_task_id);
      if (el) fill(el, task);
      else el = row(task, act);
      list.append(el); // moves an existing element; the same node stays
    }
    empty.hidden = ordered.length > 0;
    const text = badgeText(tasks);
    badge.textContent = text;
    badge.hidden = !text;
  };

  let stop = follow(project(), render);
  return () => {
    stop();
    list.replaceChildren();
    stop = follow(project(), render);
  };
}
