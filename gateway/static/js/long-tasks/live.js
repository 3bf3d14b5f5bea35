// The project's long tasks as the server shows them, kept live from one stream
// (GET longTasks:stream: every shown task first, then each task again when its etag moves).
// Every long-task surface (the "In progress" group, the header badge, the inspector) reads
// this one map, so no two of them can disagree; none of them derives a state.

import { api, paths } from '../api.js';
import { openStream } from '../stream.js';

let current = null; // { project, tasks: Map, stream, listeners: Set }

function publish(changed) {
  for (const listener of current.listeners) listener(current.tasks, changed);
}

function open(project) {
  current = { project, tasks: new Map(), stream: null, listeners: new Set() };
  const mine = current;
  mine.stream = openStream(paths.longTaskStream(project), {
    kinds: ['long_task'],
    onEvent: (task) => {
      if (current !== mine) return;
      const known = mine.tasks.get(task.long_task_id);
      if (known && Number(task.etag) < Number(known.etag)) return; // an older read
      mine.tasks.set(task.long_task_id, task);
      publish(task);
    },
  });
}

// Calls listener(tasks, changed) now and on every change; returns the unsubscribe.
export function follow(project, listener) {
  if (!current || current.project !== project) {
    if (current) current.stream.close();
    open(project);
  }
  current.listeners.add(listener);
  listener(current.tasks, null);
  const mine = current;
  return () => mine.listeners.delete(listener);
}

// A command on a task (pause, resume, answer, clearRecovery, editCriterion, ...) with the
// etag it was shown at; the answer is the task after it, which the map takes at once (the
// stream sends it too).
export async function command(project, task, verb, body = {}) {
  const after = await api(`${paths.longTask(project, task.long_task_id)}:${verb}`, {
    method: 'POST',
    body: { etag: task.etag, ...body },
  });
  if (current && current.project === project) {
    const known = current.tasks.get(after.long_task_id);
    if (!known || Number(after.etag) >= Number(known.etag)) {
      current.tasks.set(after.long_task_id, after);
      publish(after);
    }
  }
  return after;
}

export async function read(project, id) {
  return api(paths.longTask(project, id));
}
