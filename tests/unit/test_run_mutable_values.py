"""An update writes RUN_MUTABLE from ``run_mutable_values``: the same values, in the same order,
as the full row an insert writes, for runs in every state a run takes."""

from __future__ import annotations

import itertools

from coordinator.domain import commands as c
from coordinator.domain.decide import Context, decide
from coordinator.domain.model import Run
from coordinator.store.rows import RUN_MUTABLE, run_mutable_values, run_values
from tests.support.factories import RUNTIME, SCHEDULER, USER, spec

_ids = itertools.count(1)


def ctx() -> Context:
    return Context(1_000, lambda: f"id-{next(_ids):04d}", lambda: "token")


def lifecycle() -> list[Run]:
    created = decide(c.CreateRun(spec()), None, None, ctx())
    runs, run, attempt = [created.run], created.run, created.attempt
    assert attempt is not None
    commands = [
        c.Claim(run.id, SCHEDULER, runtime_instance_id="inst"),
        c.StartFence(run.id, SCHEDULER, callback_token_hash="h"),
        c.RequestCancel(run.id, USER, reason="stop"),
    ]
    for command in commands:
        d = decide(command, run, attempt, ctx())
        run, attempt = d.run, d.attempt or attempt
        runs.append(run)
    result = c.RuntimeResult(
        run.id, attempt.id, attempt.runtime_task_id, 1, RUNTIME, outcome=c.RuntimeOutcome.FAILED
    )
    runs.append(decide(result, run, attempt, ctx()).run)
    return runs


def test_mutable_values_are_the_rows_mutable_columns() -> None:
    for run in lifecycle():
        row = run_values(run)
        assert run_mutable_values(run) == [row[column] for column in RUN_MUTABLE]
