// The project's long tasks as the server shows them, kept live from one stream
// (GET longTasks:stream: every shown task first, then each task again when its etag moves),
// followed by one tab and shared with the others.
// Every long-task surface (the "In progress" group, the header badge, the inspector) reads
// this one map, so no two of them can disagree; none of them derives a state.

import { api, paths } from '../api.js';
import { openStream } from '../stream.js';

const IDLE_LOOK_MS = 2000;
let current = null; // { project, tasks: Map, stream, listeners: Set, channel, release }

function publish(changed) {
  for (const listener of current.listeners) listener(current.tasks, changed);
}

// A later etag, or the same one with other words (a queued task's place moves with the
// other tasks, not with its own etag).
export function newer(task, known) {
  if (Number(task.etag) !== Number(known.etag)) return Number(task.etag) > Number(known.etag);
  return task.display_label !== known.display_label || task.progress !== known.progress;
}

function take(mine, task) {
  if (current !== mine) return;
  const known = mine.tasks.get(task.long_task_id);
  if (known && !newer(task, known)) return;
  mine.tasks.set(task.long_task_id, task);
  publish(task);
}

// Chromium keeps at most 6 HTTP/1.1 connections per host across all tabs, and each page
// already holds its own stream: so ONE tab per project follows longTasks:stream (a Web Lock
// elects it; when it closes, the next tab takes over and its stream starts with every task
// again) and tells the other tabs over a BroadcastChannel. A new tab asks the leader for
// what it knows ("hello" -> "snapshot").
function open(project) {
  const name = `truerun-long-tasks:${project}`;
  const mine = { project, tasks: new Map(), stream: null, listeners: new Set(), channel: null };
  current = mine;
  const stream = () =>
    openStream(paths.longTaskStream(project), {
      kinds: ['long_task'],
      onEvent: (task) => {
        take(mine, task);
        if (mine.channel) mine.channel.postMessage({ kind: 'task', task });
      },
    });
  // The stream is opened once the project has a task that is not finished (a project
  // without long tasks costs no connection); until then the leader looks every
  // IDLE_LOOK_MS with one short read.
  const follow = () => {
    const look = async () => {
      if (current !== mine) return;
      try {
        const page = await api(paths.longTasks(project), {
          query: { active_only: 'true', page_size: 1 },
        });
        if ((page.long_tasks || []).length) {
          mine.stream = stream();
          return;
        }
      } catch {
        // offline or refused (the app shows why): look again
      }
      mine.timer = setTimeout(look, IDLE_LOOK_MS);
    };
    look();
  };
  if (typeof BroadcastChannel === 'undefined' || !navigator.locks) {
    follow();
    return;
  }
  mine.channel = new BroadcastChannel(name);
  mine.channel.onmessage = ({ data }) => {
    if (data.kind === 'task') take(mine, data.task);
    else if (data.kind === 'snapshot') for (const task of data.tasks) take(mine, task);
    else if (data.kind === 'hello' && mine.release) {
      mine.channel.postMessage({ kind: 'snapshot', tasks: [...mine.tasks.values()] });
    }
  };
  navigator.locks.request(name, () => new Promise((resolve) => {
    mine.release = resolve;
    if (current !== mine) resolve();
    else follow();
  }));
  mine.channel.postMessage({ kind: 'hello' });
}

function close(mine) {
  clearTimeout(mine.timer);
  if (mine.stream) mine.stream.close();
  if (mine.release) mine.release();
  if (mine.channel) mine.channel.close();
}

// Calls listener(tasks, changed) now and on every change; returns the unsubscribe.
export function follow(project, listener) {
  if (!current || current.project !== project) {
    if (current) close(current);
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
  if (current && current.project === project) take(current, after);
  return after;
}

export async function read(project, id) {
  return api(paths.longTask(project, id));
}
