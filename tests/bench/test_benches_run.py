"""Every benchmark runs once at its tiniest size (bench/README.md): it completes and its own
consistency checks pass. Timings and rates are printed by the benches and never asserted.

The benches need PostgreSQL, and all but ``bench.claim`` pgbench; like the rest of the suite,
these tests fail (never skip) when either is missing."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernel.tls import DEV_PLAINTEXT
from tests.support.databases import pg_admin_url

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 120  # a tiny run takes a few seconds; this only bounds a hang


def run_bench(module: str, *args: str) -> str:
    """``python -m bench.<module> <args>`` from the repository root; its stdout, after
    asserting it exited 0 and printed no MISMATCH."""
    paths = [str(ROOT), str(ROOT / "protos" / "gen"), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))
    proc = subprocess.run(
        [sys.executable, "-m", f"bench.{module}", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    report = f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, f"bench.{module} failed (PostgreSQL at {pg_admin_url()}): {report}"
    assert "MISMATCH" not in proc.stdout, report
    return proc.stdout


def require_pgbench() -> None:
    if shutil.which("pgbench") is None:
        pytest.fail(
            "pgbench is required (PostgreSQL's client tools) but not on PATH", pytrace=False
        )


async def _printed(*lines: str) -> str:
    """The address ``start_server`` reads from a process printing ``lines``.

    Imported here, not at the top: importing ``bench`` sets GRPC_ENABLE_FORK_SUPPORT for the
    bench processes (bench/__init__.py), which the tests' own process must not inherit; the
    caller's monkeypatch undoes it."""
    from bench.server import read_grpc_address

    script = "import sys; sys.stdout.write(sys.argv[1])"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, "".join(f"{x}\n" for x in lines), stdout=subprocess.PIPE
    )
    try:
        return await asyncio.wait_for(read_grpc_address(proc), 30)
    finally:
        await proc.wait()


@pytest.mark.bench
async def test_the_grpc_line_is_found_whatever_comes_before_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GRPC_ENABLE_FORK_SUPPORT", os.environ.get("GRPC_ENABLE_FORK_SUPPORT", "0"))
    before = [
        "metrics listening on 127.0.0.1:9464",
        DEV_PLAINTEXT,
        "http listening on 127.0.0.1:8080",
    ]
    assert await _printed(*before, "grpc listening on 127.0.0.1:5050") == "127.0.0.1:5050"
    assert await _printed("grpc listening on 127.0.0.1:1 (tls)", *before) == "127.0.0.1:1"
    with pytest.raises(RuntimeError, match="without a grpc line"):
        await _printed(*before)


@pytest.mark.bench
@pytest.mark.postgres
def test_transition_runs_and_checks_both_sides() -> None:
    require_pgbench()
    out = run_bench("transition", "--seconds", "1", "--warmup", "0", "--runs-per-writer", "1")
    check = "transitions committed, checked against versions and events"
    assert [line.split(":")[0] for line in out.splitlines() if check in line] == [
        "python",
        "pgbench",
    ], out
    assert "ratio " in out, out


@pytest.mark.bench
@pytest.mark.postgres
def test_claim_runs_and_checks_seeding_and_queue() -> None:
    out = run_bench("claim", "--sizes", "1", "--agents", "1", "--calls", "1", "--warmup", "0")
    assert "checked: seeded rows are what Transitions.create writes" in out, out
    assert "checked: 1 queued before and after the claims" in out, out
    assert "p50 ms" in out, out


@pytest.mark.bench
@pytest.mark.postgres
def test_ingest_runs_and_checks_both_sides() -> None:
    require_pgbench()
    out = run_bench(
        "ingest", "--seconds", "1", "--warmup", "0", "--runs", "1", "--heartbeat-s", "0"
    )
    check = "events committed, checked against attempt seqs and attempt_output"
    assert [line.split(":")[0] for line in out.splitlines() if check in line] == [
        "python",
        "pgbench",
    ], out
    assert "ratio " in out, out


