"""AIP-155 request ids: a repeated request gets the first answer back, byte for byte."""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from google.protobuf.message import Message

from coordinator.api import validation
from coordinator.store.base import RequestIdTaken, RequestRecord, RunReader
from kernel.errors import DomainError, RequestIdReused

M = TypeVar("M", bound=Message)


async def once(
    store: RunReader,
    method: str,
    request: Any,
    response_type: type[M],
    execute: Callable[[RequestRecord | None], Awaitable[M]],
    render: Callable[[Any], M],
) -> M:
    """Run ``execute`` once per request_id. ``execute`` hands the record to the store write,
    which calls ``record.render(what_was_committed)`` inside the same transaction."""
    if not request.request_id:
        return await execute(None)
    request_id = validation.request_id(request.request_id)
    payload = type(request)()
    payload.CopyFrom(request)
    payload.ClearField("request_id")
    digest = hashlib.sha256(
        method.encode() + b"\0" + payload.SerializeToString(deterministic=True)
    ).hexdigest()
    answer: dict[str, bytes] = {}

    def remember(committed: Any) -> bytes:
        # Deterministic bytes, and every answer is re-read from them, so the first call
        # and every replay send the same bytes (map order included).
        answer["bytes"] = render(committed).SerializeToString(deterministic=True)
        return answer["bytes"]

    async def first_answer() -> M | None:
        stored = await store.get_request(request_id)
        if stored is None:
            return None
        if (stored.method, stored.payload_hash) != (method, digest):
            raise RequestIdReused(
                f"request_id {request_id!r} was used for a different request",
                request_id=request_id,
            )
        return response_type.FromString(stored.response)

    record = RequestRecord(request_id, method, digest, remember)
    for _ in range(2):
        if (replay := await first_answer()) is not None:
            return replay
        try:
            response = await execute(record)
        except RequestIdTaken:
            continue  # a concurrent twin committed first: answer with its response
        except DomainError:
            # A twin in flight may have changed the state first; its answer is ours.
            if (replay := await first_answer()) is not None:
                return replay
            raise
        if "bytes" in answer:
            return response_type.FromString(answer["bytes"])
        return await first_answer() or response
    raise RequestIdReused(f"request_id {request_id!r} is in use", request_id=request_id)
