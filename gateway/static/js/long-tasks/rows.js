// One long task's row, as the "In progress" group and the inspector's head show it: the
// dot (colour by the server's display state and wait kind), the server's label and
// progress words, what its stillness waits for, and its main action. Patched in place:
// fill() rewrites the texts of an existing row element, so a row is never appended twice.

import { h, formatTime } from '../dom.js';
import { span } from '../durations.js';

export const ACTION_WORDS = {
  start: 'Start',
  pause: 'Pause',
  answer: 'Answer',
  review_approval: 'Review approval',
  resume: 'Resume',
  review: 'Review',
  view_unmet: 'Review unmet',
  view: 'View',
  view_report: 'View report',
};
// The actions a row carries out itself (a command with the shown etag); the others open
// the inspector, where the person reads before acting.
export const DIRECT = new Set(['start', 'pause', 'resume']);

export function taskHref(id) {
  return `#/tasks/${encodeURIComponent(id)}`;
}

export function openDecisions(task) {
  return (task.decisions || []).filter((d) => d.state === 'open');
}

// Why it stands still, from the server's records: the continuation's catch-up note
// ("missed 3 ..."), or how long an open question has waited for a person ("waiting for
// your answer for 2 d 3 h", `since` its creation time: the shared ticker counts it on).
export function stillness(task) {
  const held = task.continuation || {};
  // The last catch-up's words ("missed 3 continuations while truerun was not running")
  // explain a task that stands still; once it works again its progress says the rest.
  if (held.note && task.display_state !== 'in_progress') return { words: held.note };
  const open = openDecisions(task);
  if (open.length && task.display_state === 'waiting_for_you') {
    const oldest = open[open.length - 1];
    const what = task.wait_kind === 'approval' ? 'your approval' : 'your answer';
    return { words: `waiting for ${what} for `, since: oldest.create_time };
  }
  return { words: '' };
}

export function row(task, onAction) {
  const el = h(
    'li',
    { class: 'lt-row', dataset: { longTaskId: task.long_task_id } },
    h('span', { class: 'lt-dot', 'aria-hidden': 'true' }),
    h('a', { class: 'lt-goal' }),
    h('span', { class: 'lt-shown' }),
    h('span', { class: 'lt-count' }),
    h('span', { class: 'lt-label' }),
    h('span', { class: 'lt-progress' }),
    h('span', { class: 'lt-still' }),
    h('button', { type: 'button', class: 'lt-action' }),
  );
  el.querySelector('.lt-action').addEventListener('click', () => onAction(el.task));
  fill(el, task);
  return el;
}

export function fill(el, task) {
  el.task = task;
  el.dataset.shown = task.display_state || 'unknown';
  el.dataset.wait = task.wait_kind || '';
  el.dataset.state = String(task.state || '').replace(/^LONG_TASK_STATE_/, '').toLowerCase();
  const goal = el.querySelector('.lt-goal');
  goal.textContent = task.goal;
  goal.href = taskHref(task.long_task_id);
  const shown = (task.display_state || 'unknown').replaceAll('_', ' ');
  el.querySelector('.lt-shown').textContent =
    task.wait_kind ? `${shown} (${task.wait_kind})` : shown;
  const count = openDecisions(task).length;
  const badge = el.querySelector('.lt-count');
  badge.textContent = String(count);
  badge.hidden = !(count && task.wait_kind === 'decision');
  badge.setAttribute('aria-label', `${count} open`);
  el.querySelector('.lt-label').textContent = task.display_label || '';
  const progress = el.querySelector('.lt-progress');
  progress.textContent = task.progress || '';
  progress.hidden = !task.progress;
  const still = el.querySelector('.lt-still');
  const { words, since } = stillness(task);
  if (still.dataset.words !== words || still.dataset.since !== (since || '')) {
    still.replaceChildren(words, ...(since ? [span(since, { cls: 'tick lt-waited' })] : []));
    still.dataset.words = words;
    still.dataset.since = since || '';
  }
  still.title = since ? `since ${formatTime(since)}` : '';
  still.hidden = !words;
  const action = el.querySelector('.lt-action');
  action.textContent = ACTION_WORDS[task.display_action] || 'View';
  action.dataset.action = task.display_action || 'view';
}
