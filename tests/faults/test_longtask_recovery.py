"""Safe recovery of long tasks at every declared point (issue #13, seed C "安全恢复" and
"Testing Decisions"), through the public API against real processes: `truerun dev`, the
reconciler, a reference agent running the step driver, and the tests' own effect fixture.
At each point, reached by observation only, the attempt's process and the server are
SIGKILLed together and the server is started again on the same data (``World.crash``).

What each scenario proves, from the fixture's own count and the task as GetLongTask shows it:
- after intent / before the effect, and after the effect / before the receipt, a
  non-idempotent step is never replayed: the task waits for a person with the intent record
  as the question's material; the fixture counts 0 and 1 effects;
- an idempotent step is retried with its key (the fixture answers the first effect: one
  effect, one duplicate); without a key it is refused at creation, so it never reaches a
  kill (issue #36's repro); a queryable step is probed before any retry (one effect);
- after the receipt the step is done: never run again;
- waiting for an approval: the approval expires with its attempt; the next attempt asks
  again (repeat count 2) and the effect happens once, after the grant;
- waiting for a decision: the question survives the crash and its answer goes on;
- during verification: verification runs again (never uncertain);
- a file-shaped step killed once its file exists runs again (pure) and completes.
Every scenario ends in a state that names its reason; none ends ``completed`` without
every required criterion evidenced.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import grpc
import pytest

from tests.faults.conftest import CLUSTERS, seed_from_env
from tests.faults.harness import Cluster
from tests.faults.longtask_api import open_decisions, state, step, step_state
from tests.faults.longtask_world import TOOL_TIMEOUT_S, World, world
from tests.support.effect_fixture_process import wait_for_hold

pytestmark = pytest.mark.timeout(180)
DATABASES = ["sqlite", "postgres"]


@pytest.fixture(scope="module", params=DATABASES)
def shared(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    """One cluster per database for every scenario (starting one costs seconds): the
    scenarios use task ids, effect keys, gates and files of their own, and each ends with
    its task finished, so none sees another's work; a kill lands on the scenario's own
    attempt (``World.crash`` asserts the live commands it finds)."""
    tmp = tmp_path_factory.mktemp(f"longtask-recovery-{request.param}")
    database = str(request.param)
    cluster = Cluster(
        tmp / "cluster", database=database, redis=database == "postgres", seed=seed_from_env()
    )
    print(f"fault cluster: {cluster.describe()}")
    try:
        cluster.start()
        with world(cluster, tmp) as w:
            yield w
    finally:
        cluster.close()
    assert not cluster.leftovers(), f"processes left behind: {cluster.leftovers()}"


@pytest.fixture
def lt(shared: World, request: pytest.FixtureRequest) -> World:
    request.node.stash[CLUSTERS] = [shared.cluster]  # a failure reports its seed and logs
    return shared


def _has_intent(step_id: str) -> Callable[..., bool]:
    def check(task: object) -> bool:
        s = step(task, step_id)  # type: ignore[arg-type]
        return (
            step_state(s) == "running"
            and bool(s.current_effect.effect_id)
            and not s.current_effect.HasField("receipt")
        )

    return check


def test_after_intent_before_the_effect_a_non_idempotent_step_waits_for_a_person(lt: World) -> None:
    go = lt.gate("effect")
    task = lt.create(
        "intent-only",
        [lt.effect_step("send", "non_idempotent", "k-intent", before=lt.cluster.wait_gate(go))],
        [lt.step_done("sent", "send")],
    )
    lt.tasks.wait(task, _has_intent("send"), 60, "the intent recorded")
    lt.crash()
    waiting = lt.tasks.wait_state(task, "waiting_for_user")
    (question,) = open_decisions(waiting)
    assert question.kind == "effect" and question.step_id == "send"
    assert question.material["target"] == "chat:k-intent", question.material
    assert step_state(step(waiting, "send")) == "uncertain"
    assert lt.effects("k-intent") == 0  # it never happened, and nothing replayed it
    lt.tasks.answer(task, question.decision_id, "retry", note="checked: no message was sent")
    go.touch()
    done = lt.tasks.wait_state(task, frozenset({"completed", "partial", "failed"}))
    assert state(done) == "completed", done.state_reason
    assert lt.effects("k-intent") == 1


def test_after_the_effect_before_the_receipt_a_non_idempotent_step_is_never_replayed(
    lt: World,
) -> None:
    lt.withhold("k-held")
    task = lt.create(
        "effect-no-receipt",
        [lt.effect_step("send", "non_idempotent", "k-held")],
        [lt.step_done("sent", "send")],
    )
    wait_for_hold(lt.fixture.url, "k-held", 60)
    started = time.monotonic()
    assert lt.effects("k-held") == 1  # the mutation is visible before the kill
    landed = lt.crash()
    assert landed - started < TOOL_TIMEOUT_S  # the kill, not the tool's timeout, ended it
    waiting = lt.tasks.wait_state(task, "waiting_for_user")
    (question,) = open_decisions(waiting)
    assert question.kind == "effect" and question.material["target"] == "chat:k-held"
    lt.tasks.answer(task, question.decision_id, "done", note="the message is in the channel")
    done = lt.tasks.wait_state(task, frozenset({"completed", "partial", "failed"}))
    assert step_state(step(done, "send")) == "completed"
    assert lt.effects("k-held") == 1  # zero automatic replays
    assert done.state_reason


def test_an_idempotent_step_is_retried_with_its_key(lt: World) -> None:
    lt.withhold("k-idem")
    task = lt.create(
        "idempotent",
        [lt.effect_step("put", "idempotent", "k-idem")],
        [lt.step_done("put-done", "put")],
    )
    wait_for_hold(lt.fixture.url, "k-idem", 60)
    lt.crash()
    lt.release()
    done = lt.tasks.wait_state(
        task, frozenset({"completed", "partial", "failed", "waiting_for_user"})
    )
    assert state(done) == "completed", done.state_reason
    assert lt.effects("k-idem") == 1 and lt.duplicates("k-idem") >= 1


def test_an_idempotent_step_without_a_key_is_refused_before_it_can_run_twice(
    lt: World,
) -> None:
    """Issue #36's repro: the same step with no key was accepted; SIGKILLed after its POST
    was recorded and before the answer, it was retried with the key "" and the effect
    happened twice. Now `truerun dev` refuses the plan at creation, naming the step: no
    task, no attempt, no effect (docs/long-tasks.md "3. Steps")."""
    put = lt.effect_step("put", "idempotent", "k-nokey")
    del put["idempotencyKey"]
    put["action"]["run"] = put["action"]["run"].replace(" --key k-nokey", "")  # the env's key
    with pytest.raises(grpc.RpcError) as refused:
        lt.create("idempotent-no-key", [put], [lt.step_done("put-done", "put")])
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "step put is idempotent but has no idempotency_key" in str(refused.value.details())
    with pytest.raises(grpc.RpcError) as missing:
        lt.tasks.get("idempotent-no-key")
    assert missing.value.code() is grpc.StatusCode.NOT_FOUND
    assert lt.effects("k-nokey") == 0 and lt.effects("") == 0


def test_a_queryable_step_is_probed_before_any_retry(lt: World) -> None:
    lt.withhold("k-query")
    task = lt.create(
        "queryable",
        [lt.effect_step("order", "queryable", "k-query")],
        [lt.step_done("ordered", "order")],
    )
    wait_for_hold(lt.fixture.url, "k-query", 60)
    lt.crash()
    lt.release()
    done = lt.tasks.wait_state(
        task, frozenset({"completed", "partial", "failed", "waiting_for_user"})
    )
    assert state(done) == "completed", done.state_reason
    order = step(done, "order")
    assert order.basis == "probe_done", order.basis
    assert lt.effects("k-query") == 1 and lt.duplicates("k-query") == 0


def test_after_the_receipt_the_step_is_done_and_never_runs_again(lt: World) -> None:
    go = lt.gate("after-receipt")
    report = lt.tmp / "after-receipt.txt"
    task = lt.create(
        "after-receipt",
        [
            lt.effect_step("send", "non_idempotent", "k-rcpt"),
            lt.file_step("log", report, lt.cluster.wait_gate(go)),
        ],
        [lt.step_done("sent", "send"), lt.file_exists("logged", report)],
    )

    def receipted(t: object) -> bool:
        s = step(t, "send")  # type: ignore[arg-type]
        return s.current_effect.HasField("receipt") and step_state(step(t, "log")) == "running"  # type: ignore[arg-type]

    lt.tasks.wait(task, receipted, 60, "the receipt recorded, the next step running")
    lt.crash()
    go.touch()
    done = lt.tasks.wait_state(
        task, frozenset({"completed", "partial", "failed", "waiting_for_user"})
    )
    assert state(done) == "completed", done.state_reason
    assert step(done, "send").attempt_count == 1  # never begun again
    assert lt.effects("k-rcpt") == 1


def test_waiting_for_approval_the_grant_expires_with_its_attempt_and_is_asked_again(
    lt: World,
) -> None:
    task = lt.create(
        "approval",
        [lt.effect_step("send", "non_idempotent", "k-appr", approval="post to chat:k-appr")],
        [lt.step_done("sent", "send")],
    )
    lt.tasks.wait_state(task, "waiting_for_approval")
    lt.crash()
    again = lt.tasks.wait(
        task,
        lambda t: state(t) == "waiting_for_approval"
        and any(d.repeat_count == 2 for d in open_decisions(t)),
        60,
        "the approval asked again by the next attempt",
    )
    assert lt.effects("k-appr") == 0
    assert [d.state for d in again.decisions if d.kind == "approval"].count("expired") == 1
    (ask,) = open_decisions(again)
    lt.tasks.answer(task, ask.decision_id, "grant")
    done = lt.tasks.wait_state(
        task, frozenset({"completed", "partial", "failed", "waiting_for_user"})
    )
    assert state(done) == "completed", done.state_reason
    assert lt.effects("k-appr") == 1


def test_waiting_for_a_decision_the_question_survives_and_its_answer_goes_on(lt: World) -> None:
    report = lt.tmp / "decided.txt"
    ask = {"stepId": "pick", "title": "pick a channel", "sideEffect": "SIDE_EFFECT_CLASS_PURE"}
    ask["action"] = {"ask": "Which channel?", "options": ["team", "ops"]}  # type: ignore[assignment]
    task = lt.create(
        "decision", [ask, lt.file_step("write", report)], [lt.file_exists("written", report)]
    )
    waiting = lt.tasks.wait_state(task, "waiting_for_user")
    (question,) = open_decisions(waiting)
    assert waiting.attempts[-1].HasField("end_time")  # asking ended the attempt
    lt.cluster.eventually(lambda: not lt.command_groups(), 30, "the attempt's process exited")
    lt.crash(attempt_alive=False)  # asking ended the attempt: the server dies alone
    after = lt.tasks.wait_state(task, "waiting_for_user")
    assert [d.decision_id for d in open_decisions(after)] == [question.decision_id]
    lt.tasks.answer(task, question.decision_id, "team")
    done = lt.tasks.wait_state(task, frozenset({"completed", "partial", "failed"}))
    assert state(done) == "completed", done.state_reason
    assert report.exists()


def test_during_verification_verification_runs_again_never_uncertain(lt: World) -> None:
    go = lt.gate("verify")
    report = lt.tmp / "verified.txt"
    slow = {
        "criterionId": "checked",
        "text": "the checker ran to its end",
        "checkerKind": "command",
        "checker": {"run": lt.cluster.wait_gate(go), "expect_exit": 0},
    }
    task = lt.create(
        "verify", [lt.file_step("write", report)], [lt.file_exists("written", report), slow]
    )
    lt.tasks.wait_state(task, "verifying")
    lt.crash()
    lt.tasks.wait(
        task, lambda t: state(t) == "verifying" and len(t.attempts) == 2, 60, "verification again"
    )
    go.touch()
    done = lt.tasks.wait_state(
        task, frozenset({"completed", "partial", "failed", "waiting_for_user"})
    )
    assert state(done) == "completed", done.state_reason
    assert all(step_state(s) == "completed" for s in done.steps)
    assert step(done, "write").attempt_count == 1  # verification re-ran; no step did


def test_a_file_shaped_step_killed_once_its_file_exists_runs_again(lt: World) -> None:
    go = lt.gate("file")
    report = lt.tmp / "file-shaped.txt"
    task = lt.create(
        "file",
        [lt.file_step("write", report, lt.cluster.wait_gate(go))],
        [lt.file_exists("written", report)],
    )
    lt.cluster.eventually(report.exists, 60, "the step's file written")
    lt.crash()
    go.touch()
    done = lt.tasks.wait_state(
        task, frozenset({"completed", "partial", "failed", "waiting_for_user"})
    )
    assert state(done) == "completed", done.state_reason
    write = step(done, "write")
    assert write.attempt_count == 2 and write.basis == "class_safe", (
        write.attempt_count,
        write.basis,
    )
    assert any(e.kind == "file" for e in write.evidence)


def test_before_the_intent_the_step_simply_runs_again(lt: World) -> None:
    go = lt.gate("prepared")
    prepared = lt.tmp / "prepared"
    send = lt.effect_step("send", "non_idempotent", "k-before")
    send["action"]["prepare"] = f"touch '{prepared}'; {lt.cluster.wait_gate(go)}"
    task = lt.create("before-intent", [send], [lt.step_done("sent", "send")])
    lt.cluster.eventually(prepared.exists, 60, "the step begun, preparing, no intent yet")
    before = step(lt.tasks.get(task), "send")
    assert step_state(before) == "running" and not before.current_effect.effect_id
    lt.crash()
    go.touch()
    done = lt.tasks.wait_state(
        task, frozenset({"completed", "partial", "failed", "waiting_for_user"})
    )
    assert state(done) == "completed", done.state_reason
    send_done = step(done, "send")
    assert send_done.attempt_count == 2 and send_done.basis == "no_intent", send_done.basis
    assert lt.effects("k-before") == 1  # no intent, so no effect: run once, after the crash
    assert not [d for d in done.decisions if d.kind == "effect"]  # nobody had to be asked
