"""Issue #11 §3: every listener serves TLS from files, gRPC optionally mTLS. The servers are
the production ones (services.server.start_serving, gateway.server.HttpServer,
services.metrics.Metrics.serve) with the TLS the settings give (kernel.tls.server_tls), on
127.0.0.1 with a throwaway PKI (tests/support/tls.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import httpx
import pytest
from truerun.v1 import run_service_pb2, run_service_pb2_grpc

from coordinator.api.bearer import bearer_interceptors
from gateway.app import GatewayConfig
from gateway.server import HttpServer
from kernel.config import Settings
from kernel.db.migrate import upgrade
from kernel.tls import ServerTls, TlsFiles, aio_channel, server_tls
from services.bootstrap import coordinator, open_store
from services.metrics import Metrics
from services.server import Serving, start_serving
from tests.support.auth import TEST_TOKEN, server_tokens
from tests.support.tls import Pki, make_pki


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path / "pki")


def _tls(pki: Pki, *, mtls: bool = False) -> ServerTls:
    tls = server_tls(Settings.from_env(pki.server_env(mtls=mtls)))
    assert tls is not None
    return tls


@asynccontextmanager
async def _serving(sqlite_url: str, tls: ServerTls) -> AsyncIterator[Serving]:
    await upgrade(sqlite_url)
    store = await open_store(sqlite_url)
    try:
        serving = await start_serving(
            coordinator(store), "127.0.0.1:0", tokens=server_tokens(), tls=tls
        )
        try:
            yield serving
        finally:
            await serving.server.stop(None)
    finally:
        await store.close()


async def _list_runs(address: str, files: TlsFiles) -> run_service_pb2.ListRunsResponse:
    async with aio_channel(address, files, interceptors=bearer_interceptors(TEST_TOKEN)) as ch:
        stub = run_service_pb2_grpc.RunServiceStub(ch)
        return await stub.ListRuns(run_service_pb2.ListRunsRequest(), timeout=5)


async def test_grpc_serves_tls_to_a_client_trusting_the_ca_and_refuses_plaintext(
    pki: Pki, sqlite_url: str
) -> None:
    async with _serving(sqlite_url, _tls(pki)) as serving:
        address = f"127.0.0.1:{serving.port}"
        answer = await _list_runs(address, pki.client_files(with_cert=False))
        assert list(answer.runs) == []
        # the same call, authenticated, over a plaintext channel: no connection at all
        with pytest.raises(grpc.aio.AioRpcError) as plain:
            await _list_runs(address, TlsFiles())
        assert plain.value.code() is grpc.StatusCode.UNAVAILABLE
        # TLS verifying against another CA: the server's certificate is refused
        other = make_pki(pki.ca.parent, prefix="other-")
        with pytest.raises(grpc.aio.AioRpcError) as untrusted:
            await _list_runs(address, other.client_files(with_cert=False))
        assert untrusted.value.code() is grpc.StatusCode.UNAVAILABLE


async def test_mtls_serves_only_clients_with_a_certificate_of_the_client_ca(
    pki: Pki, sqlite_url: str
) -> None:
    tls = _tls(pki, mtls=True)
    assert tls.mode == "mtls"
    async with _serving(sqlite_url, tls) as serving:
        address = f"127.0.0.1:{serving.port}"
        answer = await _list_runs(address, pki.client_files())
        assert list(answer.runs) == []
        with pytest.raises(grpc.aio.AioRpcError) as without:
            await _list_runs(address, pki.client_files(with_cert=False))
        assert without.value.code() is grpc.StatusCode.UNAVAILABLE
        # a certificate some other CA signed is no better than none
        other = make_pki(pki.ca.parent, prefix="other-")
        stranger = TlsFiles(str(pki.ca), str(other.client_cert), str(other.client_key))
        with pytest.raises(grpc.aio.AioRpcError) as foreign:
            await _list_runs(address, stranger)
        assert foreign.value.code() is grpc.StatusCode.UNAVAILABLE


async def test_the_gateway_serves_https_over_grpc_tls_and_refuses_plain_http(
    pki: Pki, sqlite_url: str
) -> None:
    tls = _tls(pki, mtls=True)
    async with _serving(sqlite_url, tls) as serving:
        config = GatewayConfig(
            grpc_target=f"127.0.0.1:{serving.port}",
            tokens=server_tokens(),
            tls=pki.client_files(),  # the gateway is a gRPC client like any other: mTLS
        )
        http = HttpServer(config, "127.0.0.1:0", tls=tls)
        await http.start()
        try:
            assert http.scheme == "https"
            async with httpx.AsyncClient(verify=pki.ssl_context(), timeout=5) as client:
                health = await client.get(f"https://{http.address}/healthz")
                assert health.status_code == 200
                runs = await client.get(
                    f"https://{http.address}/v1/projects/demo/runs",
                    headers={"authorization": f"Bearer {TEST_TOKEN}"},
                )
                assert runs.status_code == 200, runs.text
                assert runs.json()["runs"] == []
            async with httpx.AsyncClient(timeout=5) as plain:
                with pytest.raises(httpx.TransportError):
                    await plain.get(f"http://{http.address}/healthz")
        finally:
            await http.stop()


async def test_the_metrics_endpoint_serves_https_only(pki: Pki) -> None:
    metrics = Metrics()
    server, port = metrics.serve("127.0.0.1:0", _tls(pki))
    try:
        async with httpx.AsyncClient(verify=pki.ssl_context(), timeout=5) as client:
            answer = await client.get(f"https://127.0.0.1:{port}/metrics")
            assert answer.status_code == 200
            assert "truerun_run_transition_total" in answer.text
        async with httpx.AsyncClient(timeout=5) as plain:
            with pytest.raises(httpx.TransportError):
                await plain.get(f"http://127.0.0.1:{port}/metrics")
    finally:
        server.shutdown()
        server.server_close()
