// The one place a run's display state becomes text and colour. Every page calls
// renderState(run); no page formats a state itself, so Queue, Run detail, My Work and
// Automations can never show one run differently. The state itself is the server's
// (Run.display_state, computed by coordinator/domain/display.py); nothing here derives it.

import { enumName, h, timeEl } from './dom.js';

export const TERMINAL = new Set(['succeeded', 'failed', 'cancelled', 'timed_out']);

// States in which a run holds (or may hold) a runtime slot.
export const ACTIVE = new Set(['starting', 'waiting_runtime', 'running', 'cancelling', 'unknown']);

const LABELS = {
  pending_approval: 'pending approval',
  queued: 'queued',
  starting: 'starting',
  waiting_runtime: 'waiting for runtime',
  running: 'running',
  cancelling: 'cancelling',
  unknown: 'unknown',
  waiting_approval: 'waiting for approval',
  retry_wait: 'retry wait',
  lost: 'lost',
  succeeded: 'succeeded',
  failed: 'failed',
  cancelled: 'cancelled',
  timed_out: 'timed out',
  paused: 'paused',
  dead_letter: 'dead letter',
};

export function stateOf(run) {
  return enumName(run.display_state, 'DISPLAY_STATE') || 'unspecified';
}

export function stateLabel(state) {
  return LABELS[state] || state.replaceAll('_', ' ');
}

// The time the state holds since: the server's display_since_time (explain()); a server that
// does not send it yet gets the same rule computed here.
function since(run) {
  if (run.display_since_time) return run.display_since_time;
  const attempt = run.current_attempt || {};
  switch (stateOf(run)) {
    case 'cancelling':
      return run.cancel_request_time;
    case 'unknown':
      return attempt.observe_time || attempt.start_request_time;
    default:
      return '';
  }
}

// The sentence under the label: what a queued run waits behind, what an unknown run lacks,
// what a cancelling run waits for; `since` is when that began (absolute, see formatTime).
export function stateDetail(run) {
  const state = stateOf(run);
  const reason = run.display_reason || '';
  switch (state) {
    case 'queued': {
      const position = Number(run.queue_position || 0);
      return { text: position > 0 ? `position ${position} in the queue` : reason, since: '' };
    }
    case 'unknown':
      return { text: reason || 'no evidence from the runtime', since: since(run) };
    case 'cancelling':
      return { text: 'waits for the runtime to confirm the process stopped', since: since(run) };
    case 'failed':
    case 'timed_out':
    case 'lost':
      return { text: run.error_code || reason, since: '' };
    case 'waiting_runtime':
    case 'pending_approval':
    case 'waiting_approval':
    case 'retry_wait':
    case 'paused':
    case 'dead_letter':
      return { text: reason, since: '' };
    default:
      return { text: '', since: '' };
  }
}

export function renderState(run) {
  const state = stateOf(run);
  const { text, since: at } = stateDetail(run);
  return h(
    'span',
    { class: 'state', dataset: { state } },
    h('span', { class: 'state-label' }, stateLabel(state)),
    text || at
      ? h('span', { class: 'state-detail' }, text, at ? [' — since ', timeEl(at)] : null)
      : null,
  );
}
