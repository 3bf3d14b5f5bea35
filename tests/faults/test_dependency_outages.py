"""PostgreSQL and Redis fail under the services (cut by the fault proxy, flushed): nothing is
lost or applied twice, every run's events stay gapless, claims stop while capacity
observations are missing and resume with the next heartbeats."""

from __future__ import annotations

import time
from collections.abc import Callable

import grpc
from truerun.v1.run_service_pb2 import GetRunRequest

from coordinator.api.errors import reason_of
from tests.faults.harness import (
    TERMINAL,
    Cluster,
    display,
    gapless,
    starts_per_attempt,
    types,
)

LINES = 60


def _chatty(cluster: Cluster, tag: str) -> str:
    """A command printing LINES numbered lines over about three seconds."""
    body = f"for i in $(seq 1 {LINES}); do echo {tag}-$i; sleep 0.05; done"
    return cluster.side_effect(body)


def _output(cluster: Cluster, run_id: str) -> str:
    # the stored output: a repeated or reordered chunk would show in the exact comparison
    return cluster.output(run_id)


def _assert_exact(cluster: Cluster, run_ids: dict[str, str]) -> None:
    """Every run succeeded once, its output complete and unrepeated, its events gapless."""
    for tag, run_id in run_ids.items():
        run = cluster.get(run_id)
        assert display(run) == "succeeded", (tag, display(run), cluster.describe())
        assert run.attempt_count == 1
        events = cluster.events(run_id)
        assert gapless(events), types(events)
        for once in ("attempt.running", "attempt.succeeded", "run.succeeded"):
            assert types(events).count(once) == 1, (once, types(events))
        expected = "".join(f"{tag}-{i}\n" for i in range(1, LINES + 1))
        assert _output(cluster, run_id) == expected
    spans = cluster.spans()
    assert all(n == 1 for n in starts_per_attempt(spans).values()), spans
    assert len(spans) == len(run_ids)


def _timed_call(call: Callable[[], object], deadline_s: float) -> float:
    """Run one API call; it may fail, but it must end within its deadline (plus slack)."""
    began = time.monotonic()
    try:
        call()
    except grpc.RpcError:
        pass
    took = time.monotonic() - began
    assert took <= deadline_s + 1.0, f"a call with a {deadline_s}s deadline took {took:.2f}s"
    return took


def test_postgres_outage_during_event_burst(make_cluster: Callable[..., Cluster]) -> None:
    cluster = make_cluster(lease_ttl_ms=3000)
    assert cluster.pg_proxy is not None
    cluster.start_agent("a1", limit=3)
    runs = {tag: cluster.submit(tag, _chatty(cluster, tag)) for tag in ("r1", "r2", "r3")}
    for run_id in runs.values():
        # mid-burst: some lines stored (output is in the output store, not the event log)
        cluster.wait_for(run_id, lambda r: cluster.output(r.id).count("\n") >= 8, 30, "output")

    # Cut every PostgreSQL connection of every service mid-burst, hold new ones for two
    # seconds (calls made meanwhile end within their deadlines), cut again, heal.
    assert cluster.pg_proxy.reset_connections() > 0
    cluster.pg_proxy.blackhole()
    api = cluster.api
    _timed_call(lambda: api.runs.GetRun(GetRunRequest(id=runs["r1"]), timeout=1.5), 1.5)
    _timed_call(lambda: api.submit("during", "true"), api.timeout_s)
    time.sleep(2)  # the outage itself: its length is the fault, nothing waits on it
    cluster.pg_proxy.reset()
    cluster.pg_proxy.pass_through()

    for run_id in runs.values():
        cluster.wait_for(run_id, TERMINAL, 60)
    _assert_exact(cluster, runs)
    after = cluster.submit("after", cluster.side_effect("echo after"))
    assert display(cluster.wait_for(after, TERMINAL, 60)) == "succeeded"


