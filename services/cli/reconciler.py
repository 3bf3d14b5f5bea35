"""`truerun reconciler`: the periodic scans as their own process, on the shared database.

Safe with several replicas: every action is a compare-and-set through the transition
service, so two replicas acting on the same attempt cannot both win; startup resets nothing.
It also runs the scheduler loop (docs/automations.md): a due fire is claimed by exactly one
replica (FOR UPDATE SKIP LOCKED) and creates its run in the claim's transaction. And the
long-task watcher (docs/long-tasks.md "The watcher"): attempts whose run ended are ended,
queued long tasks started under each owner's concurrency cap, through the long-task door.
"""

from __future__ import annotations

import asyncio
import logging
import os

from coordinator.dispatch.retries import RetryScheduler
from kernel.config import Settings
from kernel.tls import server_tls
from reconciler.leases import LeaseReconciler
from reconciler.output_retention import OutputRetention
from services.bootstrap import (
    broken_references,
    coordinator,
    long_task_retention,
    long_task_watcher,
    notice_delivery,
    open_store,
    schedule_event_retention,
    scheduler,
)
from services.metrics import RECONCILER_PARTS, Metrics
from services.server import print_listening, start_serving, until_signal

log = logging.getLogger(__name__)


async def run_reconciler(settings: Settings) -> None:
    tls = server_tls(settings)
    store = await open_store(settings.resolved_database_url())
    try:
        metrics = Metrics(parts=RECONCILER_PARTS)
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
            # Schedules: every replica runs the loop; a due fire is claimed by one of them.
            asyncio.create_task(
                scheduler(app, f"reconciler:{os.getpid()}", metrics=metrics).serve()
            ),
            # Long tasks: every replica ends attempts whose run ended and starts queued
            # tasks; each decision is one door transaction, a race is a conflict.
            asyncio.create_task(
                long_task_watcher(
                    app,
                    f"reconciler:{os.getpid()}",
                    settings.long_task_owner_concurrency,
                    metrics=metrics,
                ).serve()
            ),
            asyncio.create_task(
                metrics.watch_ages(store, settings.metrics_scan_interval_ms / 1000)
            ),
            # Notices: every replica posts due deliveries; a row is claimed by one of them.
            *(
                [
                    asyncio.create_task(
                        notice_delivery(
                            app,
                            settings.webhook_key,
                            settings.notice_max_deliveries,
                            settings.notice_retry_base_ms,
                            metrics=metrics,
                            webhook_allow=settings.notice_webhook_allow,
                        ).serve()
                    )
                ]
                if settings.webhook_key
                else []
            ),
            asyncio.create_task(
                schedule_event_retention(app, settings.schedule_event_retention_days).serve()
            ),
            asyncio.create_task(
                OutputRetention(app.transitions, settings.output_retention_days).serve()
            ),
            # Long tasks: broken evidence references marked once at start; retention by
            # terminality (docs/long-tasks.md "Retention and export").
            asyncio.create_task(broken_references(app).run_once()),
            asyncio.create_task(
                long_task_retention(app, settings.long_task_retention_days).serve()
            ),
        ]
        metrics_server, metrics_port = metrics.serve(settings.metrics_addr, tls)
        # gRPC health (and reflection) only: what the chart's probes and load balancers ask.
        serving = await start_serving(
            app,
            settings.grpc_addr,
            run_service=False,
            tokens=None,
            tls=tls,
            rpc_metrics=metrics.rpc,
        )
        print_listening(settings, metrics_port, serving.port, tls)
        print("reconciler running", flush=True)
        await until_signal()
        await serving.health.enter_graceful_shutdown()
        for task in loops:
            task.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        await serving.server.stop(settings.grace_seconds)
        metrics_server.shutdown()
        metrics_server.server_close()
    finally:
        await store.close()
