"""Integration fixtures: a real RunService gRPC server over each database backend."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.support.grpc_server import GrpcApi, grpc_run_service


@pytest.fixture
async def grpc_api(migrated_database_url: str) -> AsyncIterator[GrpcApi]:
    """(stub, store, address) of a server on 127.0.0.1:0, once per backend (sqlite, postgres).

    Ask for ``migrated_database_url`` as well to read the same database directly.
    """
    async with grpc_run_service(migrated_database_url, migrate=False) as api:
        yield api
