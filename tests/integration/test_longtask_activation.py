"""Activation and lazy promotion through the public gRPC API, on SQLite and PostgreSQL
(docs/long-tasks.md "Activation and promotion"; seed C "自动启用" and its Testing Decisions).
Ordinary runs are created through RunService and really claimed and started by a scripted
runtime; their "runtime process" is the SDK (``Activation`` with the deterministic
``RuleClassifier``, whose classifications the tests count) talking to RunPromotionService
with the run attempt's callback token. Every assertion reads an API answer: run events,
the long task as GetLongTask shows it, the runtime's messages, the tests' own tool counts."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from prometheus_client import CollectorRegistry
from truerun.v1 import common_pb2 as common
from truerun.v1 import long_task_service_pb2 as lt
from truerun.v1 import run_service_pb2 as rs
from truerun.v1 import runtime_service_pb2 as pb

from services.metrics import Metrics
from tests.support.longtask_api import OWNER, PROJECT, create, draft, get
from tests.support.longtask_stack import LongTaskStack, longtask_stack
from tests.support.scripted_runtime import ScriptedRuntime
from truerun_runtime.longtask import (
    ALLOWED,
    PROMOTED,
    Activation,
    LongTaskAttempt,
    PromotionFailed,
    PromotionRefused,
    Request,
    RuleClassifier,
    ToolCall,
    receipt,
)

PURE = lt.SIDE_EFFECT_CLASS_PURE


@dataclass
class OrdinaryRun:
    run_id: str
    start: pb.Start
    runtime: ScriptedRuntime

    def activation(self, stack: LongTaskStack, request: Request) -> Activation:
        s = self.start
        return Activation(
            stack.address, s.run_id, s.attempt_id, s.callback_token, request, RuleClassifier()
        )

    @property
    def credential(self) -> lt.AttemptCredential:
        s = self.start
        return lt.AttemptCredential(
            run_id=s.run_id, run_attempt_id=s.attempt_id, callback_token=s.callback_token
        )


@pytest.fixture
async def stack(migrated_database_url: str) -> AsyncIterator[LongTaskStack]:
    async with longtask_stack(migrated_database_url) as live:
        yield live


@pytest.fixture
async def capped_stack(migrated_database_url: str) -> AsyncIterator[LongTaskStack]:
    """An owner may keep 2 unfinished long tasks."""
    async with longtask_stack(migrated_database_url, max_unfinished=2) as live:
        yield live


async def ordinary_run(stack: LongTaskStack, name: str) -> OrdinaryRun:
    """An ordinary run (RunService), claimed and started by a runtime of its own."""
    created = await stack.runs.CreateRun(
        rs.CreateRunRequest(project_id=PROJECT, owner_id=OWNER, task_id=name)
    )
    runtime = ScriptedRuntime(stack.runtime, owner=OWNER, instance=f"inst-{name}")
    await runtime.connect()
    await runtime.heartbeat(limit=1)
    start = (await runtime.expect("start")).start
    assert start.run_id == created.run.id
    await runtime.answer_start(start, accepted=True)
    return OrdinaryRun(created.run.id, start, runtime)


async def activation_events(stack: LongTaskStack, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    listed = await stack.runs.ListRunEvents(rs.ListRunEventsRequest(run_id=run_id))
    return [(e.type, dict(e.payload)) for e in listed.events if e.type.startswith("activation.")]


def call(step_id: str, tier: str) -> ToolCall:
    """A call with its key (an idempotent one needs one: a promotion refuses it without)."""
    key = "" if tier == "pure" else f"key:{step_id}"
    return ToolCall(step_id, f"tool {step_id}", tier, f"target:{step_id}", f"do {step_id}", key)


async def test_activation_scenarios_reach_only_the_preflights_they_need(
    stack: LongTaskStack,
) -> None:
    # plain request and a single lookup: no preflight, no classification, no event
    plain = await ordinary_run(stack, "plain")
    async with plain.activation(stack, Request("What is the capital of France?")) as a:
        assert await a.begin() == ""
        assert await a.before_tool(call("lookup", "pure")) == ALLOWED
        assert (a.preflights, a.classifier.calls) == (0, 0)  # type: ignore[attr-defined]
    assert await activation_events(stack, plain.run_id) == []

    metrics = Metrics(CollectorRegistry())
    stack.door.listen_preflights(metrics.preflight_decided)

    # a simple file edit: one preflight at most, ordinary; the tier is never asked again
    edit = await ordinary_run(stack, "edit")
    async with edit.activation(stack, Request("Fix the typo in README.md")) as a:
        assert await a.before_tool(call("edit", "idempotent")) == ALLOWED
        a.executed(call("edit", "idempotent"), receipt("README.md", "saved", 1_000))
        assert await a.before_tool(call("edit-2", "idempotent")) == ALLOWED
        a.executed(call("edit-2", "idempotent"), receipt("README.md", "saved", 1_001))
        assert await a.before_tool(call("read", "pure")) == ALLOWED
        assert (a.preflights, a.classifier.calls) == (1, 1)  # type: ignore[attr-defined]
        again = await stack.promotions.PreflightToolCall(
            lt.PreflightToolCallRequest(
                credential=edit.credential, tier=lt.SIDE_EFFECT_CLASS_IDEMPOTENT
            )
        )
        assert not again.preflight_needed and "evaluated in this run already" in again.reason
        # later escalation: the budget threshold promotes without a classification
        assert await a.spent(0.9, unfinished=True)
        assert a.classifier.calls == 1  # type: ignore[attr-defined]
    events = await activation_events(stack, edit.run_id)
    assert [t for t, _ in events] == [
        "activation.preflight_requested",
        "activation.classified",
        "activation.promoted",
    ]
    classified = events[1][1]
    assert (classified["tier"], classified["verdict"], classified["path"]) == (
        "idempotent",
        "ordinary",
        "lazy",
    )
    assert classified["reason"] and 0 < classified["confidence"] <= 1
    assert (events[2][1]["path"], events[2][1]["verdict"]) == ("budget", "promote")
    sample = metrics.registry.get_sample_value
    labels = {"tier": "idempotent", "verdict": "ordinary"}
    assert sample("truerun_run_preflight_total", labels) == 1
    assert sample("truerun_run_preflight_seconds_count", {"tier": "idempotent"}) == 1

    # risky side effect: an ordinary idempotent verdict does not silence the send
    risky = await ordinary_run(stack, "risky")
    request = Request("Update the config, then send the announcement to everyone")
    async with risky.activation(stack, request) as a:
        assert await a.before_tool(call("config", "idempotent")) == ALLOWED
        a.executed(call("config", "idempotent"), receipt("config", "written", 1_000, "c-1"))
        assert await a.before_tool(call("announce", "non_idempotent")) == PROMOTED
        assert (a.preflights, a.classifier.calls) == (2, 2)  # type: ignore[attr-defined]
        task_id = a.long_task_id
    tiers = [p["tier"] for t, p in await activation_events(stack, risky.run_id) if "tier" in p]
    assert tiers == ["idempotent", "idempotent", "non_idempotent", "non_idempotent"]
    task = await get(stack, task_id)
    assert [(s.step_id, s.state) for s in task.steps] == [
        ("config", lt.STEP_STATE_COMPLETED),
        ("announce", lt.STEP_STATE_PENDING),
    ]

    # an explicit multi-stage plan with waits: promoted without a classification
    plan = await ordinary_run(stack, "plan")
    async with plan.activation(stack, Request("Look into the flaky deploy")) as a:
        assert await a.before_tool(call("probe", "queryable")) == ALLOWED
        stages = [
            lt.StepDraft(
                step_id=s, title=s, side_effect=lt.SIDE_EFFECT_CLASS_IDEMPOTENT, idempotency_key=s
            )
            for s in ("draft-fix", "wait-review", "merge")
        ]
        assert await a.plan_proposed(stages, waits=True)
        assert a.classifier.calls == 1  # type: ignore[attr-defined]
    assert (await activation_events(stack, plan.run_id))[-1][1]["path"] == "plan"

    # explicit multi-day intent and a forced request: a long task before any tool runs
    for name, request in (
        ("daily", Request("Every morning for the next week, summarize the new issues")),
        ("forced", Request("Rename the wiki page", force=True)),
    ):
        run = await ordinary_run(stack, name)
        async with run.activation(stack, request) as a:
            steps = [lt.StepDraft(step_id="go", title="go", side_effect=PURE)]
            task_id = await a.begin(plan=steps)
            assert task_id and a.classifier.calls == 0  # type: ignore[attr-defined]
            assert await a.before_tool(call("go", "non_idempotent")) == PROMOTED
        events = await activation_events(stack, run.run_id)
        assert [(t, p["path"]) for t, p in events] == [("activation.promoted", "deterministic")]
        assert (await get(stack, task_id)).state == lt.LONG_TASK_STATE_RUNNING

    # suppressed by the user: no preflight even for a send
    quiet = await ordinary_run(stack, "quiet")
    async with quiet.activation(stack, Request("Send it", suppress=True)) as a:
        assert await a.before_tool(call("send", "non_idempotent")) == ALLOWED
        assert a.preflights == 0
    assert await activation_events(stack, quiet.run_id) == []


async def test_mid_run_promotion_absorbs_the_prefix_with_its_receipts_and_runs_nothing_again(
    stack: LongTaskStack,
) -> None:
    run = await ordinary_run(stack, "release")
    ran: Counter[str] = Counter()  # the tools' own count of executions
    write, notify = call("write", "idempotent"), call("notify", "queryable")
    publish = call("publish", "non_idempotent")
    async with run.activation(stack, Request("Update the release page")) as a:
        assert await a.before_tool(write) == ALLOWED
        ran["write"] += 1
        a.executed(write, receipt("page", "page written", 1_000, "rev-7"))
        assert await a.before_tool(notify) == ALLOWED
        ran["notify"] += 1
        a.executed(notify)  # its answer never came back: no receipt
        assert await a.before_tool(publish) == PROMOTED  # after two executed calls
        assert a.classifier.calls == 3  # type: ignore[attr-defined]
        task_id = a.long_task_id

    task = await get(stack, task_id)
    assert task.state == lt.LONG_TASK_STATE_RUNNING and task.owner_id == OWNER
    assert [a.run_id for a in task.attempts] == [run.run_id]  # the run is attempt 1
    assert task.lease_attempt_id == task.attempts[0].attempt_id
    steps = {s.step_id: s for s in task.steps}
    assert [s.step_id for s in task.steps] == ["write", "notify", "publish"]
    done = steps["write"]
    assert done.state == lt.STEP_STATE_COMPLETED and done.basis == "receipt"
    assert done.current_effect.receipt.external_id == "rev-7"
    assert [e.kind for e in done.evidence] == ["receipt"]
    unsure = steps["notify"]
    assert unsure.state == lt.STEP_STATE_UNCERTAIN
    assert unsure.current_effect.target == "target:notify"
    assert not unsure.current_effect.HasField("receipt")
    assert steps["publish"].state == lt.STEP_STATE_PENDING
    assert steps["publish"].attempt_count == 0

    # the same process goes on as the task's attempt, with the same credential
    s = run.start
    async with LongTaskAttempt(
        stack.address, s.run_id, s.attempt_id, s.callback_token, renew_every_s=60
    ) as attempt:
        briefing = await attempt.briefing()
        assert {b.step_id: b.state for b in briefing.steps}["write"] == lt.STEP_STATE_COMPLETED
        async with attempt.step("publish") as step:
            await step.intent("target:publish", "publish the page")
            ran["publish"] += 1
            await step.receipt("target:publish", 2_000, "published", "pub-1")
            await step.complete()
    assert ran == Counter(write=1, notify=1, publish=1)  # nothing ran twice

    again = await stack.promotions.PromoteRun(
        lt.PromoteRunRequest(
            credential=run.credential,
            long_task=lt.LongTaskDraft(goal="again", steps=[]),
            absorbed=[
                lt.AbsorbedCall(step_id="x", title="x", side_effect=PURE, target="t", summary="s")
            ],
            path=lt.ACTIVATION_PATH_PLAN,
        )
    )
    assert again.long_task_id == task_id  # promoted once; asked again, the same task
    types = [t for t, _ in await activation_events(stack, run.run_id)]
    assert types.count("activation.promoted") == 1 and types.count("activation.classified") == 3


async def test_failed_absorption_ends_the_run_and_the_cap_refuses_only_automatic_promotion(
    capped_stack: LongTaskStack,
) -> None:
    stack = capped_stack
    broken = await ordinary_run(stack, "broken")
    async with broken.activation(stack, Request("Tidy the bucket")) as a:
        a.executed(call("dup", "idempotent"))
        with pytest.raises(PromotionFailed) as failed:
            # the remaining step reuses the executed call's id: the plan cannot be written
            dup = lt.StepDraft(
                step_id="dup",
                title="d",
                side_effect=lt.SIDE_EFFECT_CLASS_IDEMPOTENT,
                idempotency_key="dup",
            )
            await a.plan_proposed([dup], waits=True)
    assert "could not become a long task" in failed.value.message
    cancel = await broken.runtime.expect("cancel")
    assert cancel.cancel.attempt_id == broken.start.attempt_id
    run = await stack.runs.GetRun(rs.GetRunRequest(id=broken.run_id))
    assert run.cancel_reason.startswith("promotion failed")
    events = await activation_events(stack, broken.run_id)
    assert [t for t, _ in events] == ["activation.promotion_failed"]
    assert "every step needs its own non-empty id" in events[0][1]["reason"]
    start = broken.start  # the runtime stops the process: the run ends, visibly
    await broken.runtime.event(start, 2, pb.RUNTIME_EVENT_TYPE_FAILED, exit_code=1)
    await broken.runtime.acked(start.attempt_id, 2)
    ended = await stack.runs.GetRun(rs.GetRunRequest(id=broken.run_id))
    assert ended.status in (common.RUN_STATUS_CANCELLED, common.RUN_STATUS_FAILED)
    assert ended.cancel_reason == run.cancel_reason
    await broken.runtime.close()  # its free slot would take the next run
    listed = await stack.tasks.ListLongTasks(lt.ListLongTasksRequest(project_id=PROJECT))
    assert list(listed.long_tasks) == []  # nothing of it was kept

    # the unfinished cap (2): explicit creation passes with an override, promotion does not
    await create(stack, long_task_id="lt-1")
    await create(stack, long_task_id="lt-2")
    with pytest.raises(grpc.aio.AioRpcError) as limited:
        await create(stack, long_task_id="lt-3")
    assert limited.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    forced = await stack.tasks.CreateLongTask(
        lt.CreateLongTaskRequest(long_task=draft("lt-3"), override_unfinished_cap=True)
    )
    assert forced.long_task_id == "lt-3"
    capped = await ordinary_run(stack, "capped")
    ask = lt.PreflightToolCallRequest(
        credential=capped.credential, tier=lt.SIDE_EFFECT_CLASS_NON_IDEMPOTENT
    )
    raced = await asyncio.gather(*(stack.promotions.PreflightToolCall(ask) for _ in range(4)))
    assert sorted(r.preflight_needed for r in raced) == [False, False, False, True]
    async with capped.activation(stack, Request("x", force=True)) as a:
        with pytest.raises(PromotionRefused) as refused:
            await a.begin(plan=[lt.StepDraft(step_id="a", title="a", side_effect=PURE)])
    assert refused.value.reason == "AUTO_PROMOTION_REFUSED"
    assert "unfinished long tasks" in refused.value.message
    events = await activation_events(stack, capped.run_id)
    assert [t for t, _ in events] == [
        "activation.preflight_requested",  # once, however many asked at the same time
        "activation.promotion_refused",
    ]
    still = await stack.runs.GetRun(rs.GetRunRequest(id=capped.run_id))
    assert still.cancel_reason == ""  # refused, not failed: the run is not stopped
