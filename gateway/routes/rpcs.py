"""Which RPC each REST operation calls, so which rule of the tenancy table
(coordinator/api/authorization.py) it is held to: the gateway decides nothing itself, it
forwards the caller's token and the services apply the rule (docs/tenancy.md "REST routes").
tests/gateway/test_tenancy_rest.py fails when an operation is missing here, and tries every
operation on an owner's object from the other side of each boundary.
"""

from __future__ import annotations

from collections.abc import Mapping

from coordinator.api.authorization import BY_RPC

__all__ = ["OPERATION_RPCS", "TOKEN_ONLY", "rest_rule_table"]

_RUN, _SCH, _LT, _CAP = "RunService", "ScheduleService", "LongTaskService", "CapacityService"

#: operationId -> the RPC it calls (``Service.Method``); a stream that polls calls the read
#: it polls.
OPERATION_RPCS: Mapping[str, str] = {
    "create_run": f"{_RUN}.CreateRun",
    "list_runs": f"{_RUN}.ListRuns",
    "count_runs": f"{_RUN}.CountRuns",
    "get_run": f"{_RUN}.GetRun",
    "cancel_run": f"{_RUN}.CancelRun",
    "approve_run": f"{_RUN}.ApproveRun",
    "retry_run": f"{_RUN}.RetryRun",
    "resolve_run": f"{_RUN}.ResolveRun",
    "fail_run": f"{_RUN}.FailRun",
    "pause_run": f"{_RUN}.PauseRun",
    "resume_run": f"{_RUN}.ResumeRun",
    "requeue_run": f"{_RUN}.RequeueRun",
    "list_attempts": f"{_RUN}.ListAttempts",
    "list_run_events": f"{_RUN}.ListRunEvents",
    "stream_run_events": f"{_RUN}.WatchRunEvents",
    "read_run_output": f"{_RUN}.ReadRunOutput",
    "stream_run_output": f"{_RUN}.ReadRunOutput",
    "list_project_events": f"{_RUN}.ListProjectEvents",
    "stream_project_events": f"{_RUN}.ListProjectEvents",
    "list_runtimes": f"{_CAP}.ListRuntimes",
    "list_agents": f"{_CAP}.ListAgents",
    "get_occupancy": f"{_CAP}.GetOccupancy",
    "get_agent": f"{_CAP}.GetAgent",
    "list_all_schedules": f"{_SCH}.ListSchedules",
    "list_schedules": f"{_SCH}.ListSchedules",
    "create_schedule": f"{_SCH}.CreateSchedule",
    "get_schedule": f"{_SCH}.GetSchedule",
    "update_schedule": f"{_SCH}.UpdateSchedule",
    "delete_schedule": f"{_SCH}.DeleteSchedule",
    "pause_schedule": f"{_SCH}.PauseSchedule",
    "resume_schedule": f"{_SCH}.ResumeSchedule",
    "fire_schedule": f"{_SCH}.FireSchedule",
    "rotateWebhookSecret_schedule": f"{_SCH}.RotateWebhookSecret",
    "backfill_schedule": f"{_SCH}.BackfillSchedule",
    "deliver_webhook": "WebhookService.DeliverWebhook",
    "list_upcoming_fires": f"{_SCH}.ListUpcomingFires",
    "list_schedule_events": f"{_SCH}.ListScheduleEvents",
    "list_schedule_runs": f"{_SCH}.ListScheduleEvents",
    "stream_long_tasks": f"{_LT}.ListLongTasks",
    "list_long_tasks": f"{_LT}.ListLongTasks",
    "create_long_task": f"{_LT}.CreateLongTask",
    "act_on_long_task": f"{_LT}.Act",
    "long_task_text_command": f"{_LT}.TextCommand",
    "get_long_task": f"{_LT}.GetLongTask",
    "start_long_task": f"{_LT}.StartLongTask",
    "pause_long_task": f"{_LT}.PauseLongTask",
    "resume_long_task": f"{_LT}.ResumeLongTask",
    "cancel_long_task": f"{_LT}.CancelLongTask",
    "clearRecovery_long_task": f"{_LT}.ClearRecovery",
    "continue_long_task": f"{_LT}.ContinueLongTask",
    "revisePlan_long_task": f"{_LT}.RevisePlan",
    "answer_long_task": f"{_LT}.AnswerDecision",
    "editCriterion_long_task": f"{_LT}.EditCriterion",
    "scheduleContinuation_long_task": f"{_LT}.ScheduleContinuation",
    "list_long_task_events": f"{_LT}.ListLongTaskEvents",
    "export_long_task": f"{_LT}.ExportLongTask",
    "list_notices": f"{_LT}.ListNotices",
    "stream_notices": f"{_LT}.ListNotices",
    "list_notice_deliveries": f"{_LT}.ListNoticeDeliveries",
    "register_notice_webhook": f"{_LT}.RegisterNoticeWebhook",
}

#: Authenticated operations the gateway answers itself from the token, calling no RPC.
TOKEN_ONLY = frozenset({"get_me"})


def rest_rule_table(operations: Mapping[str, tuple[str, str]]) -> str:
    """The REST operations with the RPC and the rule each is held to, as Markdown.
    ``operations``: operationId -> (HTTP method, documented path)."""
    lines = ["| REST operation | route | RPC | caller must hold |", "|---|---|---|---|"]
    for operation_id, (method, path) in operations.items():
        if operation_id in TOKEN_ONLY:
            lines.append(f"| `{operation_id}` | `{method} {path}` | (none) | token |")
        elif operation_id in OPERATION_RPCS:
            rpc = OPERATION_RPCS[operation_id]
            need = BY_RPC[rpc].need.value
            lines.append(f"| `{operation_id}` | `{method} {path}` | `{rpc}` | {need} |")
    return "\n".join(lines) + "\n"
