"""What an AIP-155 request record keeps: a snapshot of what the request's transaction
committed, as JSON (docs/architecture.md, "Request ids").

The store writes it in the same transaction as the change, so a replay after a crash right
after the commit still finds it; the API layer renders every answer (the first one and
every replay) from it after the commit, with one deterministic renderer. Nothing of the API
layer runs inside the store. Rows are kept with the row mappers (``rows.py``), so a
snapshot reads back exactly like the row would have.
"""

from __future__ import annotations

import json
from typing import Any

from coordinator.domain.model import Attempt, Run
from coordinator.store.base import Loaded
from coordinator.store.rows import attempt_from_row, attempt_values, dumps, run_from_row, run_values

#: A JSON object: what was committed, in the row mappers' values.
Snapshot = dict[str, Any]


def run_snapshot(run: Run, attempt: Attempt | None) -> Snapshot:
    """The run and its attempt as committed: what a run-changing request is answered from."""
    return {
        "run": run_values(run),
        "attempt": attempt_values(attempt) if attempt is not None else None,
    }


def run_from_snapshot(snapshot: Snapshot) -> Loaded:
    attempt = snapshot["attempt"]
    # A snapshot kept before a run column existed lacks it: the column's value for the runs
    # of that time (request_fingerprint, migration 0023, and approval, 0024: none).
    run = {**_RUN_COLUMNS_ADDED, **snapshot["run"]}
    return Loaded(run_from_row(run), attempt_from_row(attempt) if attempt is not None else None)


#: Run columns added after request records began keeping snapshots, with the value a run
#: of before has (a record is kept as long as request ids are: one may predate a column).
_RUN_COLUMNS_ADDED: dict[str, Any] = {"request_fingerprint": None, "approval": None}


def encode(snapshot: Snapshot) -> bytes:
    """Deterministic bytes (sorted keys): the same snapshot is always the same record."""
    return dumps(snapshot).encode()


def decode(stored: bytes) -> Snapshot | None:
    """The snapshot a record keeps; ``None`` for a record written before snapshots, which
    holds the answer's serialized bytes themselves (a protobuf message never starts with
    ``{``: that would be field 15 as a group, which no response has)."""
    if not stored.startswith(b"{"):
        return None
    value = json.loads(stored)
    assert isinstance(value, dict), "a request record's snapshot is a JSON object"
    return value
