"""A run's secret env is a reference the agent resolves when the command starts (issue #11
§4): the value comes from the agent's secrets dir or TRUERUN_SECRET_<NAME>, reaches the
command, and is written nowhere in the state dir; a secret the agent lacks refuses the Start
as an invalid spec."""

from __future__ import annotations

from pathlib import Path

from truerun.v1 import runtime_service_pb2 as pb

from tests.runtime.conftest import StartAgent
from tests.support.fake_runtime_server import FakeRuntimeServer

VALUE = "correct-horse-battery-staple"


async def test_a_secret_reference_reaches_the_command_and_no_file(
    server: FakeRuntimeServer, start_agent: StartAgent, root: Path
) -> None:
    secrets = root / "secrets"
    secrets.mkdir()
    (secrets / "db").write_text(VALUE + "\n")
    running = await start_agent(secrets_dir=secrets)
    await server.connected()
    out = root / "seen"
    spec = {
        "command": f'printf %s "$DB_PASSWORD" > {out}; env > {root}/env',
        "env": {"DB_PASSWORD": {"secret_ref": "db"}, "MODE": "fast"},
    }
    assert (await server.start("a1", spec)).accepted
    done = await server.wait_for(lambda: server.terminal("a1"), what="terminal")
    assert done.type == pb.RUNTIME_EVENT_TYPE_SUCCEEDED
    assert out.read_text() == VALUE
    assert "MODE=fast" in (root / "env").read_text()
    state = running.agent.config.state_dir
    for path in state.rglob("*"):
        if path.is_file():
            assert VALUE.encode() not in path.read_bytes(), path


async def test_a_secret_the_agent_lacks_refuses_the_start_for_good(
    server: FakeRuntimeServer, start_agent: StartAgent, root: Path
) -> None:
    await start_agent(secrets_dir=root / "none")
    await server.connected()
    spec = {"command": "true", "env": {"TOKEN": {"secret_ref": "api"}}}
    result = await server.start("a1", spec)
    assert not result.accepted
    assert result.refusal == pb.START_REFUSAL_INVALID_SPEC
    assert "secret api is not available on this runtime" in result.reason
    assert server.events("a1") == []
