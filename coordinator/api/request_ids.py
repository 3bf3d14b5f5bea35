"""AIP-155 request ids: a repeated request gets the first answer back, byte for byte."""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from google.protobuf.message import Message

from coordinator.api import validation
from coordinator.store.base import RequestIdTaken, RequestRecord, RunReader
from coordinator.store.snapshots import Snapshot, decode
from kernel.errors import DomainError, RequestIdReused

M = TypeVar("M", bound=Message)


async def once(
    store: RunReader,
    method: str,
    request: Any,
    response_type: type[M],
    execute: Callable[[RequestRecord | None], Awaitable[M]],
    render: Callable[[Snapshot], M],
    reused: Callable[[M], DomainError] | None = None,
) -> M:
    """Run ``execute`` once per request_id. ``execute`` hands the record to the store write,
    which keeps it, with a snapshot of what was committed, in the same transaction. Every
    answer (the first one and each replay) is rendered after the commit from that stored
    snapshot by ``render``, deterministically serialized, so all of them are the same bytes
    (map order included). Nothing of this layer runs inside the store.

    The id sent again with another request is refused: for another method always with
    REQUEST_ID_REUSED; for the same method with a different payload with what ``reused``
    makes of the first answer, when given (a create: IDEMPOTENCY_KEY_REUSED naming the first
    run, as the same idempotency key with another request is answered), else
    REQUEST_ID_REUSED. A request id in the reserved key space is RESERVED_KEY
    (``validation.request_id``)."""
    if not request.request_id:
        return await execute(None)
    request_id = validation.request_id(request.request_id)
    payload = type(request)()
    payload.CopyFrom(request)
    payload.ClearField("request_id")
    digest = hashlib.sha256(
        method.encode() + b"\0" + payload.SerializeToString(deterministic=True)
    ).hexdigest()

    async def first_answer() -> M | None:
        stored = await store.get_request(request_id)
        if stored is None:
            return None
        if stored.method != method or (stored.payload_hash != digest and reused is None):
            raise RequestIdReused(
                f"request_id {request_id!r} was used for a different request",
                request_id=request_id,
            )
        snapshot = decode(stored.snapshot)
        if snapshot is None:  # a record from before snapshots holds the answer's bytes
            answer = response_type.FromString(stored.snapshot)
        else:
            rendered = render(snapshot).SerializeToString(deterministic=True)
            answer = response_type.FromString(rendered)
        if stored.payload_hash != digest:
            assert reused is not None
            raise reused(answer)
        return answer

    record = RequestRecord(request_id, method, digest)
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
        # Committed with a record: the answer is the one every replay will get. Without one
        # (nothing changed, nothing was kept), the response as executed.
        return await first_answer() or response
    raise RequestIdReused(f"request_id {request_id!r} is in use", request_id=request_id)
