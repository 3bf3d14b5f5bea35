"""Who an attempt's call comes from: the run attempt proven by its callback token (the
secret the coordinator gave the runtime process as TRUERUN_CALLBACK_TOKEN; only its hash is
stored), then the long-task attempt that run carries out. Checked before anything of the
task is read; every failure looks the same from outside (UNAUTHENTICATED), so a caller
learns nothing about which run ids or attempts exist."""

from __future__ import annotations

from collections.abc import Callable

from truerun.v1 import long_task_service_pb2 as pb

from coordinator.api import validation
from coordinator.dispatch.tokens import callback_token_valid
from coordinator.store.base import Loaded, RunReader
from kernel.errors import InvalidArgument, LongTaskNotFound, Unauthenticated
from kernel.ids import now_ms
from longtasks.domain.model import Attempt
from longtasks.service.reads import TaskReads

REFUSED = "the attempt credential (run, run attempt, callback token) is not valid"


class AttemptAuth:
    def __init__(
        self, runs: RunReader, reads: TaskReads, clock: Callable[[], int] = now_ms
    ) -> None:
        self._runs = runs
        self._reads = reads
        self._clock = clock

    async def run_attempt(self, credential: pb.AttemptCredential) -> Loaded:
        """The run and run attempt ``credential`` proves (any run: an ordinary run's
        runtime asks for preflights and promotion with it)."""
        run_id, run_attempt_id = credential.run_id, credential.run_attempt_id
        token = credential.callback_token
        if not (run_id and run_attempt_id and token):
            raise Unauthenticated(REFUSED)
        try:  # ids are UUIDs: anything else names no run (and never reaches a query)
            run_id = validation.run_id(run_id)
            run_attempt_id = validation.run_id(run_attempt_id)
        except InvalidArgument:
            raise Unauthenticated(REFUSED) from None
        loaded = await self._runs.load(run_id, run_attempt_id)
        attempt = loaded.attempt if loaded is not None else None
        if attempt is None or attempt.id != run_attempt_id or attempt.run_id != run_id:
            raise Unauthenticated(REFUSED)
        stored, expires = attempt.callback_token_hash, attempt.callback_token_expires_at_ms
        if not callback_token_valid(token, stored, expires, self._clock()):
            raise Unauthenticated(REFUSED)
        assert loaded is not None
        return loaded

    async def attempt(self, credential: pb.AttemptCredential) -> Attempt:
        """The long-task attempt whose run's attempt ``credential`` proves; the door then
        checks that this attempt holds the task's lease."""
        run_id = (await self.run_attempt(credential)).run.id
        mine = await self._reads.attempt_of_run(run_id)
        if mine is None:
            raise LongTaskNotFound(f"run {run_id} is no attempt of a long task", run_id=run_id)
        return mine
