"""``truerun dev`` in a process of its own, for the benchmarks that load a real server.

The server prints one line per listener ("metrics listening on ...", "grpc listening on ...",
"http listening on ...") and possibly a "plaintext on loopback (no TLS)" notice, in no fixed
order; ``start_server`` reads lines until the documented "grpc listening on <address>".
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

GRPC_LINE = re.compile(r"grpc listening on (\S+)")
START_TIMEOUT_S = 60.0


@dataclass
class ServerProcess:
    proc: asyncio.subprocess.Process
    address: str
    log_path: Path

    @property
    def pid(self) -> int:
        return self.proc.pid


async def start_server(url: str, tmp: Path, env: dict[str, str]) -> ServerProcess:
    """``truerun dev`` (uvloop) on ``url`` with gRPC on a free loopback port; ``env`` adds to
    (and overrides) the server's environment. Its stderr goes to ``tmp/server.log``."""
    data_dir = tmp / "server-data"
    data_dir.mkdir(exist_ok=True)
    log_path = tmp / "server.log"
    full_env = dict(
        os.environ,
        TRUERUN_DATABASE_URL=url,
        TRUERUN_GRPC_ADDR="127.0.0.1:0",
        TRUERUN_DATA_DIR=str(data_dir),
        TRUERUN_GRACE_SECONDS="1",
    )
    full_env.update(env)
    with log_path.open("wb") as log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "services.cli.main",
            "dev",
            stdout=asyncio.subprocess.PIPE,
            stderr=log,
            env=full_env,
        )
    server = ServerProcess(proc, "", log_path)
    try:
        server.address = await asyncio.wait_for(read_grpc_address(proc), START_TIMEOUT_S)
    except (TimeoutError, RuntimeError) as exc:
        await stop_server(server)
        reason = "timed out" if isinstance(exc, TimeoutError) else str(exc)
        output = log_path.read_text()
        raise RuntimeError(f"the server did not start ({reason}):\n{output}") from None
    except BaseException:
        await stop_server(server)
        raise
    return server


async def read_grpc_address(proc: asyncio.subprocess.Process) -> str:
    """Read the server's stdout up to its grpc line, whatever comes before it."""
    assert proc.stdout is not None
    seen: list[str] = []
    while line := (await proc.stdout.readline()).decode():
        if found := GRPC_LINE.search(line):
            return found.group(1)
        seen.append(line.rstrip())
    raise RuntimeError(f"its output ended without a grpc line: {seen!r}")


async def stop_server(server: ServerProcess) -> None:
    if server.proc.returncode is None:
        server.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(server.proc.wait(), 15)
        except TimeoutError:
            server.proc.kill()
            await server.proc.wait()
