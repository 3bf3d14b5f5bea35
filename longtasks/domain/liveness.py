"""When a long-task attempt's run has ended, as far as truerun knows (docs/state-model.md):
the run machinery decides a run's status, this module only reads it.

- **Ended**: the run's terminal statuses (``succeeded``, ``failed``, ``cancelled``,
  ``timed_out``), ``lost`` (its runtime could not account for the attempt, or it was
  declared lost by policy: no process of it is known to run; a long-task run is never
  idempotent, so nothing retries it by itself) and ``dead_letter`` (recovered too often;
  its current attempt is released or lost, nothing of it runs until an operator acts).
- **Not ended**: every other status, and in particular a run shown ``unknown`` (fenced, sync
  stale: status ``dispatching`` or ``running``): its process may still be working, so the
  attempt stays open and keeps the lease and the capacity. truerun never guesses; a person
  resolves an unknown run (operator ``resolve``) and its new status decides. A run an
  operator paused before it was claimed (``paused``) runs once resumed: not ended either.

A run put back to ``queued`` by an operator after its long-task attempt ended runs with an
attempt that no longer holds the lease: every step action of it is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.domain.states import RUN_TERMINAL, RunStatus

#: The run statuses that end a long-task attempt.
RUN_ENDED = RUN_TERMINAL | {RunStatus.LOST, RunStatus.DEAD_LETTER}


def run_ended(status: str) -> bool:
    """True when a run in ``status`` can no longer be working on its attempt."""
    return status in {s.value for s in RUN_ENDED}


def ended_reason(status: str, *why: str | None) -> str:
    """The attempt's end in words: the run's status and the reasons the run gave (its error
    code and summary, its cancel reason, its attempt's termination reason), each once and
    none that only repeats the status."""
    seen: list[str] = []
    for reason in why:
        told = (reason or "").strip()
        if told and told != status and told not in seen:
            seen.append(told)
    told = f": {'; '.join(seen)}" if seen else ""
    return f"its run ended {status}{told}"[:1024]


@dataclass(frozen=True, slots=True)
class OpenAttempt:
    """A long-task attempt not ended, beside its run as the run tables show it now."""

    task_id: str
    attempt_id: str
    run_id: str
    run_status: str
    #: What the run said about its end, the empty ones left out: its error code and
    #: summary, its cancel reason, its current attempt's termination reason.
    run_reasons: tuple[str, ...] = ()

    @property
    def run_ended(self) -> bool:
        return run_ended(self.run_status)

    def ended_reason(self) -> str:
        return ended_reason(self.run_status, *self.run_reasons)
