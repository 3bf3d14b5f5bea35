"""A well-formed request for every RPC of LongTaskService and LongTaskAttemptService (the
auth table test's rows: an RPC added without one fails it)."""

from __future__ import annotations

from typing import Any

from google.protobuf.message import Message
from truerun.v1 import long_task_service_pb2 as lt


def long_task_requests(project: str, task: str, owner: str = "o") -> dict[str, Message]:
    """A well-formed request for every LongTaskService RPC, aimed at ``task``."""
    named: dict[str, Any] = {"project_id": project, "long_task_id": task}
    draft = lt.LongTaskDraft(
        project_id=project,
        long_task_id=task,
        owner_id=owner,
        goal="g",
        steps=[lt.StepDraft(step_id="s", title="t", side_effect=lt.SIDE_EFFECT_CLASS_PURE)],
    )
    return {
        "CreateLongTask": lt.CreateLongTaskRequest(long_task=draft),
        "GetLongTask": lt.GetLongTaskRequest(**named),
        "ListLongTasks": lt.ListLongTasksRequest(project_id=project),
        "StartLongTask": lt.StartLongTaskRequest(**named, etag="1"),
        "PauseLongTask": lt.PauseLongTaskRequest(**named, etag="1"),
        "ResumeLongTask": lt.ResumeLongTaskRequest(**named, etag="1"),
        "CancelLongTask": lt.CancelLongTaskRequest(**named, etag="1"),
        "ClearRecovery": lt.ClearRecoveryRequest(**named, etag="1"),
        "ScheduleContinuation": lt.ScheduleContinuationRequest(
            **named, etag="1", continuation=lt.ContinuationSpec(cron="0 9 * * *")
        ),
        "RevisePlan": lt.RevisePlanRequest(**named, etag="1", reason="r"),
        "ContinueLongTask": lt.ContinueLongTaskRequest(**named, etag="1", reason="r"),
        "AnswerDecision": lt.AnswerDecisionRequest(**named, etag="1", decision_id="d", answer="a"),
        "EditCriterion": lt.EditCriterionRequest(**named, etag="1", criterion_id="c", waive=True),
        "ListLongTaskEvents": lt.ListLongTaskEventsRequest(**named),
        "ExportLongTask": lt.ExportLongTaskRequest(**named),
        # by the owner's handle: the draft's task is the owner's first, "#1"
        "Act": lt.ActRequest(
            project_id=project, owner_id=owner, task="#1", action="pause", action_id="a", etag="1"
        ),
        "TextCommand": lt.TextCommandRequest(
            project_id=project, owner_id=owner, text="/longtask pause #1", action_id="a"
        ),
        "ListNotices": lt.ListNoticesRequest(project_id=project, owner_id=owner),
        "RegisterNoticeWebhook": lt.RegisterNoticeWebhookRequest(
            project_id=project, owner_id=owner, url="http://127.0.0.1:9/hook"
        ),
        "ListNoticeDeliveries": lt.ListNoticeDeliveriesRequest(project_id=project, owner_id=owner),
    }


def attempt_requests(credential: lt.AttemptCredential) -> dict[str, Message]:
    """A well-formed request for every LongTaskAttemptService and RunPromotionService RPC
    (both take a run attempt's credential), with ``credential``."""
    step: dict[str, Any] = {"credential": credential, "step_id": "s", "step_version": 1}
    receipt = lt.Receipt(target="t", summary="s")
    receipt.time.FromMilliseconds(1)
    return {
        "GetBriefing": lt.GetBriefingRequest(credential=credential),
        "BeginStep": lt.BeginStepRequest(**step),
        "RecordIntent": lt.RecordIntentRequest(**step, target="t", summary="s"),
        "RecordReceipt": lt.RecordReceiptRequest(**step, receipt=receipt),
        "RecordProbe": lt.RecordProbeRequest(**step, result=lt.PROBE_RESULT_DONE),
        "CompleteStep": lt.CompleteStepRequest(**step),
        "MarkStepUncertain": lt.MarkStepUncertainRequest(**step),
        "BlockStep": lt.BlockStepRequest(**step),
        "FailStep": lt.FailStepRequest(**step),
        "SkipStep": lt.SkipStepRequest(**step),
        "RequestDecision": lt.RequestDecisionRequest(credential=credential, question="q"),
        "RequestApproval": lt.RequestApprovalRequest(
            credential=credential, subject="s", question="q"
        ),
        "GetDecision": lt.GetDecisionRequest(credential=credential, decision_id="d"),
        "ReadyForVerification": lt.ReadyForVerificationRequest(credential=credential),
        "RecordVerification": lt.RecordVerificationRequest(credential=credential),
        "RenewLease": lt.RenewLeaseRequest(credential=credential),
        "ReportUsage": lt.ReportUsageRequest(credential=credential, tokens=1, usage_id="u"),
        "ReadEvidence": lt.ReadEvidenceRequest(credential=credential, evidence_id="e"),
        "ContinueLater": lt.ContinueLaterRequest(
            credential=credential, continuation=lt.ContinuationSpec(cron="0 9 * * *")
        ),
        **promotion_requests(credential),
    }


def promotion_requests(credential: lt.AttemptCredential) -> dict[str, Message]:
    """A well-formed request for every RunPromotionService RPC, with ``credential``."""
    tier = lt.SIDE_EFFECT_CLASS_IDEMPOTENT
    return {
        "PreflightToolCall": lt.PreflightToolCallRequest(credential=credential, tier=tier),
        "RecordClassification": lt.RecordClassificationRequest(
            credential=credential, tier=tier, verdict=lt.ACTIVATION_VERDICT_ORDINARY
        ),
        "PromoteRun": lt.PromoteRunRequest(
            credential=credential,
            long_task=lt.LongTaskDraft(goal="g"),
            path=lt.ACTIVATION_PATH_LAZY,
        ),
    }
