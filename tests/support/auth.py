"""API tokens for in-process test servers, and channels whose calls carry them. The test
servers authenticate exactly as production does (coordinator/api/auth.py)."""

from __future__ import annotations

from typing import Any

import grpc

from coordinator.api.bearer import bearer_interceptors, with_bearer
from coordinator.api.credentials import ApiTokens

#: An all-projects operator token named "tester" (the actor of what tests do through it).
TEST_TOKEN = "test-operator-token"
#: truerun's own service identity: what `truerun coordinator` calls the capacity service with.
SERVICE_TOKEN = "test-service-token"
TEST_TOKENS_SPEC = f"tester={TEST_TOKEN}:*:operator;coordinator={SERVICE_TOKEN}:*:service"


def server_tokens(extra: str = "") -> ApiTokens:
    return ApiTokens.parse(";".join(filter(None, [TEST_TOKENS_SPEC, extra])))


def aio_channel(address: str, token: str = TEST_TOKEN, **options: Any) -> grpc.aio.Channel:
    """An asyncio channel whose every call carries ``token``."""
    return grpc.aio.insecure_channel(address, interceptors=bearer_interceptors(token), **options)


def sync_channel(address: str, token: str = TEST_TOKEN) -> tuple[grpc.Channel, grpc.Channel]:
    """(raw channel to close, intercepted channel to call on)."""
    raw = grpc.insecure_channel(address)
    return raw, with_bearer(raw, token)
