"""Per-attempt git worktrees (agents with R > 1 need isolated workspaces; seed A §2).

A Start's ``workspace_path`` must be the top of a git worktree. If it does not exist yet it is
created with ``git worktree add --detach`` from the repository that contains its nearest
existing parent directory. A path whose parent is not in a git repository is refused: the
isolation check runs again right before Start, as the design asks.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path


class WorkspaceError(Exception):
    """The workspace cannot be isolated; the Start is refused with this reason."""


async def prepare_worktree(path: str) -> Path:
    """The worktree at ``path``, created if needed; raises WorkspaceError with the reason."""
    target = Path(path)
    if not target.is_absolute():
        raise WorkspaceError(f"workspace_path must be absolute: {path!r}")
    if target.exists():
        top = await _toplevel(target)
        if top is None or os.path.realpath(top) != os.path.realpath(target):
            raise WorkspaceError(f"workspace_path {path} exists but is not a git worktree")
        return target
    parent = target.parent
    while not parent.exists():
        parent = parent.parent
    repo = await _toplevel(parent)
    if repo is None:
        raise WorkspaceError(
            f"workspace_path {path}: {parent} is not in a git repository "
            "(concurrent attempts need a git worktree each)"
        )
    code, output = await _git(repo, "worktree", "add", "--detach", str(target))
    if code != 0:
        raise WorkspaceError(f"git worktree add {path} failed: {output.strip()[-300:]}")
    return target


async def _toplevel(directory: Path) -> str | None:
    code, output = await _git(directory, "rev-parse", "--show-toplevel")
    return output.strip() if code == 0 and output.strip() else None


async def _git(directory: Path | str, *args: str) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    try:
        process = await asyncio.create_subprocess_exec(
            "git",
            "-C",
            str(directory),
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
        )
    except FileNotFoundError:
        return 127, "git is not installed"
    out, _ = await process.communicate()
    return process.returncode or 0, out.decode(errors="replace")
