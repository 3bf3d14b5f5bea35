"""Who may do what: one table of rules, one function that applies it (docs/tenancy.md, which
prints the table from here). Every RPC has exactly one rule; a handler asks ``allow(method,
project, owner)`` with the project and owner of the object it touches, as read from the
store, never from the request. The caller comes from the credential (coordinator/api/auth.py).

A rule names what the caller must hold:

- ``token``: any valid API token;
- ``project``: a token of the object's project (another project's object is answered as a
  missing one by the handler, before it asks here);
- ``owner``: a token of the project that may act for the object's owner (an operator of the
  project acts for every owner of it; a person, by default, only for themself);
- ``operator``: an operator token of the project;
- ``operator of every project``: an operator token of ``*`` (agent settings affect every
  project's runs of that agent);
- ``service``: truerun's own service identity (capacity observations and claims);
- ``runtime token``, ``callback token``, ``webhook signature``: no API token at all; the
  service checks that credential itself (docs/runtime-protocol.md, docs/long-tasks.md).

A service token is nobody's person: it passes ``service`` rules only.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from coordinator.api.auth import caller
from coordinator.api.credentials import Principal
from coordinator.dispatch.tokens import RuntimeTokens
from kernel.errors import OwnerNotPermitted, OwnerNotServed, PermissionDenied


class Need(StrEnum):
    TOKEN = "token"
    PROJECT = "project"
    OWNER = "owner"
    OPERATOR = "operator"
    OPERATOR_OF_EVERY_PROJECT = "operator of every project"
    SERVICE = "service"
    RUNTIME_TOKEN = "runtime token"
    CALLBACK_TOKEN = "callback token"
    WEBHOOK_SIGNATURE = "webhook signature"


#: Needs an API token does not meet: the service checks another credential itself.
OTHER_CREDENTIAL = frozenset({Need.RUNTIME_TOKEN, Need.CALLBACK_TOKEN, Need.WEBHOOK_SIGNATURE})


@dataclass(frozen=True, slots=True)
class Rule:
    resource: str
    action: str
    need: Need
    #: The RPCs it covers, ``Service.Method`` (the REST routes call these RPCs).
    rpcs: tuple[str, ...]


def _rpcs(service: str, *methods: str) -> tuple[str, ...]:
    return tuple(f"{service}.{m}" for m in methods)


RUN, LT, SCH, CAP = "RunService", "LongTaskService", "ScheduleService", "CapacityService"
RULES: tuple[Rule, ...] = (
    Rule("run", "create", Need.OWNER, _rpcs(RUN, "CreateRun", "CreateRuns", "CreateRunStream")),
    Rule(
        "run",
        "read",
        Need.PROJECT,
        _rpcs(
            RUN,
            "GetRun",
            "ListRuns",
            "CountRuns",
            "ListRunEvents",
            "WatchRunEvents",
            "ListProjectEvents",
            "GetEventCursor",
            "ListAttempts",
            "ReadRunOutput",
        ),
    ),
    Rule("run", "cancel, retry", Need.OWNER, _rpcs(RUN, "CancelRun", "RetryRun")),
    Rule("run", "approve", Need.OWNER, _rpcs(RUN, "ApproveRun")),
    Rule(
        "run",
        "resolve, fail, pause, resume, requeue",
        Need.OPERATOR,
        _rpcs(RUN, "ResolveRun", "FailRun", "PauseRun", "ResumeRun", "RequeueRun"),
    ),
    Rule(
        "schedule",
        "create, change, fire",
        Need.OWNER,
        _rpcs(
            SCH,
            "CreateSchedule",
            "UpdateSchedule",
            "DeleteSchedule",
            "PauseSchedule",
            "ResumeSchedule",
            "BackfillSchedule",
            "FireSchedule",
            "RotateWebhookSecret",
        ),
    ),
    Rule(
        "schedule",
        "read",
        Need.PROJECT,
        _rpcs(SCH, "GetSchedule", "ListSchedules", "ListUpcomingFires", "ListScheduleEvents"),
    ),
    Rule(
        "schedule", "deliver a webhook", Need.WEBHOOK_SIGNATURE, ("WebhookService.DeliverWebhook",)
    ),
    Rule(
        "long task",
        "create, act, answer, revise",
        Need.OWNER,
        _rpcs(
            LT,
            "CreateLongTask",
            "StartLongTask",
            "PauseLongTask",
            "ResumeLongTask",
            "CancelLongTask",
            "ClearRecovery",
            "RevisePlan",
            "ContinueLongTask",
            "AnswerDecision",
            "EditCriterion",
            "ScheduleContinuation",
            "Act",
            "TextCommand",
        ),
    ),
    Rule(
        "long task",
        "read",
        Need.PROJECT,
        _rpcs(LT, "GetLongTask", "ListLongTasks", "ListLongTaskEvents", "ExportLongTask"),
    ),
    Rule(
        "notice",
        "read, subscribe",
        Need.OWNER,
        _rpcs(LT, "ListNotices", "RegisterNoticeWebhook", "ListNoticeDeliveries"),
    ),
    Rule(
        "long-task attempt",
        "step, intent, receipt, decision, verification",
        Need.CALLBACK_TOKEN,
        _rpcs(
            "LongTaskAttemptService",
            "GetBriefing",
            "BeginStep",
            "RecordIntent",
            "RecordReceipt",
            "RecordProbe",
            "CompleteStep",
            "MarkStepUncertain",
            "BlockStep",
            "FailStep",
            "SkipStep",
            "RequestDecision",
            "RequestApproval",
            "GetDecision",
            "ReadyForVerification",
            "RecordVerification",
            "RenewLease",
            "ReportUsage",
            "ReadEvidence",
            "ContinueLater",
        ),
    ),
    Rule(
        "run promotion",
        "preflight, classify, promote",
        Need.CALLBACK_TOKEN,
        _rpcs("RunPromotionService", "PreflightToolCall", "RecordClassification", "PromoteRun"),
    ),
    Rule("capacity", "report, claim", Need.SERVICE, _rpcs(CAP, "ReportObservation", "Claim")),
    Rule("agent", "configure", Need.OPERATOR_OF_EVERY_PROJECT, _rpcs(CAP, "ConfigureAgent")),
    Rule("agent", "read", Need.TOKEN, _rpcs(CAP, "GetAgent", "ListAgents")),
    Rule(
        "runtime",
        "read (of the owners it acts for with runs in its projects)",
        Need.TOKEN,
        _rpcs(CAP, "GetOccupancy", "ListRuntimes"),
    ),
    Rule(
        "runtime",
        "connect, report events",
        Need.RUNTIME_TOKEN,
        _rpcs("RuntimeService", "Connect", "ReportEvents"),
    ),
)

BY_RPC: dict[str, Rule] = {rpc: rule for rule in RULES for rpc in rule.rpcs}
assert len(BY_RPC) == sum(len(rule.rpcs) for rule in RULES), "an RPC has two rules"


def permits(principal: Principal, need: Need, project_id: str = "", owner_id: str = "") -> bool:
    """Whether ``principal`` meets ``need`` for an object of ``project_id`` and ``owner_id``."""
    if need in OTHER_CREDENTIAL:
        return False
    if principal.service:
        return need is Need.SERVICE
    match need:
        case Need.TOKEN:
            return True
        case Need.PROJECT:
            return principal.sees(project_id)
        case Need.OWNER:
            return principal.sees(project_id) and principal.acts_for(owner_id)
        case Need.OPERATOR:
            return principal.operator and principal.sees(project_id)
        case Need.OPERATOR_OF_EVERY_PROJECT:
            return principal.operator and principal.all_projects
        case Need.SERVICE:
            return False
    raise AssertionError(need)


def allow(rpc: str, project_id: str = "", owner_id: str = "") -> Principal:
    """The caller, if the rule of ``rpc`` lets it touch an object of ``project_id`` and
    ``owner_id``; else PERMISSION_DENIED, or OWNER_NOT_PERMITTED when only the owner is
    wrong (a person acting for someone else)."""
    rule = BY_RPC[rpc]
    who = caller()
    if permits(who, rule.need, project_id, owner_id):
        return who
    if rule.need is Need.OWNER and not who.service and who.sees(project_id):
        raise OwnerNotPermitted(
            f"{who.name} may not act for owner {owner_id} (another owner's {rule.resource} "
            "needs an operator token of its project)",
            owner_id=owner_id,
        )
    raise PermissionDenied(f"{rule.resource} {rule.action} needs {_needs(rule.need)}")


def served(bindings: RuntimeTokens | None, owner_id: str, project_id: str) -> None:
    """Refuse work for ``owner_id`` in ``project_id`` when no runtime token serves that pair
    (OWNER_NOT_SERVED): it could never be delivered. ``bindings`` None: this process serves
    no runtimes, and the claim's own binding check (docs/tenancy.md) is the only one."""
    if bindings is not None and not bindings.serves(owner_id, project_id):
        raise OwnerNotServed(
            f"no runtime of owner {owner_id} serves project {project_id}",
            owner_id=owner_id,
            project_id=project_id,
        )


def _needs(need: Need) -> str:
    return {
        Need.TOKEN: "an API token",
        Need.PROJECT: "a token of the project",
        Need.OWNER: "a token of the project that may act for the owner",
        Need.OPERATOR: "an operator token of the project",
        Need.OPERATOR_OF_EVERY_PROJECT: "an operator token of every project (*)",
        Need.SERVICE: "truerun's service identity (TRUERUN_SERVICE_TOKEN)",
    }.get(need, str(need))


def rule_table() -> str:
    """The rule table as Markdown (docs/tenancy.md, kept current by scripts/docs.py)."""
    lines = ["| resource | action | caller must hold | RPCs |", "|---|---|---|---|"]
    for rule in RULES:
        rpcs = ", ".join(f"`{r.split('.', 1)[1]}`" for r in rule.rpcs)
        service = rule.rpcs[0].split(".", 1)[0]
        lines.append(f"| {rule.resource} | {rule.action} | {rule.need.value} | {service}: {rpcs} |")
    return "\n".join(lines) + "\n"
