"""What the scenario tests check on top of the harness: a background monitor that polls every
run's display state and holds each answer against the side-effect log (the truth outside
truerun), and the end-of-test figures (starts per attempt, overlaps, concurrency per agent).

The display must be truthful at every poll:
- ``succeeded`` only once the command's end line (exit 0) is in the log;
- ``running`` never for a command whose end line (or, without one, its disappearance from
  the process table) is older than a lease plus a margin (a dead process is never shown
  running for long);
- ``queued`` never for an attempt whose command already started (a started attempt is never
  put back in the queue);
- an ``unknown`` attempt still holds its slot: its runtime task id is in its instance's
  occupancy while it stays unknown;
- a terminal display never changes;
- a fresh observation's occupancy never exceeds D.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import grpc
from truerun.v1 import capacity_service_pb2, common_pb2, run_service_pb2

from tests.faults.harness import (
    PROJECT,
    TERMINAL,
    Cluster,
    Service,
    Span,
    display,
    gapless,
    overlaps,
    starts_per_attempt,
)
from tests.support.processes import live_process

FINAL = (*TERMINAL, "lost")
_RUNTIME_ONLY = {
    "attempt.accepted",
    "attempt.output_progressed",
    "attempt.output_truncated",
    "attempt.signalled",
}


@dataclass
class Seen:
    """One run as one poll saw it."""

    at: float  # time.time() when the answer arrived (the side-effect log's clock)
    display: str
    reason: str
    attempt_id: str
    instance_id: str
    task_id: str


@dataclass
class Figures:
    runs: int = 0
    polls: int = 0
    final: dict[str, int] = field(default_factory=dict)
    starts: int = 0
    max_starts_per_attempt: int = 0
    overlapping_runs: int = 0
    max_concurrent: dict[str, int] = field(default_factory=dict)
    max_occupied: dict[str, int] = field(default_factory=dict)
    unknown_seen: int = 0
    gapless_runs: int = 0
    max_running_after_end_s: float = 0.0

    def render(self, title: str) -> str:
        return (
            f"{title}: runs={self.runs} final={dict(sorted(self.final.items()))} "
            f"real starts={self.starts} max starts/attempt={self.max_starts_per_attempt} "
            f"overlapping runs={self.overlapping_runs} "
            f"max concurrent per agent (log)={self.max_concurrent} "
            f"max occupied per agent (API)={self.max_occupied} "
            f"runs seen unknown={self.unknown_seen} gapless event sequences="
            f"{self.gapless_runs}/{self.runs} polls={self.polls} longest shown running after "
            f"the command ended={self.max_running_after_end_s:.1f}s"
        )


class Monitor:
    """Polls ListRuns (every run of the project) and the occupancy of every agent in a
    thread of its own; records violations instead of raising, so the test reports them all."""

    def __init__(
        self,
        cluster: Cluster,
        limits: dict[str, int],
        lease_ttl_ms: int,
        interval_s: float = 0.15,
        running_margin_s: float = 8.0,
    ) -> None:
        self.cluster = cluster
        self.limits = limits
        self.interval_s = interval_s
        self.dead_running_after_s = lease_ttl_ms / 1000 + running_margin_s
        self.history: dict[str, list[Seen]] = {}
        self.violations: list[str] = []
        self.max_occupied: dict[str, int] = dict.fromkeys(limits, 0)
        self.polls = 0
        #: The longest a run was shown running after its command's end line (seconds).
        self.max_dead_running_s = 0.0
        #: (attempt, pid) of a command found gone from the process table -> when.
        self._dead_since: dict[tuple[str, int], float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="truth-monitor", daemon=True)

    def __enter__(self) -> Monitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _loop(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(grpc.RpcError):  # the server may be down: next round
                self.poll()
            self._stop.wait(self.interval_s)

    def _list(self) -> list[common_pb2.Run]:
        runs: list[common_pb2.Run] = []
        token = ""
        while True:
            page = self.cluster.api.runs.ListRuns(
                run_service_pb2.ListRunsRequest(
                    project_id=PROJECT, page_size=500, page_token=token
                ),
                timeout=5,
            )
            runs.extend(page.runs)
            token = page.next_page_token
            if not token:
                return runs

    def poll(self) -> None:
        # Read before the answer: what had started by then (a queued answer must not name
        # it); read after: at least everything that had ended when the answer was made.
        started_before = {s.attempt_id for s in self.cluster.spans()}
        at = time.time()  # the answer shows the state at this time or later
        runs = self._list()
        by_attempt: dict[str, list[Span]] = {}
        for span in self.cluster.spans():
            by_attempt.setdefault(span.attempt_id, []).append(span)
        unknown: dict[str, str] = {}
        for run in runs:
            seen = Seen(
                at,
                display(run),
                run.display_reason,
                run.current_attempt.id,
                run.current_attempt.runtime_instance_id,
                run.current_attempt.runtime_task_id,
            )
            self._check(run.id, seen, by_attempt.get(seen.attempt_id, []))
            if seen.display == "queued" and seen.attempt_id in started_before:
                self.violations.append(
                    f"run {run.id}: attempt {seen.attempt_id} shown queued after it started"
                )
            self.history.setdefault(run.id, []).append(seen)
            if seen.display == "unknown":
                unknown[run.id] = seen.task_id
        self._check_capacity(unknown)
        self.polls += 1

    def _check(self, run_id: str, seen: Seen, spans: list[Span]) -> None:
        previous = self.history.get(run_id)
        if previous and previous[-1].display in FINAL and previous[-1].display != seen.display:
            if previous[-1].display != "lost":  # lost may be retried or resolved
                self.violations.append(
                    f"run {run_id}: terminal {previous[-1].display} became {seen.display}"
                )
        if seen.display == "succeeded" and not any(s.exit_code == 0 for s in spans):
            self.violations.append(
                f"run {run_id}: shown succeeded before its command's end line ({spans})"
            )
        if seen.display == "running":
            for span in spans:
                end = span.end if span.end is not None else self._died_at(span, seen.at)
                if end is None:
                    continue
                self.max_dead_running_s = max(self.max_dead_running_s, seen.at - end)
                if seen.at - end > self.dead_running_after_s:
                    self.violations.append(
                        f"run {run_id}: shown running {seen.at - end:.1f}s after its "
                        f"command ended ({span})"
                    )

    def _died_at(self, span: Span, now: float) -> float | None:
        """A span without an end line whose process the process table no longer has: when
        this monitor first saw it gone (None while it lives)."""
        key = (span.attempt_id, span.pid)
        if key not in self._dead_since and not live_process(span.pid):
            self._dead_since[key] = now
        return self._dead_since.get(key)

    def _check_capacity(self, unknown: dict[str, str]) -> None:
        """Every unknown attempt is in its instance's occupancy while it stays unknown;
        no fresh observation shows more than D occupied."""
        occupancies: dict[str, capacity_service_pb2.Occupancy] = {}
        for instance in self.limits:
            occ = self.cluster.api.occupancy(instance)
            occupancies[instance] = occ
            if occ.observation_fresh:
                self.max_occupied[instance] = max(self.max_occupied[instance], occ.occupied)
                if occ.occupied > self.limits[instance]:
                    self.violations.append(
                        f"{instance}: occupied {occ.occupied} > D={self.limits[instance]}"
                    )
        if not unknown:
            return
        still = {r.id: r for r in self._list() if r.id in unknown and display(r) == "unknown"}
        per_instance: dict[str, int] = {}
        for run_id, run in still.items():
            instance = run.current_attempt.runtime_instance_id
            per_instance[instance] = per_instance.get(instance, 0) + 1
            held = occupancies.get(instance)
            if held is not None and unknown[run_id] not in held.merged_task_ids:
                self.violations.append(
                    f"run {run_id}: unknown on {instance} but its slot is not held "
                    f"(occupancy {list(held.merged_task_ids)})"
                )
        # The durable rows alone must hold them: a dead runtime's last observation may still
        # list the task, and it expires.
        for instance, count in per_instance.items():
            rows = occupancies.get(instance)
            if rows is not None and rows.durable_rows < count:
                self.violations.append(
                    f"{instance}: {count} unknown attempts but {rows.durable_rows} durable rows"
                )

    # -- reading the history -----------------------------------------------------------------

    def displayed(self, run_id: str) -> list[str]:
        seen = [s.display for s in self.history.get(run_id, [])]
        return [s for i, s in enumerate(seen) if i == 0 or seen[i - 1] != s]

    def ever(self, run_id: str, state: str) -> bool:
        return any(s.display == state for s in self.history.get(run_id, []))

    def seen_at(self, run_id: str, state: str, attempt_id: str = "") -> list[float]:
        """When the run was shown in ``state`` (for ``attempt_id`` only, if given)."""
        return [
            s.at
            for s in self.history.get(run_id, [])
            if s.display == state and (not attempt_id or s.attempt_id == attempt_id)
        ]


# -- helpers the scenarios share --------------------------------------------------------------


def live_on(cluster: Cluster, instance: str, state: str = "running") -> list[str]:
    """Runs the API shows in ``state`` on ``instance`` right now."""
    runs = cluster.api.runs.ListRuns(
        run_service_pb2.ListRunsRequest(project_id=PROJECT, page_size=500), timeout=5
    ).runs
    return [
        r.id
        for r in runs
        if display(r) == state and r.current_attempt.runtime_instance_id == instance
    ]


def started(cluster: Cluster, run_ids: Iterable[str]) -> bool:
    """Every one of these runs' commands wrote its start line."""
    begun = {s.run_id for s in cluster.spans()}
    return all(r in begun for r in run_ids)


