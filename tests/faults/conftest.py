"""Fixtures of the fault suite: ``make_cluster(**kw)`` starts a ``Cluster`` for the test and
tears it down (no process left behind). Every item is marked ``faults``; a failing test gets a
report section with each cluster's seed and log directory (set TRUERUN_FAULTS_SEED to replay
a seed)."""

from __future__ import annotations

import os
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faults.harness import Cluster

CLUSTERS = pytest.StashKey[list[Cluster]]()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.faults)
            item.add_marker(pytest.mark.postgres)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    clusters = item.stash.get(CLUSTERS, [])
    if report.failed and clusters:
        lines = [c.describe() for c in clusters]
        report.sections.append(("faults: seed and process logs", "\n".join(lines)))
    return report


def seed_from_env() -> int | None:
    raw = os.environ.get("TRUERUN_FAULTS_SEED", "")
    return int(raw) if raw else None


@pytest.fixture
def make_cluster(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[..., Cluster]]:
    """``make_cluster(database="postgres", redis=True, lease_ttl_ms=2500, ...)``: a started
    cluster in its own subdirectory of the test's tmp dir."""
    clusters: list[Cluster] = []
    request.node.stash[CLUSTERS] = clusters

    def make(**kwargs: Any) -> Cluster:
        kwargs.setdefault("seed", seed_from_env())
        cluster = Cluster(tmp_path / f"cluster-{len(clusters) + 1}", **kwargs)
        clusters.append(cluster)
        print(f"fault cluster: {cluster.describe()}")
        return cluster.start()

    yield make
    leftovers: list[int] = []
    for cluster in clusters:
        cluster.close()
        leftovers += cluster.leftovers()
    assert not leftovers, f"processes left behind: {leftovers}"
