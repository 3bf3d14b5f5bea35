// Keeps a page's runs current from the project's event stream: an event re-reads its run
// (GET, at most one read per run in flight) and the page patches that run in place. Each
// (re)connection re-reads the page's whole list, so nothing missed while disconnected stays
// stale; the stream itself resumes from the last event id. While the stream is down the
// list is re-read every few seconds, so the page never keeps showing a state that ended.

import { api, listAll, paths } from './api.js';
import { stateLabel, stateOf } from './display.js';
import { shortId } from './dom.js';
import { openStream } from './stream.js';

export const FALLBACK_POLL_MS = 3000;

// Calls poll() every FALLBACK_POLL_MS while the stream is down; set(connected) to report.
export function fallbackPoller(poll) {
  let timer = null;
  const stop = () => {
    clearInterval(timer);
    timer = null;
  };
  return {
    set(connected) {
      if (connected) stop();
      else if (timer === null) timer = setInterval(poll, FALLBACK_POLL_MS);
    },
    stop,
  };
}

// Event types after which other runs' queue positions may have moved.
const QUEUE_MOVES = /^(run\.(created|queued|dispatching|cancelled|approved|retrying)|attempt\.(claimed|released))$/;

export function coalesced(read) {
  const inflight = new Map();
  return function refresh(key) {
    const entry = inflight.get(key);
    if (entry) {
      entry.again = true;
      return entry.promise;
    }
    const state = { again: false, promise: null };
    state.promise = (async () => {
      try {
        do {
          state.again = false;
          await read(key);
        } while (state.again);
      } finally {
        inflight.delete(key);
      }
    })();
    inflight.set(key, state);
    return state.promise;
  };
}

// view: { upsert(run) -> previous run or null, has(runId), accept(run) -> bool, queued() -> bool }
// load(): the runs the page shows, read fresh.
export function liveRuns(ctx, view, load) {
  const show = (run) => {
    if (!view.accept(run)) return;
    const before = view.upsert(run);
    if (before && stateOf(before) !== stateOf(run)) {
      ctx.announce(`Run ${shortId(run.id)} is now ${stateLabel(stateOf(run))}`);
    }
  };

  const reload = async () => {
    try {
      for (const run of await load()) show(run);
      ctx.clearError();
    } catch (error) {
      ctx.showError(error);
    }
  };

  const refetch = coalesced(async (runId) => {
    try {
      show(await api(paths.run(ctx.project, runId)));
    } catch (error) {
      if (error.status !== 404) ctx.showError(error);
    }
  });

  const positions = coalesced(async () => {
    const queued = await listAll(paths.runs(ctx.project), 'runs', {
      display_state: 'DISPLAY_STATE_QUEUED',
    });
    for (const run of queued) if (view.has(run.id)) show(run);
  });

  const fallback = fallbackPoller(reload);
  fallback.set(false);
  // from=now: no replay of the project's history; the first message is the position to
  // resume from, so a reconnect (Last-Event-ID) misses nothing.
  const stream = openStream(`${paths.projectStream(ctx.project)}?from=now`, {
    onStatus: (connected) => fallback.set(connected),
    // Whatever changed before this (re)connection is read again: the stream only carries
    // what happens from here on (or from the last event id).
    onConnect: () => reload(),
    onEvent: (event) => {
      if (!event || !event.run_id) return;
      if (view.has(event.run_id) || event.type === 'run.created') refetch(event.run_id);
      if (view.queued() && QUEUE_MOVES.test(event.type || '')) positions('all');
    },
  });

  const ready = reload();
  const close = () => {
    fallback.stop();
    stream.close();
  };
  return { ready, close, reload };
}