def ended(cluster: Cluster, run_ids: Iterable[str]) -> bool:
    """Every one of these runs' commands wrote its end line."""
    done = {s.run_id for s in cluster.spans() if s.end is not None}
    return all(r in done for r in run_ids)


def status_written(agent: Service, attempt_ids: Iterable[str]) -> bool:
    """The supervisors recorded an exit status for all of these attempts."""
    assert agent.state_dir is not None
    return all((agent.state_dir / "tasks" / a / "status.json").exists() for a in attempt_ids)


def max_concurrent(spans: list[Span], now: float) -> int:
    """The most spans that were running at one instant (a span without an end runs on)."""
    edges: list[tuple[float, int]] = []
    for span in spans:
        edges.append((span.start, 1))
        edges.append((span.end if span.end is not None else now, -1))
    running = peak = 0
    for _, step in sorted(edges, key=lambda e: (e[0], e[1])):  # an end before a start
        running += step
        peak = max(peak, running)
    return peak


def attempt_instances(cluster: Cluster, run_ids: Iterable[str]) -> dict[str, str]:
    """Attempt id -> the runtime instance it was claimed for (every attempt of every run)."""
    found: dict[str, str] = {}
    for run_id in run_ids:
        answer = cluster.api.runs.ListAttempts(
            run_service_pb2.ListAttemptsRequest(run_id=run_id), timeout=10
        )
        for attempt in answer.attempts:
            found[attempt.id] = attempt.runtime_instance_id
    return found