def peer_checks(n: int, truerun_sides: int = 1) -> list[str]:
    return [
        f"checked: truerun: {n * truerun_sides} runs succeeded, none in another state",
        f"checked: pgqueuer: {n} jobs done, table empty",
        f"checked: dbos: {n} workflows SUCCESS, none in another state, {n} steps recorded",
        f"checked: procrastinate: {n} jobs succeeded, none in another state",
    ]


@pytest.mark.bench
@pytest.mark.postgres
def test_lifecycle_runs_and_checks_every_side() -> None:
    # every peer by default: pgqueuer, then DBOS and procrastinate from bench's own venv; two
    # rounds, so every peer also starts again on the database its first round left; both of
    # truerun's sides (created over a CreateRunStream each, and by unary CreateRun calls)
    out = run_bench(
        "lifecycle", *("--runs", "1", "--warmup", "0", "--producers", "1", "--rounds", "2")
    )
    for check in peer_checks(2, truerun_sides=2):
        assert check in out, out
    ratios = [line.split(" (")[0].rsplit(" ", 1)[0] for line in out.splitlines()]
    assert [r for r in ratios if "ratio" in r] == [
        "ratio",
        "ratio vs dbos",
        "ratio vs procrastinate",
        "truerun-unary ratio",
        "truerun-unary ratio vs dbos",
        "truerun-unary ratio vs procrastinate",
    ], out
    sides = [line.split()[2] for line in out.splitlines() if line.startswith("round 1: ")]
    assert sides == ["truerun", "truerun-unary", "pgqueuer", "dbos", "procrastinate"], out


@pytest.mark.bench
@pytest.mark.postgres
def test_lifecycle_counts_statements_per_run() -> None:
    out = run_bench(
        "lifecycle",
        *("--runs", "1", "--warmup", "0", "--producers", "1"),
        *("--count-statements", "--settle-s", "0", "--top", "100"),
        *("--peers", "pgqueuer,procrastinate", "--create-api", "stream"),
    )
    checks = peer_checks(1)
    assert checks[0] in out and checks[1] in out and checks[3] in out, out
    assert "ratio" not in out, out  # counted, not timed
    rows = {
        cells[0]: cells[1:]
        for line in out.splitlines()
        if line.startswith("| ") and (cells := [c.strip() for c in line.strip("|").split("|")])
    }
    assert list(rows) == ["side", "truerun", "pgqueuer", "procrastinate"], out
    for side in ("truerun", "pgqueuer", "procrastinate"):
        runs, statements, commits = rows[side][:3]
        # the run's own statements were read back from the server log: never none
        assert runs == "1" and float(statements) >= 1 and float(commits) >= 1, out
        assert f"{side}: statements per run by text" in out, out
    # the run's create is among truerun's statements (a lone create is written by the group
    # insert, whose text breaks the line after "WITH r AS (")
    assert re.search(r"WITH r AS \( ?INSERT INTO runs", out), out
    # the peers' processes ended inside the window, so their table counters are flushed even
    # without a settle: one job row inserted each (truerun's server lives on: not asserted)
    assert "public.pgqueuer: 1.00 / " in out, out
    assert "public.procrastinate_jobs: 1.00 / " in out, out


@pytest.mark.bench
@pytest.mark.postgres
def test_pairs_compares_a_revision_with_this_checkout_and_cleans_up() -> None:
    out = run_bench("pairs", *("--base", "HEAD", "--pairs", "2", "--runs", "5", "--warmup", "0"))
    assert [line.split(":")[0] for line in out.splitlines() if line.startswith("pair ")] == [
        "pair 1",
        "pair 2",
    ], out
    assert "mean rate x" in out and "of 2 pairs faster" in out, out
    worktrees = subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "list", "--porcelain"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "truerun-bench-pairs-" not in worktrees, worktrees  # the base's checkout is gone
