"""The one way to change state: read -> decide -> compare-and-set + append, in one transaction.

Every service (the RunService API, the capacity claim, runtime ingest, the reconciler) calls
``Transitions``; nothing else writes. It holds the store privately and offers every write
the services need: one command (``execute``, ``create``), commands inside a transaction the
caller opened through it (``transaction`` + ``execute_in``), a batch the caller decided on
state it read (``apply_batch``, runtime ingest), and the rows beside the state machine
(leases, runtime lineage and bindings, output retention). Readers get ``reader``, the
store's read-only face (``RunReader``). scripts/architecture.py checks that no other
module calls a store write.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager, asynccontextmanager

from opentelemetry.trace import Span

from coordinator.domain import commands as c
from coordinator.domain.decide import Context, Decision, RunWrite, chain, decide
from coordinator.domain.output import DEFAULT_OUTPUT_POLICY, OutputPolicy
from coordinator.domain.states import ScopePolicy
from coordinator.service.door_answers import KeyLookup, already_approved, keyed_answer
from coordinator.service.door_calls import describe, through_door
from coordinator.service.door_rows import RowsBeside
from coordinator.service.door_tx import DEDUPLICATED, DoorTx, Result
from coordinator.service.group_commit import WRITERS, GroupCommit
from coordinator.store.base import (
    CasMiss,
    DedupeKeyTaken,
    GrantTaken,
    IdempotencyKeyTaken,
    RequestRecord,
    RunReader,
    RunStore,
)
from coordinator.store.snapshots import Snapshot, run_snapshot
from kernel.errors import (
    ExecutionScopeBusy,
    IdempotencyKeyConflict,
    RunNotFound,
    VersionConflict,
)
from kernel.ids import new_token, now_ms, uuid7
from kernel.records import replace
from kernel.telemetry import current_traceparent

__all__ = ["DEDUPLICATED", "DoorTx", "Result", "Transitions"]


class Transitions(RowsBeside):
    def __init__(
        self,
        store: RunStore,
        clock: Callable[[], int] = now_ms,
        new_id: Callable[[], str] = uuid7,
        token: Callable[[], str] = lambda: new_token("ls"),
        max_retries: int = 16,
        on_commit: Callable[[Result], None] | None = None,
        on_conflict: Callable[[str], None] | None = None,
        output: OutputPolicy = DEFAULT_OUTPUT_POLICY,
        on_timed: Callable[[str, float], None] | None = None,
        create_group: int = 64,
        create_writers: int = WRITERS,
    ) -> None:
        """``on_timed(command, seconds)``: each command's time through the door (a latency
        histogram), refused or conflicted ones too. ``create_group``: at most this many
        concurrent plain creates share one store write, and ``create_writers`` such writes are in
        flight at once (group_commit.py)."""
        self._store = store
        self._creates = GroupCommit(
            lambda decision, request: store.apply(decision, None, request),
            lambda members: store.apply_creates(members),
            create_group,
            create_writers,
        )
        self._output = output
        self._clock = clock
        self._new_id = new_id
        self._token = token
        self._max_retries = max_retries
        self._on_commit = on_commit
        self._on_conflict = on_conflict
        self._on_timed = on_timed

    @property
    def creates_waiting(self) -> int:
        """Plain creates queued for the next group write (tests watch a group form)."""
        return self._creates.waiting

    @property
    def reader(self) -> RunReader:
        """The store's read-only face, for the callers that read around a write."""
        return self._store

    def context(self) -> Context:
        """The clock and id sources decisions are made with (for batch callers)."""
        return self._context()

    def _context(self) -> Context:
        return Context(
            now_ms=self._clock(), new_id=self._new_id, new_token=self._token, output=self._output
        )

    async def create(
        self,
        spec: c.RunSpec,
        use_existing: bool = True,
        request: RequestRecord | None = None,
        *,
        keyed: KeyLookup | None = None,
    ) -> Result:
        """Create a run; a known (project, idempotency key) follows the conflict policy, and
        another request under it is IDEMPOTENCY_KEY_REUSED. ``keyed``: what the caller's own
        ``find_by_idempotency_key`` of the key just found (CreateRuns checks every item's
        key before it creates any), so it is not read twice."""
        with self._door("CreateRun", project=spec.project_id) as current:
            if not spec.trace_parent:
                spec = replace(spec, trace_parent=current_traceparent())
            result = await self._create(spec, use_existing, request, keyed)
            describe(current, result)
            return result

    async def _create(
        self,
        spec: c.RunSpec,
        use_existing: bool,
        request: RequestRecord | None,
        keyed: KeyLookup | None = None,
    ) -> Result:
        if spec.idempotency_key:
            if keyed is not None:
                existing = keyed.found
            else:
                existing = await self._store.find_by_idempotency_key(
                    spec.project_id, spec.idempotency_key
                )
            if existing is not None:
                return keyed_answer(existing, use_existing, spec)
        decision = decide(c.CreateRun(spec), None, None, self._context())
        try:
            if spec.execution_scope and spec.scope_policy is not ScopePolicy.QUEUE:
                return await self._create_in_scope(spec, decision, request)
            # Grouped with concurrent creates; raises what a lone write would (group_commit).
            applied = await self._creates.write(decision, request)
        except IdempotencyKeyTaken:
            assert spec.idempotency_key is not None
            existing = await self._store.find_by_idempotency_key(
                spec.project_id, spec.idempotency_key
            )
            assert existing is not None, "the key was taken by a committed run"
            return keyed_answer(existing, use_existing, spec)
        return self._committed(
            Result(decision.outcome.value, applied.run, applied.attempt, applied.events)
        )

    async def _create_in_scope(
        self, spec: c.RunSpec, decision: Decision, request: RequestRecord | None
    ) -> Result:
        """The scope collision policy, decided under the scope's lock: ``reject_new`` refuses
        the run while another one in the scope is not finished; ``cancel_in_progress`` asks
        every such run to cancel (the durable cancel path), and the new run then waits in the
        queue until the scope is free."""
        scope = spec.execution_scope
        assert scope is not None
        cancels: list[Result] = []
        async with self.transaction([f"scope:{scope}"]) as tx:
            open_runs = await tx.open_runs_in_scope(scope)
            if open_runs and spec.scope_policy is ScopePolicy.REJECT_NEW:
                raise ExecutionScopeBusy(
                    f"execution scope {scope!r} already has run {open_runs[0]}",
                    scope=scope,
                    run_id=open_runs[0],
                )
            for run_id in open_runs:
                cancel = c.RequestCancel(run_id, spec.created_by, reason="superseded_in_scope")
                cancels.append(await self.execute_in(tx, cancel))
            applied = await tx._tx.apply(decision)
            if request is not None:
                await tx._tx.put_request(request, run_snapshot(applied.run, applied.attempt))
        self.published(cancels)
        return self._committed(
            Result(decision.outcome.value, applied.run, applied.attempt, applied.events)
        )

    async def execute(
        self,
        command: c.RunCommand | c.RuntimeCommand,
        request: RequestRecord | None = None,
    ) -> Result:
        """Apply one command. With an expected version a lost race is RUN_VERSION_CONFLICT;
        without one, the command is decided again on the fresh state (bounded)."""
        with self._door_of(command) as current:
            result = await self._execute(command, request)
            describe(current, result)
            return result

    async def _execute(
        self, command: c.RunCommand | c.RuntimeCommand, request: RequestRecord | None
    ) -> Result:
        dedupe_key = command.dedupe_key if isinstance(command, c.RunCommand) else None
        attempt_id = command.attempt_id if isinstance(command, c.RuntimeCommand) else None
        pinned_version = isinstance(command, c.RunCommand) and command.expected_version is not None
        for _ in range(self._max_retries):
            loaded = await self._store.load(command.run_id, attempt_id, dedupe_key)
            if loaded is None:
                raise RunNotFound(f"run {command.run_id} does not exist", run_id=command.run_id)
            if loaded.dedupe_hit:
                return Result(DEDUPLICATED, loaded.run, loaded.attempt)
            decision = decide(command, loaded.run, loaded.attempt, self._context())
            if decision.run_write is RunWrite.NONE:
                return Result(decision.outcome.value, decision.run, decision.attempt)
            try:
                applied = await self._store.apply(decision, dedupe_key, request)
            except CasMiss:
                if self._on_conflict is not None:
                    self._on_conflict(type(command).__name__)
                if pinned_version:
                    raise VersionConflict(
                        f"run {command.run_id} changed since version "
                        f"{getattr(command, 'expected_version', None)}",
                        run_id=command.run_id,
                    ) from None
                continue
            except DedupeKeyTaken:
                continue
            except GrantTaken:
                raise already_approved(decision) from None
            return self._committed(
                Result(
                    decision.outcome.value,
                    applied.run,
                    applied.attempt,
                    applied.events,
                    from_status=loaded.run.status.value,
                )
            )
        raise VersionConflict(
            f"run {command.run_id} kept changing; gave up after {self._max_retries} tries",
            run_id=command.run_id,
        )

    def transaction(self, lock_keys: Sequence[str]) -> AbstractAsyncContextManager[DoorTx]:
        """One transaction that first takes the named locks, in the order given, for callers
        that read and lock before they decide (recovery, operator commands, the claim, the
        reconciler's scans). Write in it with ``execute_in``; once it has committed, hand
        the results to ``published``."""
        return self._transaction(lock_keys)

    @asynccontextmanager
    async def _transaction(self, lock_keys: Sequence[str]) -> AsyncIterator[DoorTx]:
        async with self._store.transaction(lock_keys) as tx:
            yield DoorTx(tx)

    async def execute_in(self, tx: DoorTx, command: c.RunCommand | c.RuntimeCommand) -> Result:
        """Apply one command inside a caller's transaction (a batch). Nothing is retried: a
        conflict raises and the caller's whole transaction rolls back. Call ``published``
        with the results once the transaction has committed."""
        with self._door_of(command) as current:
            result = await self._execute_in(tx, command)
            describe(current, result)
            return result

    async def _execute_in(self, tx: DoorTx, command: c.RunCommand | c.RuntimeCommand) -> Result:
        attempt_id = command.attempt_id if isinstance(command, c.RuntimeCommand) else None
        loaded = await tx.load(command.run_id, attempt_id)
        if loaded is None:
            raise RunNotFound(f"run {command.run_id} does not exist", run_id=command.run_id)
        decision = decide(command, loaded.run, loaded.attempt, self._context())
        if decision.run_write is RunWrite.NONE:
            return Result(decision.outcome.value, decision.run, decision.attempt)
        try:
            applied = await tx._tx.apply(decision)
        except CasMiss:
            raise VersionConflict(
                f"run {command.run_id} changed inside a locked batch", run_id=command.run_id
            ) from None
        except GrantTaken:
            raise already_approved(decision) from None
        return Result(
            decision.outcome.value,
            applied.run,
            applied.attempt,
            applied.events,
            from_status=loaded.run.status.value,
        )

    async def execute_chains_in(
        self, tx: DoorTx, chains: Sequence[Sequence[c.RunCommand]], label: str
    ) -> list[Result]:
        """Commands on distinct runs in a caller's transaction, one read and one write for
        all (a claim round claims and fences every run it picked: seed A §11's batch CAS),
        each run's commands decided in turn and folded into one write (``chain``). A refusal
        or conflict rolls the whole transaction back; ``published`` after commit."""
        with self._door(label):
            loaded = await tx.load_runs([commands[0].run_id for commands in chains])
            ctx = self._context()
            decisions: list[Decision] = []
            for commands in chains:
                run_id = commands[0].run_id
                if (item := loaded.get(run_id)) is None:
                    raise RunNotFound(f"run {run_id} does not exist", run_id=run_id)
                steps: list[Decision] = []
                run, attempt = item.run, item.attempt
                for command in commands:
                    steps.append(step := decide(command, run, attempt, ctx))
                    run, attempt = step.run, step.attempt or attempt
                decisions.append(chain(steps))
            try:
                applied = await tx._tx.apply_many(decisions)
            except CasMiss:
                raise VersionConflict("a run of the batch changed inside a locked batch") from None
            befores = [loaded[commands[0].run_id].run.status.value for commands in chains]
            return [
                Result(d.outcome.value, a.run, a.attempt, a.events, from_status=before)
                for d, a, before in zip(decisions, applied, befores, strict=True)
            ]

    async def create_in(self, tx: DoorTx, spec: c.RunSpec) -> Result:
        """Create a run inside a caller's transaction, beside the caller's own rows (a
        schedule's fire advances the schedule in the same commit). A run already holding
        ``spec.idempotency_key`` is returned (``existing``); a twin committing the key first
        raises ``IdempotencyKeyConflict`` and the caller's whole transaction rolls back (its
        retry then finds the twin's run). Only the ``queue`` scope policy is allowed here:
        the others decide under the scope's lock first. Call ``published`` after commit."""
        if spec.execution_scope and spec.scope_policy is not ScopePolicy.QUEUE:
            raise ValueError("create_in takes only the queue scope policy")
        with self._door("CreateRun", project=spec.project_id) as current:
            if not spec.trace_parent:
                spec = replace(spec, trace_parent=current_traceparent())
            if spec.idempotency_key:
                existing = await tx.find_by_idempotency_key(spec.project_id, spec.idempotency_key)
                if existing is not None:
                    return keyed_answer(existing, use_existing=True)
            decision = decide(c.CreateRun(spec), None, None, self._context())
            try:
                applied = await tx._tx.apply(decision)
            except IdempotencyKeyTaken:
                raise IdempotencyKeyConflict(
                    f"a concurrent transaction created the run of {spec.idempotency_key!r}"
                ) from None
            result = Result(decision.outcome.value, applied.run, applied.attempt, applied.events)
            describe(current, result)
            return result

    async def record_request_in(
        self, tx: DoorTx, request: RequestRecord, snapshot: Snapshot
    ) -> None:
        """Keep the AIP-155 record in the caller's transaction, beside the change it answers,
        with ``snapshot``: what the transaction committed, as a JSON object (for a run,
        ``coordinator.store.snapshots.run_snapshot``). The API renders the answer from it
        once committed (RequestIdTaken if a twin committed first)."""
        await tx._tx.put_request(request, snapshot)

    async def apply_batch(
        self, decisions: Sequence[Decision], from_statuses: Sequence[str]
    ) -> list[Result] | None:
        """Decisions on different runs that the caller made (``decide``, with ``context()``)
        on state it read through ``reader``, each run's ``from_statuses`` beside it: runtime
        ingest's micro-batch. Written in one transaction, all or nothing, and published.
        ``None`` when another writer moved one of the runs since it was read: nothing was
        written, and the caller decides again on fresh state (``execute``)."""
        try:
            applied = await self._store.apply_all(decisions)
        except (CasMiss, DedupeKeyTaken):
            return None
        results = [
            Result(d.outcome.value, a.run, a.attempt, a.events, from_status=before)
            for d, a, before in zip(decisions, applied, from_statuses, strict=True)
        ]
        self.published(results)
        return results

    def published(self, results: Sequence[Result]) -> None:
        for result in results:
            self._committed(result)

    def _committed(self, result: Result) -> Result:
        if self._on_commit is not None:
            self._on_commit(result)
        return result

    def _door_of(self, command: c.RunCommand | c.RuntimeCommand) -> AbstractContextManager[Span]:
        attempt_id = command.attempt_id if isinstance(command, c.RuntimeCommand) else None
        return self._door(type(command).__name__, run_id=command.run_id, attempt_id=attempt_id)

    def _door(
        self, command: str, *, run_id: str = "", attempt_id: str | None = None, project: str = ""
    ) -> AbstractContextManager[Span]:
        return through_door(command, self._on_timed, run_id, attempt_id or "", project)
