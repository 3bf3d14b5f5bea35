"""One change measured against the code before it: truerun's lifecycle in interleaved pairs.

This machine class's speed drifts by ±15 % from one minute to the next (bench/README.md,
"Issue #16, 2026-12-06"), so one round of each side says nothing about a change below that.
This runs ``bench.lifecycle --peers ''`` (truerun alone) from a checkout of ``--base`` (a git
worktree made for the run and removed after it) and from this checkout, ``--pairs`` times,
the order alternating (base first, then this checkout first, ...), and prints each pair's
rates, the server's CPU per run, and their ratios (this checkout / base). The means of the
ratios are the figure; a change is shown when every pair, or nearly, leans the same way.
Each side's producers create as ``--create-api`` says (unary CreateRun calls by default: a
checkout from before CreateRunStream knows no other way, and is refused ``stream``).

    .venv/bin/python -m bench.pairs --base fcf6176 --pairs 6 --runs 3000
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROUND = re.compile(
    r"^round 1: truerun(?:-unary)? +(\d+) runs/s.*CPU ms per job: server ([\d.]+)", re.M
)


@dataclass(frozen=True)
class Side:
    rate: int  # runs/s
    server_ms: float  # the server's CPU per run


def _knows_create_api(checkout: Path) -> bool:
    return "--create-api" in (checkout / "bench" / "lifecycle.py").read_text()


def run_side(checkout: Path, runs: int, warmup: int, api: str = "unary") -> Side:
    """One ``bench.lifecycle`` round of truerun alone, its code imported from ``checkout``."""
    paths = [str(checkout), str(checkout / "protos" / "gen")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    argv = ["--runs", str(runs), "--warmup", str(warmup), "--peers", ""]
    if _knows_create_api(checkout):
        argv += ["--create-api", api]
    elif api != "unary":
        raise SystemExit(f"{checkout} has no CreateRunStream: only --create-api unary")
    proc = subprocess.run(
        [sys.executable, "-m", "bench.lifecycle", *argv],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
    )
    found = ROUND.search(proc.stdout)
    if proc.returncode != 0 or found is None:
        raise SystemExit(
            f"bench.lifecycle failed in {checkout}:\n{proc.stdout}{proc.stderr[-3000:]}"
        )
    return Side(int(found.group(1)), float(found.group(2)))


def pairs(
    base: Path, here: Path, count: int, runs: int, warmup: int, api: str = "unary"
) -> list[tuple[Side, Side]]:
    measured = []
    for i in range(count):
        if i % 2 == 0:
            before = run_side(base, runs, warmup, api)
            after = run_side(here, runs, warmup, api)
        else:
            after = run_side(here, runs, warmup, api)
            before = run_side(base, runs, warmup, api)
        measured.append((before, after))
        print(
            f"pair {i + 1}: base {before.rate} runs/s ({before.server_ms:.2f} ms),"
            f" this {after.rate} runs/s ({after.server_ms:.2f} ms):"
            f" rate x{after.rate / before.rate:.3f}, server CPU a run"
            f" x{after.server_ms / before.server_ms:.3f}",
            flush=True,
        )
    return measured


def summary(measured: Sequence[tuple[Side, Side]]) -> str:
    rates = [after.rate / before.rate for before, after in measured]
    cpu = [after.server_ms / before.server_ms for before, after in measured]
    faster = sum(r > 1 for r in rates)
    return (
        f"mean rate x{sum(rates) / len(rates):.3f} ({faster} of {len(rates)} pairs faster),"
        f" mean server CPU a run x{sum(cpu) / len(cpu):.3f}"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.pairs", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--base", required=True, help="the git revision to compare against")
    parser.add_argument("--pairs", type=int, default=6, help="pairs of rounds")
    parser.add_argument("--runs", type=int, default=3000, help="runs per round")
    parser.add_argument("--warmup", type=int, default=1000, help="runs before each clock")
    parser.add_argument(
        "--create-api",
        choices=("unary", "stream"),
        default="unary",
        help="how both sides' producers create (bench.lifecycle --create-api)",
    )
    ns = parser.parse_args(argv)
    if ns.pairs < 1 or ns.runs < 1 or ns.warmup < 0:
        parser.error("--pairs and --runs must be positive, --warmup not negative")
    with tempfile.TemporaryDirectory(prefix="truerun-bench-pairs-") as tmp:
        base = Path(tmp) / "base"
        git = ["git", "-C", str(ROOT)]
        subprocess.run([*git, "worktree", "add", "--detach", str(base), ns.base], check=True)
        try:
            print(
                f"base {ns.base} vs this checkout; {ns.pairs} pairs of {ns.runs} runs,"
                f" created by {ns.create_api} calls"
            )
            print(summary(pairs(base, ROOT, ns.pairs, ns.runs, ns.warmup, ns.create_api)))
        finally:
            subprocess.run([*git, "worktree", "remove", "--force", str(base)], check=True)


if __name__ == "__main__":
    main()
