"""Reading a run's stored output through ReadRunOutput (sync stubs of the process tests)."""

from __future__ import annotations

from typing import Any

from truerun.v1 import run_service_pb2


def read_output(runs: Any, run_id: str, attempt_id: str = "", timeout: float = 10.0) -> str:
    """The whole stored output of the run's current attempt (or ``attempt_id``)."""
    text: list[str] = []
    offset = 0
    while True:
        page = runs.ReadRunOutput(
            run_service_pb2.ReadRunOutputRequest(
                run_id=run_id, attempt_id=attempt_id, offset=offset, max_bytes=1 << 20
            ),
            timeout=timeout,
        )
        text += [chunk.text for chunk in page.chunks]
        if page.next_offset >= page.stored_bytes or page.next_offset == offset:
            return "".join(text)
        offset = page.next_offset
