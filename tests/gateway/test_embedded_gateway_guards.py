"""Issue #37: `truerun dev`'s embedded gateway, whose every upstream call comes from
127.0.0.1, with many bad-token clients on that same address: another client's valid token
is never refused, over REST and over gRPC to the same process; the bad ones are refused
past the bound with Retry-After (docs/gateway.md "Client addresses")."""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from pathlib import Path

import grpc
import httpx
from truerun.v1 import run_service_pb2 as rs
from truerun.v1 import run_service_pb2_grpc

from tests.support.auth import aio_channel
from tests.support.processes import Processes

HTTP = re.compile(r"^http listening on (\S+:\d+)$", re.MULTILINE)
RUNS = "/v1/projects/default/runs"
CLIENTS = 40  # bad-token clients, each trying a few guesses
GUESSES = 5
#: FailureLimit's defaults (docs/gateway.md "Tokens and projects"; tests/unit/test_auth_bound.py).
PER_TOKEN, PER_SOURCE, WINDOW_S = 20, 100, 60


async def _flood_and_serve(http_address: str, grpc_address: str, token: str) -> None:
    async with (
        httpx.AsyncClient(base_url=f"http://{http_address}", timeout=30) as http,
        aio_channel(grpc_address, token) as channel,
    ):
        valid_grpc = run_service_pb2_grpc.RunServiceStub(channel)
        good: list[int] = []
        bad: list[httpx.Response] = []
        for client in range(CLIENTS):
            guesses = [
                http.get(RUNS, headers={"Authorization": f"Bearer client-{client}-{g}"})
                for g in range(GUESSES)
            ]
            valid = http.get(RUNS, headers={"Authorization": f"Bearer {token}"})
            *answers, answered = await asyncio.gather(*guesses, valid)
            bad.extend(answers)
            good.append(answered.status_code)
            listed = await valid_grpc.ListRuns(rs.ListRunsRequest(project_id="default"))
            assert listed is not None  # OK, never RESOURCE_EXHAUSTED
    codes = Counter(answer.status_code for answer in bad)
    print(
        f"embedded gateway: {len(good)} valid requests, {good.count(200)} x 200, "
        f"{len(good)} gRPC OK; {len(bad)} bad: {codes[401]} x 401, {codes[429]} x 429"
    )
    assert good == [200] * CLIENTS
    assert codes == {401: PER_SOURCE, 429: CLIENTS * GUESSES - PER_SOURCE}
    assert all("retry-after" in a.headers for a in bad if a.status_code == 429)


def test_the_embedded_gateway_never_locks_out_a_valid_client(tmp_path: Path) -> None:
    procs = Processes(tmp_path)
    try:
        dev = procs.dev(tmp_path / "data", {"TRUERUN_HTTP_ADDR": "127.0.0.1:0"})
        http_address = dev.wait_for_log(HTTP).group(1)
        token = (tmp_path / "data" / "api.token").read_text().strip()
        asyncio.run(_flood_and_serve(http_address, dev.address, token))
        # Bad tokens straight to the gRPC port are the peer's own failures: the valid
        # token still answers there.
        asyncio.run(_grpc_guesses_then_valid(dev.address, token))
        # ... and never the gateway's: its upstream calls for a valid client still pass.
        with httpx.Client(base_url=f"http://{http_address}", timeout=30) as http:
            answer = http.get(RUNS, headers={"Authorization": f"Bearer {token}"})
            assert answer.status_code == 200, answer.text
        assert dev.stop() == 0
    finally:
        procs.close()


async def _grpc_guesses_then_valid(address: str, token: str) -> None:
    async with grpc.aio.insecure_channel(address) as bare, aio_channel(address, token) as right:
        guesses = run_service_pb2_grpc.RunServiceStub(bare)
        codes = []
        for i in range(PER_SOURCE + 5):
            try:
                await guesses.ListRuns(
                    rs.ListRunsRequest(project_id="default"),
                    metadata=(("authorization", f"Bearer guess-{i}"),),
                )
            except grpc.aio.AioRpcError as error:
                codes.append(error.code())
        assert codes[-1] == grpc.StatusCode.RESOURCE_EXHAUSTED
        stub = run_service_pb2_grpc.RunServiceStub(right)
        assert await stub.ListRuns(rs.ListRunsRequest(project_id="default")) is not None
