"""Manual local tasks: ``truerun agent run-local -- cmd ...`` talks to the running agent
through the unix socket ``<state dir>/agent.sock`` (the state dir is 0700: only its user).

A manual task goes through the same local queue and limit D as truerun's attempts and counts
in the heartbeat's ``active`` / ``active_task_ids`` (as ``manual-<uuid>``), but truerun has no
durable row for it and it sends no events.

One JSON request line per connection; JSON answer lines:

- ``{"op": "run", "argv": [...], "cwd": "", "front": false, "wait": true}`` ->
  ``{"ok": true, "task_id": "manual-...", "log_path": "..."}``, then (with ``wait``) when it
  ended ``{"ok": true, "done": true, "state": "finished", "exit_code": 0}``;
- ``{"op": "status"}`` -> ``{"ok": true, "limit": D, "active": n, "active_task_ids": [...],
  "queued": q}``;
- an error: ``{"ok": false, "error": "..."}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .agent import Agent

log = logging.getLogger(__name__)
MAX_REQUEST = 1 << 20


async def serve_local(agent: Agent, path: Path) -> asyncio.Server:
    if len(str(path).encode()) > 100:
        raise OSError(f"the local socket path is too long for AF_UNIX: {path} (shorter state dir)")
    path.unlink(missing_ok=True)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await _serve_one(agent, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except Exception:
            log.exception("local request failed")
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    server = await asyncio.start_unix_server(handle, path=str(path), limit=MAX_REQUEST)
    path.chmod(0o600)
    return server


async def _serve_one(
    agent: Agent, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    async def send(message: dict[str, Any]) -> None:
        writer.write(json.dumps(message).encode() + b"\n")
        await writer.drain()

    try:
        request = json.loads(await reader.readline())
        op = request["op"]
    except (ValueError, KeyError, TypeError):
        await send({"ok": False, "error": "bad request"})
        return
    if op == "status":
        observation = agent.observe()
        await send(
            {
                "ok": True,
                "runtime_instance_id": agent.instance_id,
                "limit": observation.limit,
                "active": observation.active,
                "active_task_ids": list(observation.active_task_ids),
                "queued": observation.queued,
                "connected": agent.client.connected,
            }
        )
        return
    argv = request.get("argv")
    if op != "run" or not isinstance(argv, list) or not argv:
        await send({"ok": False, "error": 'expected {"op": "run", "argv": [...]}'})
        return
    runner = agent.start_manual(
        [str(a) for a in argv], str(request.get("cwd") or ""), bool(request.get("front"))
    )
    await send({"ok": True, "task_id": runner.record.task_id, "log_path": str(runner.paths.log)})
    if request.get("wait", True):
        await runner.done.wait()
        code = runner.result[1] if runner.result else None
        await send({"ok": True, "done": True, "state": runner.phase.value, "exit_code": code})


async def request(path: Path, message: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    """Send one request to the agent at ``path``; yield its answer lines."""
    reader, writer = await asyncio.open_unix_connection(str(path), limit=MAX_REQUEST)
    try:
        writer.write(json.dumps(message).encode() + b"\n")
        await writer.drain()
        while line := await reader.readline():
            yield json.loads(line)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
