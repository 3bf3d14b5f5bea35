"""The notice rule, pure (docs/long-tasks.md "Notices"; seed C: notices on entering
waiting_for_user, waiting_for_approval, recovery_required and on completed / partial /
failed; none for queued): every move of the task table and every kind of change yields the
one notice the rule names, or none, with its dedupe key; and the delivery backoff."""

from __future__ import annotations

from dataclasses import replace

import pytest
from truerun.v1 import long_task_service_pb2 as pb

from longtasks.domain.model import Decision
from longtasks.domain.notices import (
    MAX_BACKOFF_MS,
    NOTICED_ENDINGS,
    ChangeFacts,
    NoticeKind,
    after_failure,
    notice_for,
    ordinal,
    retry_after_ms,
)
from longtasks.domain.states import DecisionKind, DecisionState, TaskState
from longtasks.domain.text_commands import prompt
from services.cli.task_view import decision_line

T = TaskState
BASE = ChangeFacts("lt-1", 3, "send the weekly report", T.RUNNING, T.RUNNING, 2, 9)


def asked(kind: DecisionKind = DecisionKind.APPROVAL, repeat: int = 1) -> Decision:
    return Decision(
        "d-1", "lt-1", kind, DecisionState.OPEN, "may I send it?", 2, 8, 0, repeat_count=repeat
    )


@pytest.mark.parametrize("before", list(T))
@pytest.mark.parametrize("after", list(T))
def test_a_plain_move_is_a_notice_only_when_it_finishes_as_completed_partial_or_failed(
    before: TaskState, after: TaskState
) -> None:
    notice = notice_for(replace(BASE, before=before, after=after))
    if after in NOTICED_ENDINGS and before is not after:
        assert notice is not None and notice.kind is NoticeKind.TERMINAL
        assert notice.dedupe_key == "terminal:lt-1:2"
        assert notice.title == f"#3 {after}"
    else:
        assert notice is None  # queued, running, paused, cancelled...: no notice


def test_queued_and_cancelled_raise_no_notice() -> None:
    assert notice_for(replace(BASE, before=T.PLANNED, after=T.QUEUED)) is None
    assert notice_for(replace(BASE, before=T.PAUSED, after=T.QUEUED)) is None
    assert notice_for(replace(BASE, before=T.RUNNING, after=T.CANCELLED)) is None


@pytest.mark.parametrize(
    ("after", "words"),
    [
        (T.RECOVERY_REQUIRED, "needs your review"),
        (T.QUEUED, "resumes by itself"),
        (T.VERIFYING, "verification runs again"),
    ],
)
def test_an_interruption_is_one_notice_keyed_by_task_and_attempt(
    after: TaskState, words: str
) -> None:
    facts = replace(BASE, after=after, interrupted_attempt="a-7", reason="its run was lost")
    notice = notice_for(facts)
    assert notice is not None and notice.kind is NoticeKind.INTERRUPTION
    assert notice.dedupe_key == "interruption:lt-1:a-7"
    assert notice.title == "#3 was interrupted"
    assert "its run was lost" in notice.text and words in notice.text
    assert notice.decision_id is None
    again = notice_for(replace(facts, version=12, reason="held by the dead at start"))
    assert again is not None and again.dedupe_key == notice.dedupe_key  # one fact, one key


def test_an_interruption_that_asks_about_an_effect_carries_the_question_in_one_notice() -> None:
    effect = asked(DecisionKind.EFFECT)
    facts = replace(BASE, after=T.WAITING_FOR_USER, interrupted_attempt="a-7", asked=(effect,))
    notice = notice_for(facts)
    assert notice is not None and notice.kind is NoticeKind.INTERRUPTION
    assert notice.decision_id == "d-1"
    assert "/longtask answer #3 v9 done" in notice.text


def test_a_recovery_required_interruption_says_how_to_go_on() -> None:
    notice = notice_for(replace(BASE, after=T.RECOVERY_REQUIRED, interrupted_attempt="a-7"))
    assert notice is not None and "/longtask cancel #3 9" in notice.text
    assert "ClearRecovery" in notice.text