def test_redis_flush_and_outage(make_cluster: Callable[..., Cluster]) -> None:
    # Long leases (heartbeats every 5 s) make the window without observations observable.
    cluster = make_cluster(lease_ttl_ms=15_000)
    assert cluster.redis_proxy is not None
    cluster.start_agent("a1", limit=2)
    key = cluster.eventually(lambda: _observation_key(cluster), 15, "the observation")
    # Flush just after a heartbeat rewrote the observation: the next one is ~5 s away.
    seen = cluster.redis_cli("GET", key)
    cluster.eventually(lambda: cluster.redis_cli("GET", key) != seen, 15, "a heartbeat")

    # 1. FLUSHDB: no observation, no claim, until the next heartbeat writes one again.
    cluster.flush_redis()
    flushed = cluster.submit("after-flush", cluster.side_effect("echo flushed"))
    missing: list[str] = []
    while not _observation_key(cluster):
        missing.append(display(cluster.get(flushed)))
        time.sleep(0.05)
        assert len(missing) < 400, "no heartbeat re-created the observation"
    assert missing, "the observation came back before the run could be looked at"
    assert set(missing) == {"queued"}, f"claimed without an observation: {set(missing)}"
    assert display(cluster.wait_for(flushed, TERMINAL, 30)) == "succeeded"

    # 2. A Redis outage during a run: connections cut, then held, then cut again.
    during = cluster.submit("r1", _chatty(cluster, "r1"))
    cluster.wait_for(during, "running", 30)
    cluster.redis_proxy.reset_connections()
    cluster.redis_proxy.blackhole()
    blocked = cluster.submit("blocked", cluster.side_effect("echo blocked"))
    time.sleep(3)  # the outage itself
    cluster.redis_proxy.reset()
    cluster.redis_proxy.pass_through()
    cluster.wait_for(during, TERMINAL, 60)
    assert display(cluster.wait_for(blocked, TERMINAL, 60)) == "succeeded"
    _assert_exact_one(cluster, during, "r1")
    for run_id in (flushed, blocked):
        run = cluster.get(run_id)
        assert run.attempt_count == 1 and gapless(cluster.events(run_id))
    assert all(n == 1 for n in starts_per_attempt(cluster.spans()).values())


def _observation_key(cluster: Cluster) -> str:
    """The instance's observation key (claims read it), not its seen key (``~seen``: what
    ListRuntimes lists, written in the same MULTI and outliving the TTL)."""
    keys = [k for k in cluster.redis_cli("KEYS", "*").split() if "~seen" not in k]
    assert len(keys) <= 1, keys
    return keys[0] if keys else ""


def _assert_exact_one(cluster: Cluster, run_id: str, tag: str) -> None:
    run = cluster.get(run_id)
    assert display(run) == "succeeded", (display(run), cluster.describe())
    events = cluster.events(run_id)
    assert gapless(events), types(events)
    expected = "".join(f"{tag}-{i}\n" for i in range(1, LINES + 1))
    assert _output(cluster, run_id) == expected


def test_calls_while_dependencies_reset_answer_unavailable_never_internal(
    make_cluster: Callable[..., Cluster],
) -> None:
    """A call whose PostgreSQL or Redis connection is reset is answered UNAVAILABLE with the
    retryable STORE_BUSY reason (or runs into its deadline), never INTERNAL: the client should
    retry, and an operator reading INTERNAL would hunt for a bug that is not there."""
    cluster = make_cluster()
    assert cluster.pg_proxy is not None and cluster.redis_proxy is not None
    run_id = cluster.submit("before", "true")
    api = cluster.api
    calls: dict[str, Callable[[], object]] = {
        "GetRun": lambda: api.get(run_id),
        "ListRunEvents": lambda: api.events(run_id),
        "CreateRun": lambda: api.submit("during", "true"),
        "GetOccupancy": lambda: api.occupancy("a1"),
    }
    answers: list[tuple[str, str, str]] = []
    for proxy in (cluster.pg_proxy, cluster.redis_proxy):
        proxy.reset()  # new connections too: every reconnect is reset
        proxy.reset_connections()
    try:
        for _ in range(2):  # the first call finds the cut connection, the second a fresh one
            for name, call in calls.items():
                try:
                    call()
                    answers.append((name, "OK", ""))
                except grpc.RpcError as error:
                    answers.append((name, str(error.code()), reason_of(error)))
    finally:
        for proxy in (cluster.pg_proxy, cluster.redis_proxy):
            proxy.pass_through()
    print(answers)
    assert all(code != "StatusCode.INTERNAL" for _, code, _ in answers), answers
    unavailable = [a for a in answers if a[1] == "StatusCode.UNAVAILABLE"]
    assert unavailable and all(reason == "STORE_BUSY" for *_, reason in unavailable), answers
    # healed: the pools reconnect on their own
    after = cluster.eventually(lambda: api.submit("after", "true"), 30, "CreateRun again")
    assert api.get(after).id == after and api.occupancy("a1") is not None
