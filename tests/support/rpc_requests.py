"""One well-formed request per RPC of RunService, CapacityService and ScheduleService (and,
through tests/support/longtask_requests.py, the long-task services), keyed by method name:
the rows of tests/integration/test_every_rpc_authenticates.py."""

from __future__ import annotations

from google.protobuf.message import Message
from truerun.v1 import capacity_service_pb2 as cap
from truerun.v1 import long_task_service_pb2 as lt
from truerun.v1 import run_service_pb2 as rs
from truerun.v1 import schedule_service_pb2 as sch

from tests.support.longtask_requests import attempt_requests, long_task_requests

RUN_ID = "01a23000-0000-7000-8000-000000000001"  # a well-formed id of no run


def run_requests(run_id: str, project: str, owner: str = "o") -> dict[str, Message]:
    """A well-formed request for every RunService RPC, aimed at ``run_id`` or ``project``
    (creates for ``owner``)."""
    return {
        "CreateRun": rs.CreateRunRequest(project_id=project, owner_id=owner, task_id="t"),
        "CreateRuns": rs.CreateRunsRequest(
            requests=[rs.CreateRunRequest(project_id=project, owner_id=owner, task_id="t")]
        ),
        # a stream's one message
        "CreateRunStream": rs.CreateRunStreamRequest(
            request=rs.CreateRunRequest(project_id=project, owner_id=owner, task_id="t")
        ),
        "GetRun": rs.GetRunRequest(id=run_id),
        "ListRuns": rs.ListRunsRequest(project_id=project),
        "CountRuns": rs.CountRunsRequest(project_id=project),
        "CancelRun": rs.CancelRunRequest(id=run_id),
        "RetryRun": rs.RetryRunRequest(id=run_id),
        "ApproveRun": rs.ApproveRunRequest(id=run_id),
        "ResolveRun": rs.ResolveRunRequest(id=run_id, reason="r", resolution=rs.RESOLUTION_FAILED),
        "FailRun": rs.FailRunRequest(id=run_id, reason="r"),
        "PauseRun": rs.PauseRunRequest(id=run_id, reason="r"),
        "ResumeRun": rs.ResumeRunRequest(id=run_id, reason="r"),
        "RequeueRun": rs.RequeueRunRequest(id=run_id, reason="r"),
        "ListRunEvents": rs.ListRunEventsRequest(run_id=run_id),
        "WatchRunEvents": rs.WatchRunEventsRequest(run_id=run_id),
        "ListProjectEvents": rs.ListProjectEventsRequest(project_id=project),
        "GetEventCursor": rs.GetEventCursorRequest(project_id=project),
        "ListAttempts": rs.ListAttemptsRequest(run_id=run_id),
        "ReadRunOutput": rs.ReadRunOutputRequest(run_id=run_id),
    }


# A valid-looking request per method: authentication comes first, so its content never
# matters to an unauthenticated caller.
REQUESTS: dict[str, Message] = {
    **run_requests(RUN_ID, "proj-p"),
    "ReportObservation": cap.ReportObservationRequest(),
    "Claim": cap.ClaimRequest(),
    "GetOccupancy": cap.GetOccupancyRequest(owner_id="o", runtime_instance_id="i"),
    "ConfigureAgent": cap.ConfigureAgentRequest(),
    "GetAgent": cap.GetAgentRequest(agent_id="a"),
    "ListRuntimes": cap.ListRuntimesRequest(),
    "ListAgents": cap.ListAgentsRequest(),
    **{
        name: request
        for name, request in (
            ("CreateSchedule", sch.CreateScheduleRequest()),
            ("GetSchedule", sch.GetScheduleRequest(project_id="proj-p", schedule_id="s")),
            ("ListSchedules", sch.ListSchedulesRequest()),
            ("UpdateSchedule", sch.UpdateScheduleRequest()),
            ("DeleteSchedule", sch.DeleteScheduleRequest(project_id="proj-p", schedule_id="s")),
            ("PauseSchedule", sch.PauseScheduleRequest(project_id="proj-p", schedule_id="s")),
            ("ResumeSchedule", sch.ResumeScheduleRequest(project_id="proj-p", schedule_id="s")),
            ("BackfillSchedule", sch.BackfillScheduleRequest(project_id="proj-p")),
            ("FireSchedule", sch.FireScheduleRequest(project_id="proj-p", schedule_id="s")),
            ("ListUpcomingFires", sch.ListUpcomingFiresRequest(project_id="proj-p")),
            ("ListScheduleEvents", sch.ListScheduleEventsRequest(project_id="proj-p")),
            ("RotateWebhookSecret", sch.RotateWebhookSecretRequest(project_id="proj-p")),
        )
    },
    **long_task_requests("proj-p", "lt-1"),
    **attempt_requests(
        lt.AttemptCredential(run_id=RUN_ID, run_attempt_id=RUN_ID, callback_token="cb")
    ),
}
