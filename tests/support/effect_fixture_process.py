"""The effect fixture as a process of its own (so it outlives kills of truerun processes),
and the condition waits the suites and the bench use around it."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from tests.support import effect_client
from tests.support.effect_fixture import DEFAULT_HOLD_S, LISTENING

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


class FixtureProcess:
    """``python -m tests.support.effect_fixture`` in a session of its own on loopback."""

    def __init__(
        self,
        state: Path,
        *,
        port: int = 0,
        idempotent: bool = False,
        withhold: bool = False,
        hold_s: float = DEFAULT_HOLD_S,
    ) -> None:
        self.state = state
        argv = [sys.executable, "-m", "tests.support.effect_fixture", "--state", str(state)]
        argv += ["--port", str(port), "--hold-s", str(hold_s)]
        argv += ["--idempotent"] if idempotent else []
        argv += ["--withhold"] if withhold else []
        paths = [str(ROOT), os.environ.get("PYTHONPATH", "")]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))
        env["PYTHONUNBUFFERED"] = "1"
        self.popen = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.url = self._read_url(deadline_s=30.0)

    def _read_url(self, deadline_s: float) -> str:
        assert self.popen.stdout is not None
        deadline = time.monotonic() + deadline_s
        seen = b""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.popen.stdout], [], [], 0.1)
            if ready:
                line = self.popen.stdout.readline()
                seen += line
                text = line.decode(errors="replace").strip()
                if text.startswith(LISTENING):
                    return text[len(LISTENING) :]
                if not line:
                    break
        self.kill()
        raise RuntimeError(f"the effect fixture did not come up: {seen.decode(errors='replace')}")

    def stats(self) -> dict[str, Any]:
        return effect_client.stats(self.url)

    def kill(self) -> None:
        """SIGKILL: what the fixture already answered or showed is in its state file."""
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(timeout=30)
        if self.popen.stdout is not None:
            self.popen.stdout.close()


@contextmanager
def fixture_process(state: Path, **options: Any) -> Iterator[FixtureProcess]:
    fixture = FixtureProcess(state, **options)
    try:
        yield fixture
    finally:
        fixture.kill()


def wait_for(what: str, check: Callable[[], T | None], deadline_s: float = 30.0) -> T:
    """Poll ``check`` until it returns something other than None; fail at the deadline."""
    deadline = time.monotonic() + deadline_s
    while True:
        value = check()
        if value is not None:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"waited {deadline_s:.0f} s for {what}")
        time.sleep(0.02)


def wait_for_effect(url: str, key: str, deadline_s: float = 30.0) -> dict[str, Any]:
    """The first effect of ``key``, once the fixture shows it on its query endpoint."""

    def visible() -> dict[str, Any] | None:
        result, effect = effect_client.probe(url, key)
        return effect if result == effect_client.PROBE_DONE else None

    return wait_for(f"an effect with key {key!r} at {url}", visible, deadline_s)


def wait_for_hold(url: str, key: str, deadline_s: float = 30.0) -> dict[str, Any]:
    """The fixture's stats once an answer for ``key`` is being held back."""

    def held() -> dict[str, Any] | None:
        stats = effect_client.stats(url)
        return stats if key in stats["holds"]["open_keys"] else None

    return wait_for(f"a held answer for key {key!r}", held, deadline_s)


def wait_for_hang_up(url: str, key: str, before: int, deadline_s: float = 30.0) -> None:
    """Until the hold of ``key`` ended because its caller hung up (more than ``before``)."""

    def gone() -> bool | None:
        holds = effect_client.stats(url)["holds"]
        return True if key not in holds["open_keys"] and holds["hung_up"] > before else None

    wait_for(f"the caller of key {key!r} to hang up while held", gone, deadline_s)
