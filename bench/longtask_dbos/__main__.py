"""The effect-fixture scenario against DBOS's ``@DBOS.step`` and against truerun, side by side
(issue #13; bench/README.md "bench.longtask_dbos"):

    .venv/bin/python -m bench.longtask_dbos --rounds 5

Each round a step makes a non-idempotent effect at the effect fixture, is SIGKILLed once the
effect is visible and before its answer (so before any checkpoint of the step), and is
recovered; the fixture counts the effects. Prints one table row per side, one summary line
per side, and ``checked:`` lines (``MISMATCH`` and exit 1 when a check fails)."""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from bench.longtask_dbos import truerun_side
from bench.longtask_dbos.env import env_dir, installed_version, peer_python
from bench.longtask_dbos.report import report
from bench.longtask_dbos.scenario import SideResult, dbos_side, run_side
from tests.support.effect_fixture import Ledger
from tests.support.effect_fixture_process import fixture_process

DBOS_NAME = "DBOS @DBOS.step"
NOT_YET = "the long-task runtime has not landed; bench/longtask_dbos/truerun_side.py"


def check(ok: bool, text: str) -> bool:
    print(f"checked: {text}" if ok else f"MISMATCH: {text}", flush=True)
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.longtask_dbos")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    python = peer_python()
    print(f"peer: dbos {installed_version(python, 'dbos')} in {env_dir()}, SQLite system database")
    work = Path(tempfile.mkdtemp(prefix="truerun-bench-longtask-"))
    state = work / "effects.jsonl"
    try:
        with fixture_process(state) as fixture:
            sides: list[tuple[str, SideResult | str]] = []
            ran: list[SideResult] = []
            ran.append(run_side(DBOS_NAME, dbos_side(python), args.rounds, fixture.url, work))
            sides.append((DBOS_NAME, ran[-1]))
            if truerun_side.PLAY_ROUND is None:
                sides.append((truerun_side.NAME, NOT_YET))
            else:
                play = truerun_side.PLAY_ROUND
                ran.append(run_side(truerun_side.NAME, play, args.rounds, fixture.url, work))
                sides.append((truerun_side.NAME, ran[-1]))
            stats = fixture.stats()
        good = True
        for side in ran:
            latest = max(o.kill.after_effect_ms for o in side.outcomes)
            margin = min(o.kill.margin_s for o in side.outcomes)
            good &= check(
                side.killed_in_window == side.rounds,
                f"{side.name}: {side.killed_in_window}/{side.rounds} rounds killed after the "
                f"effect was visible (at most {latest} ms after it), while its answer was held, "
                f"with no record of the step done, {margin:.2f} s or more before the step's "
                "timeout",
            )
        counted = sum(side.effects for side in ran)
        good &= check(
            counted == stats["effects"],
            f"every effect at the fixture belongs to a round ({counted} of {stats['effects']})",
        )
        copy = work / "effects-reread.jsonl"
        shutil.copyfile(state, copy)
        reread = Ledger(copy)
        on_disk = reread.stats()
        reread.close()
        good &= check(
            on_disk["keys"] == stats["keys"],
            f"the fixture's file holds the {on_disk['effects']} effects it counted",
        )
        print()
        print(report(sides))
    finally:
        if args.keep:
            print(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
