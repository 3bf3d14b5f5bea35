"""Per-attempt workspaces: a git worktree is created for workspace_path; a path that cannot
be isolated (no git repository) refuses the Start before anything runs."""

from __future__ import annotations

import subprocess
from pathlib import Path

from truerun.v1 import runtime_service_pb2 as pb

from tests.runtime.conftest import StartAgent
from tests.support.fake_runtime_server import FakeRuntimeServer


def git_repo(path: Path) -> Path:
    path.mkdir()
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    (path / "README").write_text("hello\n")
    subprocess.run(["git", "-C", str(path), "add", "README"], check=True)
    subprocess.run(
        [
            "git",
            "-C",
            str(path),
            "-c",
            "user.email=t@example.com",
            "-c",
            "user.name=t",
            "commit",
            "-q",
            "-m",
            "init",
        ],
        check=True,
    )
    return path


async def test_non_git_workspace_is_refused(
    server: FakeRuntimeServer, start_agent: StartAgent, root: Path
) -> None:
    await start_agent()
    await server.connected()
    plain = root / "plain"
    plain.mkdir()
    result = await server.start("a1", {"command": "touch ran"}, workspace_path=str(plain / "wt-a1"))
    assert not result.accepted and "git" in result.reason
    assert not (plain / "wt-a1").exists()
    assert server.events("a1") == []

    exists = await server.start("a2", {"command": "touch ran"}, workspace_path=str(plain))
    assert not exists.accepted and "not a git worktree" in exists.reason
    assert not (plain / "ran").exists()


async def test_worktree_is_created_per_attempt(
    server: FakeRuntimeServer, start_agent: StartAgent, root: Path
) -> None:
    repo = git_repo(root / "repo")
    await start_agent(limit=2)
    await server.connected()
    paths = [repo / ".worktrees" / name for name in ("a1", "a2")]
    for name, path in zip(("a1", "a2"), paths, strict=True):
        command = "git rev-parse --show-toplevel; cat README"
        assert (await server.start(name, {"command": command}, workspace_path=str(path))).accepted
    for name, path in zip(("a1", "a2"), paths, strict=True):
        terminal = await server.wait_for(lambda n=name: server.terminal(n), what=name)  # type: ignore[misc]
        assert terminal.type == pb.RUNTIME_EVENT_TYPE_SUCCEEDED
        assert server.output(name) == f"{path}\nhello\n"
    inside = await server.start("a3", {"command": "true"}, workspace_path=str(repo / ".worktrees"))
    assert not inside.accepted, "a plain directory inside the repo is no isolated worktree"
