"""The contract suite runs every test on SQLite and on real PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from coordinator.service.transitions import Transitions
from coordinator.store.base import RunStore
from services.bootstrap import open_store


@pytest.fixture
async def store(migrated_database_url: str) -> AsyncIterator[RunStore]:
    opened = await open_store(migrated_database_url)
    yield opened
    await opened.close()


@pytest.fixture
def transitions(store: RunStore) -> Transitions:
    return Transitions(store)
