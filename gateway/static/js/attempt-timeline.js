// One attempt's life as steps: claimed -> start requested (the server's fence) -> accepted
// -> running -> ended, with cancel requested / unknown / lost / released where they
// happened. Each step is an event of the run's log (its time, who wrote it, the runtime's
// seq when the runtime said so); a step the log does not show but the attempt's record
// does (a time field) is shown with that field as its evidence. Nothing is inferred.

import { enumName, h, timeEl } from './dom.js';
import { between, durationText, span } from './durations.js';

const ENDED = new Set(['succeeded', 'failed', 'cancelled', 'timed_out', 'lost']);

// Event type -> the step it is. `ends`: the attempt is over after it.
const STEP_OF = {
  'attempt.claimed': { key: 'claimed', label: 'claimed' },
  'attempt.start_requested': { key: 'fenced', label: 'start requested (fence)' },
  'attempt.start_rejected': { key: 'rejected', label: 'start rejected', ends: true },
  'attempt.accepted': { key: 'accepted', label: 'accepted' },
  'attempt.running': { key: 'running', label: 'running' },
  'run.cancel_requested': { key: 'cancel_requested', label: 'cancel requested' },
  'attempt.sync_stale': { key: 'unknown', label: 'unknown (evidence went stale)' },
  'attempt.released': { key: 'released', label: 'released to the queue', ends: true },
  'attempt.start_never_received': {
    key: 'released',
    label: 'never received: back to the queue',
    ends: true,
  },
  'attempt.lost': { key: 'lost', label: 'lost', ends: true },
  'run.resolved': { key: 'resolved', label: 'resolved by an operator' },
  'attempt.succeeded': { key: 'ended', label: 'ended: succeeded', ends: true },
  'attempt.failed': { key: 'ended', label: 'ended: failed', ends: true },
  'attempt.cancelled': { key: 'ended', label: 'ended: cancelled', ends: true },
  'attempt.timed_out': { key: 'ended', label: 'ended: timed out', ends: true },
};

// The attempt record's times, for a step whose event is not in the log read.
const FIELD_STEPS = [
  ['claim_time', 'claimed', 'claimed'],
  ['start_request_time', 'fenced', 'start requested (fence)'],
  ['start_time', 'running', 'running'],
  ['cancel_request_time', 'cancel_requested', 'cancel requested'],
  ['finish_time', 'ended', 'ended'],
];

export function actorText(actor = {}) {
  const type = enumName(actor.type, 'ACTOR_TYPE') || 'unknown';
  return actor.id ? `${type}:${actor.id}` : type;
}

function evidenceOf(event) {
  const p = event.payload || {};
  const parts = [`event #${event.sequence} ${event.type}`, `by ${actorText(event.actor)}`];
  if (p.seq !== undefined) parts.push(`runtime seq ${p.seq}`);
  if (event.type === 'attempt.start_requested') parts.push("the server's fence");
  if (p.source === 'start_result') parts.push("the runtime's answer to Start");
  if (p.reason) parts.push(`reason: ${p.reason}`);
  if (p.exit_code !== undefined) parts.push(`exit code ${p.exit_code}`);
  return parts.join(' · ');
}

// Pure: the steps of `attempt` from the run's `events` (any order), oldest first.
export function attemptSteps(attempt, events) {
  const steps = events
    .filter((e) => e.attempt_id === attempt.id && STEP_OF[e.type])
    .sort((a, b) => Number(a.sequence) - Number(b.sequence))
    .map((e) => ({ ...STEP_OF[e.type], time: e.create_time, evidence: evidenceOf(e), sequence: Number(e.sequence) }));
  const seen = new Set(steps.map((s) => s.key));
  for (const [field, key, label] of FIELD_STEPS) {
    if (attempt[field] && !seen.has(key)) {
      steps.push({ key, label, time: attempt[field], evidence: `attempt record: ${field}`, ends: key === 'ended' });
    }
  }
  steps.sort((a, b) => Date.parse(a.time) - Date.parse(b.time) || (a.sequence || 0) - (b.sequence || 0));
  return steps;
}

export function attemptEnded(attempt) {
  return ENDED.has(enumName(attempt.status, 'ATTEMPT_STATUS'));
}

// The steps as an ordered list; the last step of a live attempt counts on ("for 12 s so far").
export function renderSteps(attempt, events) {
  const steps = attemptSteps(attempt, events);
  const live = !attemptEnded(attempt);
  const items = steps.map((step, i) => {
    const next = steps[i + 1];
    let duration = null;
    if (next) duration = h('span', { class: 'step-duration' }, `${durationText(between(step.time, next.time))} to ${next.label}`);
    else if (live && !step.ends) duration = h('span', { class: 'step-duration' }, span(step.time, { prefix: 'for ' }), ' so far');
    return h(
      'li',
      { class: 'step', dataset: { step: step.key } },
      h('span', { class: 'step-label' }, step.label),
      ' ',
      timeEl(step.time),
      duration ? [' · ', duration] : null,
      h('div', { class: 'step-evidence muted' }, step.evidence),
    );
  });
  return h('ol', { class: 'steps', 'aria-label': `Timeline of attempt #${attempt.attempt_no}` }, items);
}
