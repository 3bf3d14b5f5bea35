"""Issue #37 "Guards that never lock out the honest", over gRPC directly: a flood of bad
tokens from one address never makes a valid token RESOURCE_EXHAUSTED; past the bound the bad
ones are, with a RetryInfo; a gateway's client-address metadata is believed only with the
gateway's valid :service token (docs/gateway.md "Client addresses"). SQLite and PostgreSQL
(the bound itself lives in the process, the calls reach the store)."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
from google.rpc import error_details_pb2, status_pb2
from truerun.v1 import run_service_pb2 as rs
from truerun.v1 import run_service_pb2_grpc

from coordinator.api.credentials import FailureLimit
from tests.integration.test_every_rpc_authenticates import (
    OPERATOR_TOKEN,
    SERVICE_TOKEN,
    auth_services,
)
from tests.integration.test_run_service_grpc import error_info
from tests.support.auth import aio_channel

BAD_CALLS = 1_000
BATCH = 50
#: FailureLimit's defaults (docs/gateway.md "Tokens and projects"; tests/unit/test_auth_bound.py).
PER_TOKEN, PER_SOURCE, WINDOW_S = 20, 100, 60


def _retry_delay_s(error: grpc.aio.AioRpcError) -> int | None:
    metadata: Any = error.trailing_metadata() or ()
    for key, value in metadata:
        if key == "grpc-status-details-bin":
            for detail in status_pb2.Status.FromString(value).details:
                retry = error_details_pb2.RetryInfo()
                if detail.Unpack(retry):
                    return int(retry.retry_delay.seconds)
    return None


async def _code(call: Any) -> tuple[grpc.StatusCode, grpc.aio.AioRpcError | None]:
    try:
        await call
    except grpc.aio.AioRpcError as error:
        return error.code(), error
    return grpc.StatusCode.OK, None


async def test_a_thousand_bad_tokens_never_refuse_a_valid_one(migrated_database_url: str) -> None:
    """1,000 calls with distinct bad tokens from one address, a valid caller on the same
    address between them: every valid call answers; the bad ones are UNAUTHENTICATED up to
    the per-source bound, then RESOURCE_EXHAUSTED with a RetryInfo."""
    async with (
        auth_services(migrated_database_url, FailureLimit()) as address,
        grpc.aio.insecure_channel(address) as bare,
        aio_channel(address, OPERATOR_TOKEN) as valid,
    ):
        guesses = run_service_pb2_grpc.RunServiceStub(bare)
        right = run_service_pb2_grpc.RunServiceStub(valid)
        bad: list[tuple[grpc.StatusCode, grpc.aio.AioRpcError | None]] = []
        good: list[grpc.StatusCode] = []
        for start in range(0, BAD_CALLS, BATCH):
            calls = [
                _code(
                    guesses.ListRuns(
                        rs.ListRunsRequest(project_id="proj-p"),
                        metadata=(("authorization", f"Bearer guess-{i}"),),
                    )
                )
                for i in range(start, start + BATCH)
            ]
            valid_calls = [
                _code(right.ListRuns(rs.ListRunsRequest(project_id="proj-p"))) for _ in range(5)
            ]
            answers = await asyncio.gather(*calls, *valid_calls)
            bad.extend(answers[:BATCH])
            good.extend(code for code, _ in answers[BATCH:])
    unauthenticated = [e for code, e in bad if code == grpc.StatusCode.UNAUTHENTICATED]
    exhausted = [e for code, e in bad if code == grpc.StatusCode.RESOURCE_EXHAUSTED]
    print(
        f"gRPC: {len(good)} valid calls, {good.count(grpc.StatusCode.OK)} OK; "
        f"{BAD_CALLS} bad: {len(unauthenticated)} UNAUTHENTICATED, "
        f"{len(exhausted)} RESOURCE_EXHAUSTED"
    )
    assert good == [grpc.StatusCode.OK] * len(good) and len(good) == 100
    assert len(unauthenticated) == PER_SOURCE
    assert len(exhausted) == BAD_CALLS - PER_SOURCE
    for error in exhausted:
        assert error is not None
        assert error_info(error).reason == "TOO_MANY_FAILED_AUTHENTICATIONS"
        delay = _retry_delay_s(error)
        assert delay is not None and 1 <= delay <= WINDOW_S


async def test_client_metadata_is_believed_only_with_the_gateways_service_token(
    migrated_database_url: str,
) -> None:
    """A caller naming a client address is counted by that address only when it also
    carries a valid :service token (a gateway vouching); anyone else is counted by its own
    peer address, whatever address it names."""
    limit = PER_TOKEN
    async with (
        auth_services(migrated_database_url, FailureLimit()) as address,
        grpc.aio.insecure_channel(address) as bare,
    ):
        stub = run_service_pb2_grpc.RunServiceStub(bare)

        async def guess(*extra: tuple[str, str]) -> grpc.StatusCode:
            metadata = (("authorization", "Bearer the-same-guess"), *extra)
            code, _ = await _code(stub.GetRun(rs.GetRunRequest(id="r"), metadata=metadata))
            return code

        vouched = [
            await guess(("x-truerun-gateway", SERVICE_TOKEN), ("x-truerun-client", f"10.0.0.{i}"))
            for i in range(limit + 5)
        ]
        # Vouched for: each client is its own source, none reaches the bound.
        assert vouched == [grpc.StatusCode.UNAUTHENTICATED] * (limit + 5)
        # Not vouched for (no token, a wrong one, a valid token of another role): the
        # named address is ignored and the peer's failures add up.
        spoofed = [
            await guess(("x-truerun-gateway", gateway), ("x-truerun-client", f"10.1.0.{i}"))
            for i, gateway in enumerate(["", "not-a-token", OPERATOR_TOKEN] * 8)
        ]
    assert spoofed[:limit] == [grpc.StatusCode.UNAUTHENTICATED] * limit
    assert set(spoofed[limit:]) == {grpc.StatusCode.RESOURCE_EXHAUSTED}
