"""The composition root: opens the store named by a database URL and wires the services."""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.service.hub import EventHub
from coordinator.service.queries import RunQueries
from coordinator.service.transitions import Transitions
from coordinator.store.base import RunStore
from coordinator.store.postgres import PostgresStore
from coordinator.store.sqlite import SqliteStore


async def open_store(database_url: str) -> RunStore:
    if database_url.startswith("postgresql://"):
        return await PostgresStore.connect(database_url)
    if database_url.startswith("sqlite:///"):
        return await SqliteStore.open(database_url.removeprefix("sqlite:///"))
    raise ValueError(f"unsupported database URL {database_url!r} (postgresql:// or sqlite:///)")


@dataclass(frozen=True, slots=True)
class Coordinator:
    store: RunStore
    hub: EventHub
    transitions: Transitions
    queries: RunQueries


def coordinator(store: RunStore) -> Coordinator:
    hub = EventHub()
    return Coordinator(store, hub, Transitions(store, on_commit=hub.publish), RunQueries(store))