def applied_twice(events: list[common_pb2.RunEvent]) -> list[tuple[str, int]]:
    """(attempt, runtime seq) pairs that more than one applied runtime event carries: a
    re-sent event must be recognised by its seq and ignored, never applied again. Only the
    event types that nothing but a runtime event produces count (an inspect answer acts
    with the next seq without using it up, so ``attempt.running`` may share a seq)."""
    seen: set[tuple[str, int]] = set()
    twice = []
    for event in events:
        if event.type not in _RUNTIME_ONLY or "seq" not in event.payload:
            continue
        seq = event.payload["seq"]
        if not isinstance(seq, float):  # Struct numbers are floats
            continue
        key = (event.attempt_id, int(seq))
        if key in seen:
            twice.append(key)
        seen.add(key)
    return twice


def figures(cluster: Cluster, monitor: Monitor, run_ids: list[str]) -> tuple[Figures, list[str]]:
    """The end-of-test figures and every problem found in them."""
    problems: list[str] = []
    result = Figures(
        runs=len(run_ids), polls=monitor.polls, max_running_after_end_s=monitor.max_dead_running_s
    )
    spans = [s for s in cluster.spans() if s.run_id in set(run_ids)]
    result.starts = len(spans)
    per_attempt = starts_per_attempt(spans)
    result.max_starts_per_attempt = max(per_attempt.values(), default=0)
    for attempt_id, count in per_attempt.items():
        if count > 1:
            problems.append(f"attempt {attempt_id} started {count} times")
    twice = overlaps(spans)
    result.overlapping_runs = len(twice)
    problems += twice
    instances = attempt_instances(cluster, run_ids)
    now = time.time()
    for instance, limit in monitor.limits.items():
        mine = [s for s in spans if instances.get(s.attempt_id) == instance]
        peak = max_concurrent(mine, now)
        result.max_concurrent[instance] = peak
        if peak > limit:
            problems.append(f"{instance} ran {peak} commands at once (D={limit})")
    result.max_occupied = dict(monitor.max_occupied)
    for run_id in run_ids:
        run = cluster.api.get(run_id)
        state = display(run)
        result.final[state] = result.final.get(state, 0) + 1
        if monitor.ever(run_id, "unknown"):
            result.unknown_seen += 1
        events = cluster.events(run_id)
        if gapless(events):
            result.gapless_runs += 1
        else:
            problems.append(f"run {run_id}: event sequence {[e.sequence for e in events]}")
        if twice_applied := applied_twice(events):
            problems.append(f"run {run_id}: runtime seqs applied twice: {twice_applied}")
    problems += monitor.violations
    return result, problems
