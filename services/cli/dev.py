"""`truerun dev`: every service in one process on SQLite in a data directory."""

from __future__ import annotations

import logging

from services.bootstrap import capacity, coordinator, open_observations, open_store
from services.config import Settings
from services.db.migrate import upgrade
from services.server import create_server, serve_until_signal

log = logging.getLogger(__name__)


async def run_dev(settings: Settings) -> None:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    database_url = settings.resolved_database_url()
    await upgrade(database_url)
    store = await open_store(database_url)
    try:
        app = coordinator(store)
        observations = await open_observations(settings.redis_url)
        caps = capacity(app, observations, settings.observation_ttl_ms)
        server, port = await create_server(app, settings.grpc_addr, caps)
        host = settings.grpc_addr.rsplit(":", 1)[0]
        print(f"grpc listening on {host}:{port}", flush=True)
        await serve_until_signal(server, settings.grace_seconds)
    finally:
        await store.close()
