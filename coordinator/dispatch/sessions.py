"""Connected runtime streams, by runtime instance."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field

from truerun.v1 import runtime_service_pb2 as pb

from kernel.errors import DomainError

MAX_STARTS_BYTES = 1 << 20  # one Starts message carries at most ~1 MiB of Starts


@dataclass
class Resend:
    """When this stream last sent one attempt's Cancel (or Inspect), and how long until the
    next."""

    sent_at: float  # the event loop's clock
    gap_s: float


@dataclass
class Session:
    owner_id: str
    runtime_instance_id: str
    device_ids: tuple[str, ...]
    #: Hello's lineage ('' when the runtime makes no lineage promise).
    lineage: str = ""
    #: Hello's agent_version ('' when the runtime sent none).
    agent_version: str = ""
    #: Hello's accepts_batches: the runtime reads a round's Starts in one Starts message.
    accepts_batches: bool = False
    #: The projects the runtime's token serves (None: every project; docs/tenancy.md):
    #: every claim for this stream takes runs of these only.
    projects: list[str] | None = None
    #: What the stream sends, in order; an error ends the stream with its status.
    outbox: asyncio.Queue[pb.ConnectResponse | DomainError] = field(default_factory=asyncio.Queue)
    #: Start results awaited by the dispatcher, by attempt id.
    pending_starts: dict[str, asyncio.Future[pb.StartResult]] = field(default_factory=dict)
    #: Set by every heartbeat and every terminal event: "capacity may have changed".
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    closed: bool = False
    #: Orphan tasks already recorded on this stream (the Cancel is re-sent every heartbeat).
    reported_orphans: set[str] = field(default_factory=set)
    #: Cancels sent on this stream and not yet confirmed, by attempt id (their backoff).
    cancels: dict[str, Resend] = field(default_factory=dict)
    #: Inspects sent on this stream for attempts still unknown, by attempt id (their backoff).
    inspects: dict[str, Resend] = field(default_factory=dict)
    #: Set when a Cancel or Inspect is sent: the re-send loop recomputes its next wake-up.
    resent: asyncio.Event = field(default_factory=asyncio.Event)
    #: Inspects sent on this stream and not answered yet, by attempt id (how many).
    asked: dict[str, int] = field(default_factory=dict)
    #: Accepted Starts whose first event is awaited, by attempt id (set when one is read).
    awaiting_evidence: dict[str, asyncio.Event] = field(default_factory=dict)
    #: After a transient refusal (the runtime is full or draining) no claim for this
    #: runtime before this time of the event loop's clock; the gap doubles per refusal.
    claims_paused_until: float = 0.0
    refusal_gap_s: float = 0.0

    def send(self, message: pb.ConnectResponse) -> None:
        if not self.closed:
            self.outbox.put_nowait(message)

    def send_starts(self, starts: list[pb.Start]) -> None:
        """The Starts of one claim round: one Starts message to a runtime that said it reads
        them (bounded in bytes, well below gRPC's 4 MiB message limit), else one message
        each; a lone Start goes as itself."""
        if not self.accepts_batches or len(starts) == 1:
            for start in starts:
                self.send(pb.ConnectResponse(start=start))
            return
        batch: list[pb.Start] = []
        size = 0
        for start in starts:
            if batch and size + start.ByteSize() > MAX_STARTS_BYTES:
                self.send(pb.ConnectResponse(starts=pb.Starts(starts=batch)))
                batch, size = [], 0
            batch.append(start)
            size += start.ByteSize()
        if batch:
            self.send(pb.ConnectResponse(starts=pb.Starts(starts=batch)))

    def record_send(
        self, sent: dict[str, Resend], attempt_id: str, first_s: float, max_s: float
    ) -> None:
        """A Cancel or Inspect went out: the next one for the attempt is due after
        ``first_s``, then twice the last gap, at most ``max_s``."""
        now = asyncio.get_running_loop().time()
        previous = sent.get(attempt_id)
        gap = first_s if previous is None else min(previous.gap_s * 2, max_s)
        sent[attempt_id] = Resend(now, gap)
        self.resent.set()

    def evidence(self, attempt_id: str) -> None:
        """An event of the attempt was read on this stream."""
        if (arrived := self.awaiting_evidence.get(attempt_id)) is not None:
            arrived.set()

    def refused(self, loop_time: float, first_s: float, max_s: float) -> None:
        """A transient refusal: pause claims for this runtime, longer each time."""
        self.refusal_gap_s = min(max(first_s, self.refusal_gap_s * 2), max_s)
        self.claims_paused_until = loop_time + self.refusal_gap_s

    def ask(self, attempt_id: str) -> None:
        """An Inspect for the attempt goes out on this stream now."""
        self.asked[attempt_id] = self.asked.get(attempt_id, 0) + 1

    def answered(self, attempt_id: str) -> bool:
        """Takes one open Inspect of the attempt; False when none is open (not asked)."""
        open_ = self.asked.get(attempt_id, 0)
        if open_ <= 0:
            return False
        if open_ == 1:
            del self.asked[attempt_id]
        else:
            self.asked[attempt_id] = open_ - 1
        return True


class Sessions:
    def __init__(self) -> None:
        self._by_instance: dict[str, Session] = {}
        #: Runtime messages refused as evidence of nothing, by reason (a metric's source).
        self.refused: Counter[str] = Counter()

    def open(self, session: Session) -> Session | None:
        """Register a session; returns the one it replaces (a reconnect), if any."""
        previous = self._by_instance.get(session.runtime_instance_id)
        self._by_instance[session.runtime_instance_id] = session
        return previous

    def close(self, session: Session) -> None:
        session.closed = True
        if self._by_instance.get(session.runtime_instance_id) is session:
            del self._by_instance[session.runtime_instance_id]
        for future in session.pending_starts.values():
            if not future.done():
                future.set_exception(ConnectionError("the runtime stream closed"))

    def get(self, runtime_instance_id: str) -> Session | None:
        return self._by_instance.get(runtime_instance_id)

    def all(self) -> list[Session]:
        return list(self._by_instance.values())
