"""The DBOS comparison (bench/longtask_dbos) runs once at its tiniest size, like every bench
(tests/bench/test_benches_run.py): one round, its checks pass, and the report has a row and a
summary line per side. The peer's own environment is made on first use (from PyPI, like the
project's venv), so the first run takes longer."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 280  # under the suite's per-test timeout; a round takes a few seconds


@pytest.mark.bench
def test_dbos_comparison_runs_and_checks_itself() -> None:
    paths = [str(ROOT), str(ROOT / "protos" / "gen"), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))
    proc = subprocess.run(
        [sys.executable, "-m", "bench.longtask_dbos", "--rounds", "1"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    out = proc.stdout
    report = f"exit {proc.returncode}\n--- stdout\n{out}\n--- stderr\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, report
    assert "MISMATCH" not in out, report
    assert "checked: DBOS @DBOS.step: 1/1 rounds killed after the effect was visible" in out
    assert "checked: every effect at the fixture belongs to a round" in out, report
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    assert [r.split(" | ")[0] for r in rows[1:]] == [
        "| DBOS @DBOS.step",
        "| truerun non_idempotent step",
    ], report
    # what the comparison exists to show: the peer replays a step whose effect happened
    # but whose checkpoint did not (at-least-once steps), so its effect doubles
    assert "DBOS @DBOS.step: 1 rounds, duplicate effects 1" in out, report
    # and truerun's: the intent was recorded before the effect, so the step is uncertain,
    # a person is asked, and nothing replays it
    assert "checked: truerun non_idempotent step: 1/1 rounds killed after the effect" in out
    assert "truerun non_idempotent step: 1 rounds, duplicate effects 0" in out, report
    assert "waiting_for_user, step uncertain x1" in out, report
