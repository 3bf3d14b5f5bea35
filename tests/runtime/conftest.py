"""Fixtures for the runtime agent tests: a fake truerun server, short state dirs (a unix
socket path must stay under 108 bytes), in-process agents, and a final process sweep."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.helpers import OWNER, TOKEN, RunningAgent, sweep
from tests.support.fake_runtime_server import FakeRuntimeServer, fake_runtime_server
from truerun_runtime import Backoff
from truerun_runtime.agent.agent import Agent
from truerun_runtime.agent.config import AgentConfig

StartAgent = Callable[..., Awaitable[RunningAgent]]


@pytest.fixture
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="trt-"))
    try:
        yield path
    finally:
        sweep(path)
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def served() -> AsyncIterator[tuple[FakeRuntimeServer, str]]:
    async with fake_runtime_server() as pair:
        yield pair


@pytest.fixture
def server(served: tuple[FakeRuntimeServer, str]) -> FakeRuntimeServer:
    return served[0]


@pytest.fixture
def address(served: tuple[FakeRuntimeServer, str]) -> str:
    return served[1]


def agent_config(address: str, state_dir: Path, **overrides: Any) -> AgentConfig:
    settings: dict[str, Any] = {
        "server": address,
        "token": TOKEN,
        "owner_id": OWNER,
        "state_dir": state_dir,
        "limit": 1,
        "poll_s": 0.02,
        "backoff": Backoff(initial_s=0.05, max_s=0.2),
        "labels": ("linux", "test"),
    }
    settings.update(overrides)
    return AgentConfig(**settings)


@pytest.fixture
async def start_agent(root: Path, address: str) -> AsyncIterator[StartAgent]:
    running: list[RunningAgent] = []

    async def start(**overrides: Any) -> RunningAgent:
        overrides.setdefault("state_dir", root / "state")
        agent = Agent(agent_config(address, **overrides))
        handle = RunningAgent(agent, asyncio.create_task(agent.run()))
        running.append(handle)
        return handle

    yield start
    for handle in running:
        await handle.stop()
