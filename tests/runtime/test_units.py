"""Small pieces: process proofs, signalling only proven handles, output chunking, specs, CLI."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from truerun_runtime import Backoff
from truerun_runtime.agent import cli
from truerun_runtime.agent.output import OutputTailer
from truerun_runtime.agent.procfs import Proof, identity, prove, signal_group
from truerun_runtime.agent.tasks import SpecError, parse_spec


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(["sleep", "30"], start_new_session=True)
    yield process
    if process.poll() is None:
        process.kill()
    process.wait(5)


def test_a_handle_proves_its_process_only_while_every_field_matches(
    sleeper: subprocess.Popen[bytes],
) -> None:
    handle = identity(sleeper.pid)
    assert handle["pgid"] == sleeper.pid
    assert prove(handle) is Proof.ALIVE
    for field, wrong in (
        ("start_ticks", handle["start_ticks"] + 1),
        ("boot_id", "x"),
        ("pgid", os.getpgid(0)),
        ("pid", 999_999_999),
    ):
        assert prove({**handle, field: wrong}) is Proof.GONE, field
    assert prove({"pid": sleeper.pid}) is Proof.GONE
    sleeper.send_signal(signal.SIGSTOP)  # stopped is still alive
    assert prove(handle) is Proof.ALIVE
    sleeper.send_signal(signal.SIGCONT)


def test_only_a_proven_handle_is_signalled(sleeper: subprocess.Popen[bytes]) -> None:
    handle = identity(sleeper.pid)
    assert not signal_group({**handle, "start_ticks": handle["start_ticks"] - 1}, signal.SIGTERM)
    assert sleeper.poll() is None
    assert signal_group(handle, signal.SIGTERM)
    assert sleeper.wait(5) == -signal.SIGTERM
    assert not signal_group(handle, signal.SIGKILL), "a reaped process is gone"


def test_output_chunks_end_on_character_boundaries(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    text = "é" * 3000 + "end\n"
    log.write_text(text)
    tailer = OutputTailer(log, chunk_bytes=4095, chunks_per_pump=1)
    first = tailer.pump()
    assert len(first) == 1 and len(first[0].data.encode()) == 4094
    rest = tailer.pump(final=True)
    assert "".join(c.data for c in first + rest) == text
    assert tailer.pump(final=True) == []


def test_specs() -> None:
    assert parse_spec({"command": "echo hi"}).argv == ["/bin/sh", "-c", "echo hi"]
    spec = parse_spec({"argv": ["ls", "-l"], "timeout_s": 2, "grace_ms": 10, "env": {"A": "b"}})
    assert (spec.argv, spec.timeout_s, spec.grace_ms, spec.env) == (
        ["ls", "-l"],
        2.0,
        10,
        {"A": "b"},
    )
    bad_specs: list[dict[str, Any]] = [
        {},
        {"command": ""},
        {"argv": []},
        {"argv": [1]},
        {"command": "x", "argv": ["y"]},
        {"command": "x", "timeout_s": 0},
        {"command": "x", "env": {"A": 1}},
    ]
    for bad in bad_specs:
        with pytest.raises(SpecError):
            parse_spec(bad)


def test_cli_requires_a_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRUERUN_TOKEN", raising=False)
    with pytest.raises(SystemExit) as exited:
        cli.main(["--server", "127.0.0.1:1", "--owner", "o", "--state-dir", str(tmp_path)])
    assert exited.value.code == 2


async def test_run_local_without_an_agent_fails_cleanly(tmp_path: Path) -> None:
    argv = ["run-local", "--state-dir", str(tmp_path), "--", "true"]
    assert await asyncio.to_thread(cli.main, argv) == 2  # its own loop, in its own thread


def test_backoff_grows_exponentially_with_jitter_and_is_bounded() -> None:
    backoff = Backoff(initial_s=0.1, max_s=2.0, multiplier=2.0, jitter=0.5)
    for failures, ceiling in ((1, 0.1), (2, 0.2), (3, 0.4), (6, 2.0), (50, 2.0)):
        delays = [backoff.delay(failures) for _ in range(50)]
        assert all(ceiling * 0.5 <= d <= ceiling for d in delays), failures
        assert len(set(delays)) > 1, "jittered"
