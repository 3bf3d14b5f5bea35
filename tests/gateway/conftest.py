"""Gateway fixtures: a live stack (gRPC services + the gateway on real loopback ports) per
database backend, and an HTTP client for it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from tests.support.gateway_stack import GatewayStack, gateway_stack


@pytest.fixture
async def stack(database_url: str) -> AsyncIterator[GatewayStack]:
    async with gateway_stack(database_url) as live:
        yield live


@pytest.fixture
async def http(stack: GatewayStack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=30.0) as client:
        yield client
