"""A run's trace: the W3C traceparent recorded on its run.created event (by Transitions.create
while a span is active), so that the claim, the dispatch and the runtime's events, in
whichever process they happen, join the trace of the request that created the run."""

from __future__ import annotations

from coordinator.store.base import RunReader
from kernel import telemetry


async def run_trace_parent(store: RunReader, run_id: str) -> str:
    """The run's traceparent; "" when tracing is off here or the run was created without it
    (the lookup is skipped entirely when this process exports no spans)."""
    if not telemetry.enabled():
        return ""
    events = await store.list_events(run_id, 0, 1)
    if not events:
        return ""
    value = events[0].payload.get("trace_parent", "")
    return value if isinstance(value, str) else ""
