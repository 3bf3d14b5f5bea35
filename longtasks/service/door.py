"""The one door for long-task writes (docs/long-tasks.md "Store and door"). Nothing else
writes the long-task tables: the API's methods and the runtime's step actions map onto the
door's methods one to one, and the recovery watcher re-enters through it.

Every method is one transaction of the shape ``base.py`` describes: opened through the
coordinator's door (``Transitions.transaction``), the task row locked and read, the expected
version compared (a step action: the step's, and the lease of its attempt), the change
decided by the pure rules of ``longtasks.domain``, every row written compare-and-set, the
events appended, one commit. A stale version fails closed with
``LONG_TASK_VERSION_CONFLICT``, a step action from an attempt without the lease with
``LONG_TASK_LEASE_NOT_HELD``, a move the rules refuse with ``INVALID_LONG_TASK_TRANSITION``
or ``INVALID_STEP_TRANSITION`` (the rule's name in the metadata): nothing is written.

Who calls what:
- a person (the API), with the task's etag: ``create``, ``enqueue``, ``pause``, ``resume``,
  ``cancel``, ``clear_recovery`` (tasks.py); ``revise_plan``, ``continue_task``, ``answer``
  (revisions.py);
- the scheduler: ``start_attempt`` (tasks.py; the attempt's run is created in the commit);
- the lease holder, with the step's version: ``begin_step``, ``record_intent``,
  ``record_receipt``, ``record_probe``, ``complete_step``, ``mark_uncertain``,
  ``block_step``, ``fail_step``, ``skip_step`` (steps.py);
- the lease holder, task-level: ``request_decision``, ``request_approval``,
  ``ready_for_verification``, ``record_verification`` (asks.py), ``renew_lease``;
- the watcher of attempts' runs, and process start: ``attempt_ended``,
  ``held_by_the_dead`` (endings.py);
- the lease holder's runtime, its token usage: ``report_usage`` (usage.py; the budget used
  up moves the task to ``partial`` and cancels the run);
- an ordinary run's runtime: ``preflight``, ``record_verdict``, ``promote`` (promotion.py:
  the run becomes a long task whose first attempt it is).
- continuations (continuations.py): the lease holder's ``continue_later``, a person's
  ``schedule_continuation``, the watcher's ``fire_continuation``.

Listeners (``listen``, observed.py) hear every committed change after its commit: the
release metrics.

Every commit also writes the change's notice, if it raises one, into the notices outbox in
the same transaction (``notify.py``; docs/long-tasks.md "Notices"); ``on_notice`` hears its
kind after the commit.
"""

from __future__ import annotations

from longtasks.service.asks import Asks
from longtasks.service.continuations import Continuations
from longtasks.service.endings import Endings
from longtasks.service.observed import Observed
from longtasks.service.promotion import Promotions
from longtasks.service.revisions import Revisions
from longtasks.service.steps import StepActions
from longtasks.service.tasks import TaskCommands
from longtasks.service.usage import Usage


class LongTaskDoor(
    Observed,
    TaskCommands,
    Revisions,
    StepActions,
    Asks,
    Endings,
    Usage,
    Promotions,
    Continuations,
):
    """Every long-task write (built over the coordinator's ``Transitions`` and the
    long-task statements: ``LongTaskDoor(transitions, sql, clock=...)``)."""
