"""The legal transition tables, as data (seed B §6.2 and §7.2, extended by truerun).

truerun's extensions to seed B, each with its reason:
- ``pending_approval`` precedes ``queued`` (seed A's approval gate); ``created`` is not a
  resting state: a run is inserted directly as ``queued`` or ``pending_approval``.
- ``dispatching -> queued``: a claim released before the start fence, or a runtime's explicit
  rejection before start, provably never started anything (seed A §9).
- ``dispatching -> succeeded | timed_out`` and ``starting -> succeeded``: a runtime may report
  the result of a short task before truerun saw it running; the result is evidence enough.
- ``waiting_approval -> lost``: the runtime can vanish while a run waits for a person.
- attempts have a ``queued`` state: an attempt row exists from the moment its run is queued, and
  ``claimed -> queued`` / ``starting -> queued`` reuse the same row (same attempt_no).
- operator escape hatches (docs/state-model.md "Operator commands"), each an audited command:
  ``queued <-> paused`` (a paused run is never claimed), ``queued | paused | dead_letter ->
  failed`` (fail a run that never started), ``lost -> succeeded`` (resolve a lost attempt as
  succeeded), ``dead_letter -> queued`` (requeue).
- ``dead_letter``: after too many recoveries of one run (expired claims requeued, lost
  attempts retried) the next recovery parks the run here instead (``dispatching`` or ``lost``
  ``-> dead_letter``); only an operator moves it on.
"""

from __future__ import annotations

from coordinator.domain.states import AttemptStatus as A
from coordinator.domain.states import RunStatus as R

RUN_TRANSITIONS: dict[R, frozenset[R]] = {
    R.PENDING_APPROVAL: frozenset({R.QUEUED, R.CANCELLED}),
    R.QUEUED: frozenset({R.DISPATCHING, R.CANCELLED, R.TIMED_OUT, R.PAUSED, R.FAILED}),
    R.DISPATCHING: frozenset(
        {
            R.QUEUED,
            R.RUNNING,
            R.RETRY_WAIT,
            R.SUCCEEDED,
            R.FAILED,
            R.CANCELLED,
            R.TIMED_OUT,
            R.LOST,
            R.DEAD_LETTER,
        }
    ),
    R.RUNNING: frozenset(
        {R.WAITING_APPROVAL, R.RETRY_WAIT, R.SUCCEEDED, R.FAILED, R.CANCELLED, R.TIMED_OUT, R.LOST}
    ),
    R.WAITING_APPROVAL: frozenset({R.RUNNING, R.CANCELLED, R.TIMED_OUT, R.LOST}),
    R.RETRY_WAIT: frozenset({R.QUEUED, R.CANCELLED, R.TIMED_OUT}),
    R.LOST: frozenset({R.QUEUED, R.FAILED, R.CANCELLED, R.SUCCEEDED, R.DEAD_LETTER}),
    R.PAUSED: frozenset({R.QUEUED, R.FAILED, R.CANCELLED}),
    R.DEAD_LETTER: frozenset({R.QUEUED, R.FAILED, R.CANCELLED}),
    R.SUCCEEDED: frozenset(),
    R.FAILED: frozenset(),
    R.CANCELLED: frozenset(),
    R.TIMED_OUT: frozenset(),
}

ATTEMPT_TRANSITIONS: dict[A, frozenset[A]] = {
    A.QUEUED: frozenset({A.CLAIMED, A.CANCELLED}),
    A.CLAIMED: frozenset({A.QUEUED, A.STARTING, A.CANCELLED, A.LOST}),
    A.STARTING: frozenset(
        {A.QUEUED, A.RUNNING, A.SUCCEEDED, A.FAILED, A.CANCELLED, A.TIMED_OUT, A.LOST}
    ),
    A.RUNNING: frozenset({A.SUCCEEDED, A.FAILED, A.CANCELLED, A.TIMED_OUT, A.LOST}),
    A.SUCCEEDED: frozenset(),
    A.FAILED: frozenset(),
    A.CANCELLED: frozenset(),
    A.TIMED_OUT: frozenset(),
    A.LOST: frozenset(),
}


def run_transition_allowed(current: R, target: R) -> bool:
    return current == target or target in RUN_TRANSITIONS[current]


def attempt_transition_allowed(current: A, target: A) -> bool:
    return current == target or target in ATTEMPT_TRANSITIONS[current]
