// Browser notifications when a long task needs a person (waiting for you, recovery) or ends
// (completed, partial, failed): once per transition, only after a person allowed them with
// the button (never asked on load). The words are the server's display label.

import { h } from '../dom.js';

const NEEDS_PERSON = new Set(['waiting_for_you', 'recovery_required']);
const ENDED = new Set(['completed', 'partial', 'failed']);
const seen = new Map(); // task id -> the display state last seen

function supported() {
  return typeof Notification !== 'undefined';
}

// Tell about `task` if it just moved into a state a person is told about. The first sight of
// a task only records it: a page load is not a transition.
export function maybeNotify(task) {
  const before = seen.get(task.long_task_id);
  const now = `${task.display_state}/${task.wait_kind || ''}`;
  seen.set(task.long_task_id, now);
  if (before === undefined || before === now) return;
  const shown = task.display_state;
  if (!NEEDS_PERSON.has(shown) && !ENDED.has(shown)) return;
  if (!supported() || Notification.permission !== 'granted') return;
  const note = new Notification(`truerun: ${task.goal}`, {
    body: task.display_label,
    tag: `long-task-${task.long_task_id}-${task.etag}`,
  });
  note.onclick = () => {
    window.location.hash = `#/tasks/${encodeURIComponent(task.long_task_id)}`;
  };
}

// The button that asks for permission (hidden once granted or denied, or without support).
export function permissionButton() {
  const button = h('button', { type: 'button', class: 'lt-notify' }, 'Notify me');
  const refresh = () => {
    button.hidden = !supported() || Notification.permission !== 'default';
  };
  button.addEventListener('click', async () => {
    if (supported()) await Notification.requestPermission();
    refresh();
  });
  refresh();
  return button;
}
