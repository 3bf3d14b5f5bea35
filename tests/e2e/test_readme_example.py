"""README.md's first example ("Using it") runs as written: its shell block, line by line in
one bash, against the real `truerun dev` and `truerun agent` it starts itself, and every
line's exit status is 0; the run it submits really runs `make docs` in the checkout.

The one change to the text is the gRPC port (7233 may be taken on a shared machine: a free
one instead). It runs in a scratch directory holding links to this checkout's .venv,
Makefile, pyproject.toml and scripts/, so its .truerun data and the agent's state stay out
of the checkout; every process it started (found by a marker in their environment) is
killed afterwards."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from tests.support.processes import MARKER_VAR, marked_pids
from tests.support.replicas import free_ports

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
LINKED = (".venv", "Makefile", "pyproject.toml", "scripts")


def example_lines(readme: str) -> list[str]:
    """The command lines of the first ``sh`` block under "## Using it" (comments dropped)."""
    section = readme.split("## Using it", 1)[1]
    block = section.split("```sh\n", 1)[1].split("\n```", 1)[0]
    return [line for line in block.splitlines() if line.strip() and not line.startswith("#")]


def test_the_readme_example_runs_as_written(tmp_path: Path) -> None:
    lines = example_lines((ROOT / "README.md").read_text(encoding="utf-8"))
    assert lines[0].startswith(".venv/bin/truerun dev ") and len(lines) > 10
    port = str(free_ports(1)[0])
    work = tmp_path / "checkout"
    work.mkdir()
    for name in LINKED:
        (work / name).symlink_to(ROOT / name)
    statuses = tmp_path / "statuses"
    script = "".join(
        f'{line.replace("7233", port)}\necho "$? {i}" >> {statuses}\n'
        for i, line in enumerate(lines)
    )
    marker = f"readme-{uuid.uuid4().hex}"
    state = tempfile.mkdtemp(prefix="trr-")  # short: the agent's unix socket lives there
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRUERUN_")}
    env.update({"USER": "readme", "XDG_STATE_HOME": state, MARKER_VAR: marker})
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    try:  # files, not pipes: the processes left in the background keep a pipe open
        with out.open("w") as stdout, err.open("w") as stderr:
            subprocess.run(
                ["bash", "-c", script],
                cwd=work,
                env=env,
                stdout=stdout,
                stderr=stderr,
                timeout=120,
                check=False,
            )
    finally:
        _kill_marked(marker)
    printed = out.read_text()
    said = f"stdout:\n{printed}\nstderr:\n{err.read_text()[-4000:]}"
    ran = [tuple(map(int, row.split())) for row in statuses.read_text().splitlines()]
    assert [i for _, i in ran] == list(range(len(lines))), said
    failed = [(lines[i], code) for code, i in ran if code != 0]
    assert not failed, f"{failed}\n{said}"
    # the watch printed the run's events to its end; the logs are `make docs`' own words
    assert re.search(r"^\s+\d+\s+run\.succeeded ", printed, re.MULTILINE), said
    assert "documents, their links and the generated parts are up to date" in printed, said
    assert '"runs": [' in printed and "retry of " in printed, said


def _kill_marked(marker: str) -> None:
    deadline = time.monotonic() + 10.0
    while (pids := marked_pids(marker)) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    assert not marked_pids(marker), "processes left behind"
