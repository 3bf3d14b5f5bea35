"""With the services unreachable the gateway answers 503 problem+json (never a 500, never a
hang), and still serves what needs no services: /healthz and the OpenAPI document."""

from __future__ import annotations

import socket

import httpx

from gateway.app import GatewayConfig
from gateway.server import HttpServer
from gateway.tokens import ApiTokens


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_unreachable_services_are_503_problems() -> None:
    tokens = ApiTokens.parse("t:*")
    server = HttpServer(GatewayConfig(f"127.0.0.1:{_closed_port()}", tokens), "127.0.0.1:0")
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=f"http://{server.address}", timeout=30) as http:
            auth = {"Authorization": "Bearer t"}
            run = "/v1/projects/p/runs/01a229c5-5410-7257-9b88-f5eaf8ec3811"
            for method, path in (
                ("GET", "/v1/projects/p/runs"),
                ("GET", run),
                ("GET", f"{run}/events:stream"),
                ("POST", f"{run}:cancel"),
                ("GET", "/v1/agents/a"),
            ):
                response = await http.request(method, path, headers=auth)
                assert response.status_code == 503, (path, response.text)
                assert response.headers["content-type"].startswith("application/problem+json")
                assert response.json()["status"] == 503
            created = await http.post(
                "/v1/projects/p/runs", json={"owner_id": "o", "task_id": "t"}, headers=auth
            )
            assert created.status_code == 503
            assert (await http.get("/healthz")).status_code == 200
            assert (await http.get("/v1/openapi.json")).status_code == 200
    finally:
        await server.stop()
