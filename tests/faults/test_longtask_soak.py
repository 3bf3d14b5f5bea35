"""A randomized long-task soak (issue #13's "Must show"): long tasks of one to three declared
steps of every side-effect class, run by two reference agents through `truerun dev` and a
reconciler on PostgreSQL, while a seeded chaos loop SIGKILLs every kind of process (the
server, the reconciler, an agent, an agent's running attempts) and starts it again.

The work is spread over the kills: every task is created up front (planned), and after each
kill a batch of them is started, so every kill lands among freshly started tasks and the
number of kills does not depend on the machine's speed. The chaos draws its targets from a
seeded, shuffled deck holding each target once, so every kind of process dies at least once
in every six kills. Sizes: ``TRUERUN_LONG_TASK_SOAK_TASKS`` tasks (120) over
``TRUERUN_LONG_TASK_SOAK_KILLS`` kills (24): about a minute here; the full soak is
``TRUERUN_LONG_TASK_SOAK_TASKS=300 TRUERUN_LONG_TASK_SOAK_KILLS=72``.

A person stands by, as the seed has one: an ``effect`` question (an uncertain
non-idempotent step) is answered from the outside world, the fixture's own record (done when
the effect is there, retry when it is not), and a task in ``recovery_required`` is looked at
and cleared. Nothing else is answered for the tasks.

At the end, from the fixture and the public API: every task is terminal with a reason in
words; no non-idempotent effect happened twice (0 duplicate effects); no task is
``completed`` without every effect step's effect in the fixture and every file step's file
on disk (0 false completed); the figures are printed. ``TRUERUN_SOAK_SEED`` replays the
choices.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import grpc
import pytest
from truerun.v1 import long_task_service_pb2 as pb

from tests.faults.harness import Cluster, Service
from tests.faults.longtask_api import TERMINAL, open_decisions, state
from tests.faults.longtask_world import RETRYABLE, World, world

pytestmark = pytest.mark.timeout(600)
TASKS = int(os.environ.get("TRUERUN_LONG_TASK_SOAK_TASKS", "120"))
KILLS = int(os.environ.get("TRUERUN_LONG_TASK_SOAK_KILLS", "24"))
AGENTS, LIMIT = 2, 4
KILL_GAP_S = (0.4, 1.5)
DOWN_S = (0.1, 0.6)
DRAIN_S = 420.0
KINDS = ("file", "idempotent", "queryable", "non_idempotent")


def _seed() -> int | None:
    raw = os.environ.get("TRUERUN_SOAK_SEED") or os.environ.get("TRUERUN_FAULTS_SEED") or ""
    return int(raw) if raw else None


def _plan(w: World, n: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, str]]:
    """Steps, criteria and, per step, what it leaves behind (``key:<k>`` or ``file:<path>``)."""
    rng = w.cluster.random
    steps, criteria, marks = [], [], {}
    for i in range(rng.randint(1, 3)):
        kind, step_id = rng.choice(KINDS), f"s{i}"
        pause = rng.choice(("0", "0.05", "0.2", "0.5"))
        if kind == "file":
            path = w.tmp / "files" / f"t{n}-{step_id}.txt"
            steps.append(w.file_step(step_id, path, f"sleep {pause}"))
            criteria.append(w.file_exists(f"c{i}", path))
            marks[step_id] = f"file:{path}"
        else:
            key = f"t{n}-{step_id}"
            steps.append(w.effect_step(step_id, kind, key, before=f"sleep {pause}"))
            criteria.append(w.step_done(f"c{i}", step_id))
            marks[step_id] = f"{kind}:{key}"
    return steps, criteria, marks


def _extend(into: list[pb.LongTask], read: Callable[[], list[pb.LongTask]]) -> None:
    into.extend(read())


class Person:
    """Answers what only a person may, from the outside world's record."""

    def __init__(self, w: World) -> None:
        self.w = w
        self.answers: Counter[str] = Counter()

    def look(self, task_id: str) -> None:
        task = self.w.tasks.get(task_id)
        if state(task) == "recovery_required":
            self.w.tasks.clear_recovery(task_id)
            self.answers["cleared recovery"] += 1
            return
        for decision in open_decisions(task):
            if decision.kind == "effect":
                key = str(decision.material["target"]).removeprefix("chat:")
                answer = "done" if self.w.effects(key) else "retry"
            elif decision.kind == "approval":
                answer = "grant"
            else:
                continue  # nothing else is asked in this soak; the task then ends waiting
            self.w.tasks.answer(task_id, decision.decision_id, answer, note="checked the channel")
            self.answers[f"{decision.kind}: {answer}"] += 1


