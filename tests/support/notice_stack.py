"""The notices suites' pieces: a live coordinator as `truerun dev` wires it (LongTaskService
with the owners' notices, a webhook key, the door counted in metrics), with tokens for the
owner (alice, a person), another person of the same project (carol) and one of another
project (bob); and a tiny loopback HTTP receiver that records each POST and answers with
the statuses it is scripted with."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from truerun.v1 import long_task_service_pb2_grpc, run_service_pb2_grpc, runtime_service_pb2_grpc

from capacity.observations.memory import MemoryObservationStore
from coordinator.dispatch.tokens import ANY_OWNER, RuntimeTokens, token_hash
from services.bootstrap import capacity, coordinator, long_tasks, open_store, runtimes
from services.metrics import Metrics
from services.server import start_serving
from tests.support.auth import aio_channel, server_tokens
from tests.support.longtask_stack import BOB_TOKEN, LongTaskStack
from tests.support.runtime_stack import RUNTIME_TOKEN
from tests.support.schema_templates import migrate

if TYPE_CHECKING:
    from truerun.v1.long_task_service_pb2_grpc import LongTaskServiceAsyncStub

WEBHOOK_KEY = "notice-test-webhook-key"
ALICE_TOKEN, CAROL_TOKEN = "alice-token", "carol-token"


@dataclass
class NoticeStack:
    live: LongTaskStack  # ``tasks`` as alice, the owner (a person's token)
    metrics: Metrics
    carol: LongTaskServiceAsyncStub  # a person of the same project
    operator: LongTaskServiceAsyncStub  # tester, every project


@contextlib.asynccontextmanager
async def notice_stack(database_url: str, webhook_allow: str = "") -> AsyncIterator[NoticeStack]:
    await migrate(database_url)
    store = await open_store(database_url)
    app = coordinator(store)
    caps = capacity(app, MemoryObservationStore(), 15_000)
    side = runtimes(app, caps, RuntimeTokens({token_hash(RUNTIME_TOKEN): ANY_OWNER}))
    metrics = Metrics(CollectorRegistry())
    door = long_tasks(app, metrics=metrics)
    people = f"alice={ALICE_TOKEN}:proj;carol={CAROL_TOKEN}:proj;bob={BOB_TOKEN}:elsewhere"
    serving = await start_serving(
        app,
        "127.0.0.1:0",
        caps,
        side,
        tokens=server_tokens(people),
        long_tasks=door,
        notice_webhook_key=WEBHOOK_KEY,
        notice_webhook_allow=webhook_allow,
    )
    address = f"127.0.0.1:{serving.port}"
    channels = [aio_channel(address, t) for t in (ALICE_TOKEN, CAROL_TOKEN, BOB_TOKEN, "")]
    operator = aio_channel(address)
    alice, carol, bob, bare = channels
    try:
        yield NoticeStack(
            LongTaskStack(
                app,
                door,
                address,
                long_task_service_pb2_grpc.LongTaskServiceStub(alice),
                long_task_service_pb2_grpc.LongTaskServiceStub(bob),
                long_task_service_pb2_grpc.LongTaskAttemptServiceStub(bare),
                run_service_pb2_grpc.RunServiceStub(operator),
                runtime_service_pb2_grpc.RuntimeServiceStub(operator),
                long_task_service_pb2_grpc.RunPromotionServiceStub(bare),
            ),
            metrics,
            long_task_service_pb2_grpc.LongTaskServiceStub(carol),
            long_task_service_pb2_grpc.LongTaskServiceStub(operator),
        )
    finally:
        for channel in (*channels, operator):
            await channel.close(None)
        await serving.server.stop(0)
        await side.dispatcher.stop()
        await store.close()


@dataclass
class Received:
    path: str
    headers: dict[str, str]  # names in lower case
    body: bytes
    status: int


@dataclass
class Receiver:
    """Answers each POST with the next of ``statuses`` (the last one once they run out)."""

    statuses: list[int]
    port: int = 0
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@contextlib.contextmanager
def receiver(*statuses: int) -> Iterator[Receiver]:
    got = Receiver(list(statuses))

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with got.lock:
                status = got.statuses.pop(0) if len(got.statuses) > 1 else got.statuses[0]
                headers = {k.lower(): v for k, v in self.headers.items()}
                got.received.append(Received(self.path, headers, body, status))
            self.send_response(status)
            if 300 <= status < 400:  # a redirect elsewhere, which a sender must not follow
                self.send_header("Location", got.url("/elsewhere"))
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    got.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield got
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
