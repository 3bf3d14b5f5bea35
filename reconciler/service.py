"""`truerun reconciler`: the periodic scans as their own process, on the shared database.

Safe with several replicas: every action is a compare-and-set through the transition
service, so two replicas acting on the same attempt cannot both win; startup resets nothing.
"""

from __future__ import annotations

import asyncio
import logging
import signal

from coordinator.dispatch.retries import RetryScheduler
from reconciler.leases import LeaseReconciler
from services.bootstrap import coordinator, open_store
from services.config import Settings
from services.metrics import Metrics

log = logging.getLogger(__name__)


async def run_reconciler(settings: Settings) -> None:
    store = await open_store(settings.resolved_database_url())
    try:
        metrics = Metrics()
        app = coordinator(store, metrics)
        loops = [
            asyncio.create_task(
                LeaseReconciler(
                    app.transitions,
                    on_action=lambda outcome: metrics.reconciles.labels("lease", outcome).inc(),
                    lost_after_ms=settings.lost_after_ms,
                    no_output_cancel_after_ms=settings.no_output_cancel_after_ms,
                    max_recoveries=settings.max_recoveries,
                ).serve()
            ),
            asyncio.create_task(RetryScheduler(app.transitions).serve()),
            asyncio.create_task(metrics.watch_ages(store)),
        ]
        metrics_server, metrics_port = metrics.serve(settings.metrics_addr)
        metrics_host = settings.metrics_addr.rsplit(":", 1)[0]
        print(f"metrics listening on {metrics_host}:{metrics_port}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        print("reconciler running", flush=True)
        await stop.wait()
        for task in loops:
            task.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        metrics_server.shutdown()
        metrics_server.server_close()
    finally:
        await store.close()