class Chaos(threading.Thread):
    """``KILLS`` kills, one every 0.4-1.5 s, each target drawn from a shuffled deck; after each
    kill the next batch of planned tasks is started (``feed``)."""

    def __init__(self, w: World, stop: threading.Event, feed: Feed) -> None:
        super().__init__(daemon=True)
        self.w, self.stop, self.feed, self.kills = w, stop, feed, Counter[str]()
        self.failure: BaseException | None = None
        self.ended = 0.0

    def run(self) -> None:
        try:
            self._run()
        except BaseException as error:  # the main thread reports it
            self.failure = error

    def _run(self) -> None:
        c = self.w.cluster
        rng = c.random
        assert c.server is not None and c.reconciler is not None
        targets: list[Service | str] = [c.server, c.reconciler, *c.agents(), "attempts", "attempts"]
        deck: list[Service | str] = []
        while self.kills.total() < KILLS and not self.stop.wait(rng.uniform(*KILL_GAP_S)):
            if not deck:
                deck = rng.sample(targets, len(targets))
            target = deck.pop()
            if target == "attempts":
                if not self._attempts_running():
                    continue  # nothing left to run: the card is spent, nothing died
                if self.w.kill_attempts():
                    self.kills["attempts"] += 1
            else:
                assert isinstance(target, Service)
                c.kill(target)
                self.kills[target.kind] += 1
                time.sleep(rng.uniform(*DOWN_S))
                c.restart(target)
            self.feed()
        self.feed(everything=True)  # what is left starts after the last kill, without chaos
        self.ended = time.monotonic()

    def _attempts_running(self) -> bool:
        """Wait a little for an attempt's process (the batch may be between steps); when the
        batch has finished already, start the next one early."""
        for _ in range(2):
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                if self.w.command_groups():
                    return True
                time.sleep(0.05)
            if not self.feed():
                return False
        return False


class Feed(Protocol):
    def __call__(self, everything: bool = False) -> bool: ...


def _starter(w: World, planned: list[str]) -> Feed:
    """Start the next batch of planned tasks (``everything``: all that are left); False when
    none was left. A process just killed may answer UNAVAILABLE: tried again; a task started
    by an answer lost to a kill is left as it is. A fifth of the batches are spare, for an
    attempts card drawn when the batch has finished already."""
    batch = -(-len(planned) // max(1, KILLS + KILLS // 4))
    left = list(planned)

    def feed(everything: bool = False) -> bool:
        if not left:
            return False
        taking = len(left) if everything else batch
        for task_id in left[:taking]:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    if state(w.tasks.get(task_id)) == "planned":
                        w.tasks.start(task_id)
                    break
                except grpc.RpcError as error:
                    if error.code() not in RETRYABLE:
                        raise
                    time.sleep(0.1)
            else:
                raise AssertionError(f"{task_id} could not be started within 60 s")
        del left[:taking]
        return True

    return feed


def test_long_task_soak(make_cluster: Callable[..., Cluster], tmp_path: Path) -> None:
    cluster = make_cluster(
        seed=_seed(),
        long_task_owner_concurrency=AGENTS * LIMIT,
        long_task_owner_max_unfinished=TASKS,  # all of them are created up front
    )
    print(f"long-task soak seed={cluster.seed} (replay: TRUERUN_SOAK_SEED={cluster.seed})")
    with world(cluster, tmp_path, agents=AGENTS, limit=LIMIT) as w:
        (tmp_path / "files").mkdir()
        plans, began = {}, time.monotonic()
        for n in range(TASKS):
            steps, criteria, marks = _plan(w, n)
            plans[w.create(f"soak-{n}", steps, criteria, start=False)] = marks
        person, stop = Person(w), threading.Event()
        feed = _starter(w, list(plans))
        feed()  # the first batch starts before the first kill
        chaos = Chaos(w, stop, feed)
        chaos.start()
        created = time.monotonic()
        deadline = time.monotonic() + DRAIN_S
        final: dict[str, pb.LongTask] = {}
        try:
            while len(final) < len(plans) and time.monotonic() < deadline:
                listed: list[pb.LongTask] = []
                w.call(_extend, listed, w.tasks.list_all)
                for task in listed:
                    if state(task) in TERMINAL:
                        final[task.long_task_id] = task
                    elif state(task) in (
                        "waiting_for_user",
                        "recovery_required",
                        "waiting_for_approval",
                    ):
                        w.call(person.look, task.long_task_id)
                assert chaos.failure is None, chaos.failure
                time.sleep(0.3)
        finally:
            stop.set()
            chaos.join(30)
        drained = time.monotonic()
        print(
            f"long-task soak times: created {created - began:.1f}s, chaos "
            f"{chaos.ended - created:.1f}s, drained {drained - max(chaos.ended, created):.1f}s"
        )
        left = {t: state(w.tasks.get(t)) for t in plans if t not in final}
        for task_id in left:
            task = w.tasks.get(task_id)
            print(
                task_id,
                state(task),
                task.state_reason,
                [(d.kind, d.state, d.question) for d in task.decisions],
            )
        assert not left, (
            f"not terminal within {DRAIN_S}s: {Counter(left.values())} {cluster.describe()}"
        )

        states = Counter(state(t) for t in final.values())
        duplicates, false_completed, effects = 0, [], 0
        for task_id, marks in plans.items():
            task = final[task_id]
            assert task.state_reason, f"{task_id} ends {state(task)} without a reason"
            missing = []
            for mark in marks.values():
                kind, _, what = mark.partition(":")
                if kind == "file":
                    missing += [] if Path(what).exists() else [mark]
                    continue
                count = w.effects(what)
                effects += count
                duplicates += max(0, count - 1) if kind == "non_idempotent" else 0
                missing += [] if count else [mark]
            if state(task) == "completed" and missing:
                false_completed.append((task_id, missing))
        print(
            f"long-task soak: {len(plans)} tasks, final {dict(states)}, kills {dict(chaos.kills)},"
            f" answers {dict(person.answers)}, effects {effects},"
            f" duplicate non-idempotent effects {duplicates},"
            f" false completed {len(false_completed)}"
        )
        assert duplicates == 0
        assert not false_completed, false_completed
        assert chaos.failure is None, chaos.failure
        assert chaos.kills.total() == KILLS, chaos.kills  # every kill landed among live tasks
        if KILLS >= 6:  # a whole deck: every kind of process died
            assert len(chaos.kills) == 4, chaos.kills
