"""The line protocol between bench.lifecycle and a peer's processes (standard library and
psycopg only: this runs in the peer venv).

A worker prints ``ready <pid>`` once set up (``pid``: the backend of its done-poller
connection, which a statement count leaves out), ``warm`` after the warm-up's jobs, and
``done <time> <handled>`` once its database shows every expected job finished, committed.
A producer prints ``ready``, then for each line ``N`` on its stdin makes N jobs with its
producers (one call per job) and prints ``produced <t0> <t1>``; it ends at EOF."""

from __future__ import annotations

import importlib
import sys
import time
from typing import Any

POLL_S = 0.005  # only while the last jobs' completions commit: the handler count is reached


def say(*words: object) -> None:
    print(*words, flush=True)


def connect(dsn: str) -> Any:
    """A plain autocommit psycopg connection (the done-poller's)."""
    psycopg = importlib.import_module("psycopg")
    return psycopg.connect(dsn, autocommit=True)


def backend_pid(connection: Any) -> int:
    return int(connection.execute("SELECT pg_backend_pid()").fetchone()[0])


def wait_done(connection: Any, count_sql: str, expected: int, timeout_s: float = 600) -> None:
    """Until ``count_sql`` (the peer's finished jobs) reaches ``expected``."""
    deadline = time.monotonic() + timeout_s
    while int(connection.execute(count_sql).fetchone()[0]) < expected:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{expected} jobs not finished in {timeout_s:g} s")
        time.sleep(POLL_S)


def commands() -> Any:
    """The producer's commands: job counts, one a line, until EOF."""
    for line in sys.stdin:
        if line.strip():
            yield int(line)
