"""A server process starts with the collector set for a service (services/gc_tuning.py)."""

from __future__ import annotations

import subprocess
import sys

from services.gc_tuning import OLDER_THRESHOLD, YOUNG_THRESHOLD


def test_a_server_process_raises_the_young_threshold() -> None:
    # in a child: the setting is process-wide, and the test process keeps its own
    code = (
        "import gc; from services.cli.main import _start_server_process;"
        " before = gc.get_threshold(); _start_server_process(); print(before, gc.get_threshold())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, after = out.stdout.strip().split(") (")
    assert before == "(700, 10, 10"
    assert after == f"{YOUNG_THRESHOLD}, {OLDER_THRESHOLD}, {OLDER_THRESHOLD})"
