"""Issue #37 over a real gRPC stream, the real gateway and the real CLI, on SQLite and
PostgreSQL: secrets of every format of the corpus, cut across OUTPUT chunks at chosen points
(inside the word before the value, at its start, inside it, three ways), never show an
8-character fragment in ReadRunOutput, REST ``/output``, the SSE ``:stream``, ``truerun logs``,
any table (every column of every row as text), nor the SQLite file and its WAL, while the
line is still held and after the attempt ended. The exhaustive cuts are the pure test
(tests/unit/test_redaction_stream.py); this is the end-to-end slice."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import httpx
import pytest
from truerun.v1 import run_service_pb2 as rs
from truerun.v1 import runtime_service_pb2 as pb

from gateway.app import GatewayConfig
from gateway.server import HttpServer
from kernel.db.meta import metadata
from tests.support.auth import TEST_TOKEN, server_tokens
from tests.support.processes import TRUERUN
from tests.support.runtime_stack import Stack, runtime_stack
from tests.support.scripted_runtime import ScriptedRuntime
from tests.support.secret_corpus import FORMATS, secret_part
from tests.support.sse_client import open_stream

AUTH = {"Authorization": f"Bearer {TEST_TOKEN}"}
#: held open while the tables and the file are read: the start of a token, no newline yet
OPEN_LINE = "Authorization: Bearer Zq9Xw8Vu7Ts6"
OPEN_REST = "Rp5On4Ml3Kj2Ih1\n"
OPEN_SECRET = "Zq9Xw8Vu7Ts6Rp5On4Ml3Kj2Ih1"


@pytest.fixture
async def stack(migrated_database_url: str) -> AsyncIterator[Stack]:
    async with runtime_stack(migrated_database_url) as live:
        yield live


@pytest.fixture
async def rest(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    server = HttpServer(
        GatewayConfig(grpc_target=stack.address, tokens=server_tokens()), "127.0.0.1:0"
    )
    await server.start()
    try:
        async with httpx.AsyncClient(
            base_url=f"http://{server.address}", headers=AUTH, timeout=30
        ) as client:
            yield client
    finally:
        await server.stop()


def _plan() -> tuple[str, list[int]]:
    """The output text (every format, on lines of its own, three times) and where it is
    cut: two ways (before the value's first character, two into it, in its middle) and
    three ways (a third and two thirds in)."""
    text, cuts = "", []
    for name, value in sorted(FORMATS.items()):
        secret = secret_part(value)
        for ways in ((-2, 2), (0,), ("mid",), ("third", "two_thirds")):
            line = f"{name} says {value} ok\n"
            at = line.index(secret)
            for way in ways:
                point = {
                    "mid": at + len(secret) // 2,
                    "third": at + len(secret) // 3,
                    "two_thirds": at + 2 * len(secret) // 3,
                }.get(str(way), at + way if isinstance(way, int) else at)
                cuts.append(len(text) + point)
            text += line
    return text, sorted(set(cuts))


def _fragments() -> set[str]:
    secrets = [secret_part(value) for value in FORMATS.values()] + [OPEN_SECRET]
    return {s[i : i + 8] for s in secrets for i in range(len(s) - 7)}


FRAGMENTS = _fragments()


def _leaked(text: str | bytes) -> list[str]:
    if isinstance(text, bytes):
        return sorted(f for f in FRAGMENTS if f.encode() in text)
    return sorted(f for f in FRAGMENTS if f in text)


async def _tables(database_url: str) -> str:
    """Every row of every table, as text."""
    tables = [table.name for table in metadata.sorted_tables]
    if database_url.startswith("sqlite:///"):
        conn = sqlite3.connect(database_url.removeprefix("sqlite:///"))
        try:
            return "\n".join(
                repr(row) for table in tables for row in conn.execute(f"SELECT * FROM {table}")
            )
        finally:
            conn.close()
    pg = await asyncpg.connect(database_url)
    try:
        rows = [await pg.fetch(f"SELECT t::text AS row FROM {table} t") for table in tables]
        return "\n".join(str(row["row"]) for found in rows for row in found)
    finally:
        await pg.close()


def _file_bytes(database_url: str) -> bytes:
    """The SQLite database file and its WAL as they are on disk (the WAL first, then both
    after a checkpoint moved it into the file): b"" on PostgreSQL."""
    if not database_url.startswith("sqlite:///"):
        return b""
    path = Path(database_url.removeprefix("sqlite:///"))
    wal = path.with_name(path.name + "-wal")
    before = wal.read_bytes() if wal.exists() else b""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
    finally:
        conn.close()
    after = wal.read_bytes() if wal.exists() else b""
    return before + path.read_bytes() + after


async def _cli_logs(stack: Stack, run_id: str) -> str:
    env = {**os.environ, "TRUERUN_SERVER": stack.address, "TRUERUN_API_TOKEN": TEST_TOKEN}
    process = await asyncio.create_subprocess_exec(
        TRUERUN,
        "logs",
        run_id,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    return out.decode()


async def _sse(rest: httpx.AsyncClient, run_id: str) -> str:
    texts = []
    async with open_stream(rest, f"/v1/projects/p/runs/{run_id}/output:stream", AUTH) as stream:
        while (message := await stream.next_message()).event != "end":
            if message.event == "output":
                texts.append(message.json()["text"])
    return "".join(texts)


async def test_secrets_cut_across_chunks_reach_no_reader_table_or_file(
    stack: Stack, rest: httpx.AsyncClient, migrated_database_url: str
) -> None:
    text, cuts = _plan()
    chunks = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True) if a < b]
    chunks += [OPEN_LINE]
    run_id = (
        await stack.runs.CreateRun(
            rs.CreateRunRequest(project_id="p", owner_id="alice", task_id="t")
        )
    ).run.id
    runtime = ScriptedRuntime(stack.runtime)
    await runtime.connect()
    try:
        await runtime.heartbeat(limit=1)
        start = (await runtime.expect("start")).start
        await runtime.answer_start(start, accepted=True)
        await runtime.event(start, 1, pb.RUNTIME_EVENT_TYPE_ACCEPTED)
        await runtime.event(start, 2, pb.RUNTIME_EVENT_TYPE_RUNNING)
        offset, seq = 0, 2
        for chunk in chunks:
            seq += 1
            payload = {"data": chunk, "offset": offset}
            await runtime.event(start, seq, pb.RUNTIME_EVENT_TYPE_OUTPUT, payload=payload)
            offset += len(chunk.encode())
        await runtime.acked(start.attempt_id, seq, timeout=60)
        # the attempt row holds the start of a token now: nowhere in clear
        assert _leaked(await _tables(migrated_database_url)) == []
        assert _leaked(_file_bytes(migrated_database_url)) == []
        seq += 1
        payload = {"data": OPEN_REST, "offset": offset}
        await runtime.event(start, seq, pb.RUNTIME_EVENT_TYPE_OUTPUT, payload=payload)
        seq += 1
        await runtime.event(start, seq, pb.RUNTIME_EVENT_TYPE_SUCCEEDED, exit_code=0)
        await runtime.acked(start.attempt_id, seq, timeout=60)
    finally:
        await runtime.close()

    grpc = await stack.runs.ReadRunOutput(rs.ReadRunOutputRequest(run_id=run_id, max_bytes=1 << 20))
    output = "".join(chunk.text for chunk in grpc.chunks)
    page = await rest.get(f"/v1/projects/p/runs/{run_id}/output", params={"max_bytes": 1 << 20})
    assert page.status_code == 200, page.text
    readers = {
        "grpc": output,
        "rest": page.text,
        "sse": await _sse(rest, run_id),
        "cli": await _cli_logs(stack, run_id),
        "tables": await _tables(migrated_database_url),
    }
    assert {name: _leaked(seen) for name, seen in readers.items()} == {name: [] for name in readers}
    assert _leaked(_file_bytes(migrated_database_url)) == []
    # every line is there, its words around the secret kept
    lines = output.splitlines()
    assert len(lines) == 4 * len(FORMATS) + 1 and lines[-1].endswith("[redacted]")
    assert all(line.endswith(" ok") and "[redacted]" in line for line in lines[:-1]), lines
    assert readers["sse"] == output and readers["cli"].rstrip("\n") == output.rstrip("\n")