def test_an_approval_request_carries_its_repeat_count_and_the_command_to_answer() -> None:
    first = notice_for(replace(BASE, after=T.WAITING_FOR_APPROVAL, asked=(asked(),)))
    assert first is not None and first.kind is NoticeKind.APPROVAL
    assert first.title == "#3 asks for your approval"
    assert first.dedupe_key == "decision:d-1" and first.decision_id == "d-1"
    assert "/longtask approve #3 9 or /longtask deny #3 9" in first.text
    third = notice_for(replace(BASE, after=T.WAITING_FOR_APPROVAL, asked=(asked(repeat=3),)))
    assert third is not None
    assert third.title == "#3 asks for your approval (3rd request for the same permission)"
    assert "[request 3 for the same permission]" in third.text


def test_a_question_is_a_decision_notice() -> None:
    question = asked(DecisionKind.QUESTION)
    notice = notice_for(replace(BASE, after=T.WAITING_FOR_USER, asked=(question,)))
    assert notice is not None and notice.kind is NoticeKind.DECISION
    assert notice.title == "#3 asks you"
    assert "/longtask answer #3 v9 <your answer>" in notice.text


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (1, "1st"),
        (2, "2nd"),
        (3, "3rd"),
        (4, "4th"),
        (11, "11th"),
        (12, "12th"),
        (13, "13th"),
        (21, "21st"),
        (22, "22nd"),
        (101, "101st"),
        (111, "111th"),
    ],
)
def test_ordinals(n: int, text: str) -> None:
    assert ordinal(n) == text


def test_the_backoff_doubles_up_to_its_cap_and_the_last_try_is_the_dead_letter() -> None:
    assert [retry_after_ms(t, 1000) for t in (0, 1, 2, 3, 4)] == [0, 1000, 2000, 4000, 8000]
    assert retry_after_ms(60, 1000) == MAX_BACKOFF_MS
    assert retry_after_ms(3, 0) == 4  # a zero base still waits and still doubles
    assert [after_failure(t, 3) for t in (1, 2, 3, 4)] == ["pending", "pending", "dead", "dead"]
    assert after_failure(1, 0) == "dead"  # at least one try


def test_truerun_task_show_prints_an_open_approval_in_its_notices_words() -> None:
    words = prompt(3, asked(repeat=3), 9)
    shown = decision_line(
        pb.Decision(
            decision_id="d-1",
            kind="approval",
            state="open",
            question="may I send it?",
            prompt=words,
        )
    )
    assert (
        "      asks     #3 asks (approval): may I send it? [request 3 for the same permission]"
        in shown
    )
    assert "      reply    /longtask approve #3 9 or /longtask deny #3 9" in shown
    notice = notice_for(replace(BASE, after=T.WAITING_FOR_APPROVAL, asked=(asked(repeat=3),)))
    assert notice is not None and words in notice.text


def test_a_notice_carries_the_one_command_that_answers_it_and_none_when_nothing_is_asked() -> None:
    approval = notice_for(replace(BASE, after=T.WAITING_FOR_APPROVAL, asked=(asked(repeat=2),)))
    assert approval is not None
    assert approval.command == "/longtask approve #3 9 or /longtask deny #3 9"
    assert f"Reply: {approval.command}" in approval.text  # the same words as the prompt
    effect = (asked(DecisionKind.EFFECT),)
    folded = replace(BASE, after=T.WAITING_FOR_USER, interrupted_attempt="a-7", asked=effect)
    interrupted = notice_for(folded)
    assert interrupted is not None and interrupted.command.startswith("/longtask answer #3 v9 ")
    for facts in (
        replace(BASE, after=T.RECOVERY_REQUIRED, interrupted_attempt="a-7"),
        replace(BASE, after=T.COMPLETED),
    ):
        notice = notice_for(facts)
        assert notice is not None and notice.command == ""
