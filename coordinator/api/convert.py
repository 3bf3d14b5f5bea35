"""Domain <-> protobuf. The domain never imports generated code; only this module does."""

from __future__ import annotations

import functools
from enum import StrEnum
from typing import Any, TypeVar

from google.protobuf import json_format, struct_pb2, timestamp_pb2
from google.protobuf.message import DecodeError
from truerun.v1 import capacity_service_pb2, common_pb2, run_service_pb2

from coordinator.api.approvals import approval_to_proto
from coordinator.api.validation import name
from coordinator.domain.decide import allowed_commands
from coordinator.domain.model import Actor, Attempt, RunEvent
from coordinator.domain.output import ChunkKind
from coordinator.domain.redaction import redact_keys
from coordinator.service.output_reads import OutputPage
from coordinator.service.queries import RunView
from kernel import json_bounds
from kernel.observation import Observation, Route

E = TypeVar("E", bound=StrEnum)


@functools.cache
def _numbers(enum: type[StrEnum], prefix: str) -> dict[StrEnum, int]:
    """An enum's members and their proto numbers (found once: every response converts
    several, and the name lookup per call was a visible share of a create)."""
    return {member: int(getattr(common_pb2, f"{prefix}_{member.value.upper()}")) for member in enum}


@functools.cache
def _members(enum: type[StrEnum], prefix: str) -> dict[int, StrEnum]:
    return {number: member for member, number in _numbers(enum, prefix).items()}


def enum_to_proto(value: StrEnum, prefix: str) -> int:
    return _numbers(type(value), prefix)[value]


def enum_from_proto(enum: type[E], prefix: str, number: int) -> E | None:
    """None for UNSPECIFIED; ValueError for a number this server does not know."""
    member = _members(enum, prefix).get(number)
    if member is not None:
        return member  # type: ignore[return-value]  # _members(enum) holds enum's members
    if number == 0:
        return None
    raise ValueError(f"unknown {prefix.lower()} value {number}")


def timestamp(ms: int) -> timestamp_pb2.Timestamp:
    """UTC epoch milliseconds as a protobuf Timestamp (every service's times)."""
    stamp = timestamp_pb2.Timestamp()
    stamp.FromMilliseconds(ms)
    return stamp


def _ts(ms: int | None) -> timestamp_pb2.Timestamp | None:
    return None if ms is None else timestamp(ms)


def struct(value: dict[str, Any]) -> struct_pb2.Struct:
    """A stored JSON object as a Struct; one that cannot be one (nested deeper than any
    reader decodes: a row from before the input bounds, docs/operations.md "Input bounds")
    becomes ``{"truerun_note": why}``, so that the answer holding it, and every list it is
    in, still renders."""
    why = json_bounds.renderable(value)
    if why is None:
        message = struct_pb2.Struct()
        try:
            message.update(value)
            return message
        except (TypeError, ValueError, DecodeError, RecursionError) as error:
            reason = f"it is not a JSON object a Struct can hold ({type(error).__name__})"
    else:
        reason = f"it is nested {why.found} deep, deeper than {why.allowed}"
    noted = struct_pb2.Struct()
    noted.update(json_bounds.note(reason))
    return noted


def struct_to_dict(message: struct_pb2.Struct) -> dict[str, Any]:
    return json_format.MessageToDict(message)


def etag_of(version: int) -> str:
    return f'"{version}"'


def actor_to_proto(actor: Actor) -> common_pb2.Actor:
    return common_pb2.Actor(type=enum_to_proto(actor.type, "ACTOR_TYPE"), id=actor.id)  # type: ignore[arg-type]


def attempt_to_proto(attempt: Attempt) -> common_pb2.Attempt:
    message = common_pb2.Attempt(
        id=attempt.id,
        run_id=attempt.run_id,
        attempt_no=attempt.attempt_no,
        previous_attempt_id=attempt.previous_attempt_id or "",
        owner_id=attempt.owner_id,
        agent_id=attempt.agent_id or "",
        execution_scope=attempt.execution_scope or "",
        runtime_task_id=attempt.runtime_task_id,
        status=enum_to_proto(attempt.status, "ATTEMPT_STATUS"),  # type: ignore[arg-type]
        observed_state=enum_to_proto(attempt.observed_state, "OBSERVED_STATE"),  # type: ignore[arg-type]
        sync_state=enum_to_proto(attempt.sync_state, "SYNC_STATE"),  # type: ignore[arg-type]
        runtime_instance_id=attempt.runtime_instance_id or "",
        runtime_device_id=attempt.runtime_device_id or "",
        last_event_seq=attempt.last_event_seq,
        termination_reason=attempt.termination_reason or "",
        error_code=attempt.error_code or "",
        error_summary=attempt.error_summary or "",
        observe_time=_ts(attempt.observed_at_ms),
        claim_time=_ts(attempt.claimed_at_ms),
        start_request_time=_ts(attempt.start_requested_at_ms),
        cancel_request_time=_ts(attempt.cancel_requested_at_ms),
        lease_expire_time=_ts(attempt.lease_expires_at_ms),
        heartbeat_time=_ts(attempt.heartbeat_at_ms),
        create_time=_ts(attempt.created_at_ms),
        start_time=_ts(attempt.started_at_ms),
        finish_time=_ts(attempt.finished_at_ms),
        update_time=_ts(attempt.updated_at_ms),
    )
    if attempt.exit_code is not None:
        message.exit_code = attempt.exit_code
    return message


