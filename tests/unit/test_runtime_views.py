"""capacity/domain/runtimes.py: which runtimes are connected, in the server's words."""

from __future__ import annotations

import dataclasses

import pytest

from capacity.domain.runtimes import CONNECTED_DETAIL, listed, runtime_view
from kernel.observation import Observation, ObservationRejected, Route, validate

T0 = 1_700_000_000_000
TTL = 15_000


def obs(owner: str = "o", instance: str = "i", **changes: object) -> Observation:
    base = Observation(
        owner_id=owner,
        runtime_instance_id=instance,
        routes=(Route("dev", "local"),),
        limit=2,
        active=1,
        active_task_ids=("t1",),
        queued=0,
        labels=(),
        observed_at_ms=None,
        received_at_ms=T0,
        agent_version="truerun-agent/0.1.0",
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_connected_exactly_while_the_observation_is_fresh() -> None:
    fresh = runtime_view(obs(), TTL, ["t1", "t2"], T0 + TTL)
    assert (fresh.connected, fresh.age_ms, fresh.detail) == (True, TTL, CONNECTED_DETAIL)
    # O merges by task id as GetOccupancy does: t1 once, t2 durable only
    assert (fresh.occupancy.limit, fresh.occupancy.occupied, fresh.occupancy.runtime_active) == (
        2,
        2,
        1,
    )
    stale = runtime_view(obs(), TTL, [], T0 + TTL + 1)
    assert not stale.connected
    assert stale.detail == (
        "no heartbeat within the observation TTL (15 s): disconnected or silent; claims for "
        "it stopped and its attempts keep their states"
    )


def test_a_stale_instance_its_lineage_replaced_says_so() -> None:
    replaced = runtime_view(obs(lineage="pod"), TTL, [], T0 + TTL + 1, replaced_at_ms=T0 + 9)
    assert (replaced.connected, replaced.replaced_at_ms) == (False, T0 + 9)
    assert replaced.detail == (
        "replaced by a newer instance of lineage pod: its started attempts became lost; "
        "claims for it stopped"
    )
    # a fresh observation is the stronger fact: it is connected whatever was recorded
    assert runtime_view(obs(lineage="pod"), TTL, [], T0, replaced_at_ms=T0).connected


def test_a_runtime_clock_ahead_never_gives_a_negative_age() -> None:
    assert runtime_view(obs(received_at_ms=T0 + 50), TTL, [], T0).age_ms == 0


def test_listed_orders_connected_first_and_keeps_only_visible_owners() -> None:
    seen = [
        (obs("b", "x", received_at_ms=T0 - 60_000), TTL),  # stale
        (obs("b", "a"), TTL),
        (obs("a", "z"), TTL),
        (obs("hidden", "h"), TTL),
    ]
    durable = {("b", "a"): ["t1", "t9"]}
    views = listed(seen, durable, T0 + 1_000, owners={"a", "b"})
    names = [(v.observation.owner_id, v.observation.runtime_instance_id) for v in views]
    assert names == [("a", "z"), ("b", "a"), ("b", "x")]
    assert [v.connected for v in views] == [True, True, False]
    assert views[1].occupancy.occupied == 2
    assert len(listed(seen, durable, T0 + 1_000, owners=None)) == 4


@pytest.mark.parametrize(
    "changes",
    [{"agent_version": "v" * 129}, {"lineage": "bad\nline"}],
    ids=["long-version", "unprintable-lineage"],
)
def test_hello_facts_are_bounded(changes: dict[str, str]) -> None:
    with pytest.raises(ObservationRejected):
        validate(obs(**changes))
