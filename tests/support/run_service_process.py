"""A RunService server in a process of its own, for tests that need a second server on the same
database (``python -m tests.support.run_service_process URL``).

It serves on 127.0.0.1:0, prints ``listening on HOST:PORT`` once it serves, and stops when its
standard input closes, so a test that dies leaves no server behind.
"""

from __future__ import annotations

import asyncio
import sys

from tests.support.grpc_server import grpc_run_service


async def serve(database_url: str) -> None:
    async with grpc_run_service(database_url, migrate=False) as api:
        print(f"listening on {api.address}", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1]))