def run_to_proto(v: RunView) -> common_pb2.Run:
    run = v.run
    message = common_pb2.Run(
        id=run.id,
        project_id=run.project_id,
        owner_id=run.owner_id,
        task_id=run.task_id,
        task_revision=run.task_revision,
        agent_id=run.agent_id or "",
        execution_scope=run.execution_scope or "",
        scope_policy=enum_to_proto(run.scope_policy, "SCOPE_POLICY"),  # type: ignore[arg-type]
        trigger_type=run.trigger_type,
        trigger_id=run.trigger_id or "",
        idempotency_key=run.idempotency_key or "",
        retry_of_run_id=run.retry_of_run_id or "",
        priority=run.priority,
        max_attempts=run.max_attempts,
        idempotent=run.idempotent,
        run_now=run.run_now,
        pinned_runtime_instance_id=run.pinned_runtime_instance_id or "",
        required_labels=list(run.required_labels),
        # every read shows a spec redacted (CreateRun refuses secrets; rows from before that)
        # (a spec no reader can render is shown as a note, never redacted: redaction walks
        # it recursively, and it is not shown anyway)
        spec=struct(
            redact_keys(run.spec) if json_bounds.renderable(run.spec) is None else run.spec
        ),
        status=enum_to_proto(run.status, "RUN_STATUS"),  # type: ignore[arg-type]
        display_state=enum_to_proto(v.display.state, "DISPLAY_STATE"),  # type: ignore[arg-type]
        display_reason=v.display.reason,
        display_since_time=_ts(v.display.since_ms),
        version=run.version,
        etag=etag_of(run.version),
        event_sequence=run.event_sequence,
        current_attempt_id=run.current_attempt_id or "",
        attempt_count=run.attempt_count,
        created_by=run.created_by,
        create_time=_ts(run.created_at_ms),
        update_time=_ts(run.updated_at_ms),
        queue_time=_ts(run.queued_at_ms),
        start_time=_ts(run.started_at_ms),
        finish_time=_ts(run.finished_at_ms),
        cancel_request_time=_ts(run.cancel_requested_at_ms),
        cancel_reason=run.cancel_reason or "",
        error_code=run.error_code or "",
        error_summary=run.error_summary or "",
        queue_position=v.queue_position,
        allowed_commands=[str(name) for name in allowed_commands(run, v.attempt)],
    )
    if v.attempt is not None:
        message.current_attempt.CopyFrom(attempt_to_proto(v.attempt))
    if run.approval is not None:
        message.approval.CopyFrom(approval_to_proto(run.approval))
    return message


def event_to_proto(event: RunEvent) -> common_pb2.RunEvent:
    return common_pb2.RunEvent(
        id=event.id,
        run_id=event.run_id,
        sequence=event.sequence,
        type=event.type,
        actor=actor_to_proto(event.actor),
        attempt_id=event.attempt_id or "",
        payload=struct(event.payload),
        create_time=_ts(event.created_at_ms),
        cursor=event.cursor.encode() if event.cursor else "",
        project_id=event.project_id,
    )


_CHUNK_KINDS = {
    ChunkKind.TEXT: run_service_pb2.OUTPUT_CHUNK_KIND_TEXT,
    ChunkKind.SKIPPED: run_service_pb2.OUTPUT_CHUNK_KIND_SKIPPED,
    ChunkKind.TRUNCATED: run_service_pb2.OUTPUT_CHUNK_KIND_TRUNCATED,
}


def output_page_to_proto(page: OutputPage) -> run_service_pb2.ReadRunOutputResponse:
    attempt = page.attempt
    return run_service_pb2.ReadRunOutputResponse(
        attempt_id=attempt.id,
        attempt_no=attempt.attempt_no,
        chunks=[
            run_service_pb2.OutputChunk(
                offset=piece.offset, text=piece.text, kind=_CHUNK_KINDS[piece.kind]
            )
            for piece in page.pieces
        ],
        next_offset=page.next_offset,
        stored_bytes=page.stored_bytes,
        log_bytes=attempt.output_log_bytes,
        truncated=attempt.output_truncated,
        attempt_finished=page.attempt_finished,
        run_finished=page.run_finished,
        expired=page.expired,
    )


def observation_from_proto(o: capacity_service_pb2.Observation) -> Observation:
    """Validated later by the observation service; only names are checked here."""
    return Observation(
        owner_id=name(o.owner_id, "owner_id") or "",
        runtime_instance_id=name(o.runtime_instance_id, "runtime_instance_id") or "",
        routes=tuple(Route(r.device_id, r.kind) for r in o.routes),
        limit=o.limit,
        active=o.active,
        active_task_ids=tuple(o.active_task_ids),
        queued=o.queued,
        labels=tuple(o.labels),
        observed_at_ms=o.observe_time.ToMilliseconds() if o.HasField("observe_time") else None,
        received_at_ms=0,
        queued_task_ids=tuple(o.queued_task_ids),
        agent_version=o.agent_version,
        lineage=o.lineage,
    )
