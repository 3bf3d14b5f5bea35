"""The text commands and the action contract's pure rules (longtasks/domain/text_commands.py,
longtasks/domain/actions.py): every form of ``/longtask``, every way it can be malformed,
the natural short answers each kind of decision takes (and what none of them takes), which
decision an answer goes to, and the prompts shown with a decision."""

from __future__ import annotations

import pytest

from longtasks.domain.actions import (
    Action,
    ActionRecord,
    answer_of,
    choose_decision,
    format_handle,
    parse_handle,
    valid_action_id,
)
from longtasks.domain.model import Decision
from longtasks.domain.states import DecisionKind, DecisionState
from longtasks.domain.text_commands import (
    SHORT_MAX,
    Kind,
    Parsed,
    action_of,
    parse,
    prompt,
    short_answer,
)

A = Action


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/longtask pause #3", Parsed(Kind.ACT, A.PAUSE, 3)),
        ("/longtask pause #3 7", Parsed(Kind.ACT, A.PAUSE, 3, 7)),
        ("/longtask pause #3 v7", Parsed(Kind.ACT, A.PAUSE, 3, 7)),
        ("  /LONGTASK   Cancel   3  ", Parsed(Kind.ACT, A.CANCEL, 3)),
        ("/longtask resume #12 V40", Parsed(Kind.ACT, A.RESUME, 12, 40)),
        ("/longtask continue #1", Parsed(Kind.ACT, A.CONTINUE, 1)),
        ("/longtask approve #2 9", Parsed(Kind.ACT, A.APPROVE, 2, 9)),
        ("/longtask deny #2", Parsed(Kind.ACT, A.DENY, 2)),
        (
            "/longtask answer #4 only the leads",
            Parsed(Kind.ACT, A.ANSWER, 4, None, "only the leads"),
        ),
        ("/longtask answer #4 v8 team", Parsed(Kind.ACT, A.ANSWER, 4, 8, "team")),
        ("/longtask answer #4 8", Parsed(Kind.ACT, A.ANSWER, 4, None, "8")),  # a bare number
        ("/longtask answer #4 v8 v9", Parsed(Kind.ACT, A.ANSWER, 4, 8, "v9")),
        ("/longtask", Parsed(Kind.HELP)),
        ("/longtask help", Parsed(Kind.HELP)),
        ("/longtask list", Parsed(Kind.LIST)),
        ("/longtask LS", Parsed(Kind.LIST)),
        ("yes", Parsed(Kind.SHORT, answer="yes")),
        ("  同意  ", Parsed(Kind.SHORT, answer="同意")),
        ("x" * SHORT_MAX, Parsed(Kind.SHORT, answer="x" * SHORT_MAX)),
    ],
)
def test_parse(text: str, expected: Parsed) -> None:
    assert parse(text) == expected


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("x" * (SHORT_MAX + 1), "too long"),
        ("yes\nand also", "too long"),
        ("/longtask frobnicate #3", "unknown action"),
        ("/longtask pause", "needs the task's handle"),
        ("/longtask pause three", "is not a handle"),
        ("/longtask pause #0", "is not a handle"),
        ("/longtask pause #-1", "is not a handle"),
        ("/longtask pause #3 seven", "takes only a version"),
        ("/longtask pause #3 7 8", "takes only a version"),
        ("/longtask pause #3 v0", "takes only a version"),
        ("/longtask answer #3", "needs the answer"),
        ("/longtask answer #3 v7", "needs the answer"),
        ("/longtask list all", "list takes nothing more"),
    ],
)
def test_parse_refusals_say_why_and_show_the_format(text: str, why: str) -> None:
    parsed = parse(text)
    assert parsed.kind is Kind.INVALID and why in parsed.error
    assert "/longtask answer <#handle>" in parsed.error
    assert parsed.action is None and parsed.handle is None


@pytest.mark.parametrize(
    ("kind", "reply", "answer"),
    [
        (DecisionKind.APPROVAL, "yes", "grant"),
        (DecisionKind.APPROVAL, "OK!", "grant"),
        (DecisionKind.APPROVAL, "同意。", "grant"),
        (DecisionKind.APPROVAL, "grant", "grant"),
        (DecisionKind.APPROVAL, "No", "deny"),
        (DecisionKind.APPROVAL, "拒绝", "deny"),
        (DecisionKind.APPROVAL, "maybe", None),
        (DecisionKind.APPROVAL, "done", None),
        (DecisionKind.EFFECT, "done", "done"),
        (DecisionKind.EFFECT, "已发送", "done"),
        (DecisionKind.EFFECT, "not sent", "retry"),
        (DecisionKind.EFFECT, "skip", "skip"),
        (DecisionKind.EFFECT, "fail", "fail"),
        (DecisionKind.EFFECT, "yes", None),  # did it happen? "yes" is not an answer to guess
        (DecisionKind.VERIFICATION, "confirm", "confirm"),
        (DecisionKind.VERIFICATION, "yes", "confirm"),
        (DecisionKind.VERIFICATION, "no", "reject"),
        (DecisionKind.VERIFICATION, "grant", None),
        (DecisionKind.QUESTION, " only the leads ", "only the leads"),
    ],
)
def test_short_answers(kind: DecisionKind, reply: str, answer: str | None) -> None:
    assert short_answer(reply, kind) == answer


def test_action_of_an_answer() -> None:
    assert action_of(DecisionKind.APPROVAL, "grant") is A.APPROVE
    assert action_of(DecisionKind.APPROVAL, "deny") is A.DENY
    assert action_of(DecisionKind.EFFECT, "done") is A.ANSWER
    assert answer_of(A.APPROVE, "ignored") == "grant" and answer_of(A.DENY, "") == "deny"
    assert answer_of(A.ANSWER, " team ") == "team"
    assert [a.answers for a in A] == [False, False, False, False, True, True, True]


def test_handles() -> None:
    assert format_handle(3) == "#3"
    assert [
        parse_handle(t) for t in ("#3", "3", " #42 ", "#0", "#03", "#x", "", "#1234567890")
    ] == [
        3,
        3,
        42,
        None,
        None,
        None,
        None,
        None,
    ]
    assert valid_action_id("msg-42") and valid_action_id("0190a3e2-7c1f:chat/9")
    assert not valid_action_id("") and not valid_action_id("has space")
    assert not valid_action_id("x" * 129)


def _decision(did: str, kind: DecisionKind, state: DecisionState = DecisionState.OPEN) -> Decision:
    return Decision(did, "t", kind, state, "May I?", 1, 4, 0)


def test_choose_decision_never_guesses() -> None:
    q = _decision("q", DecisionKind.QUESTION)
    a = _decision("a", DecisionKind.APPROVAL)
    old = _decision("o", DecisionKind.APPROVAL, DecisionState.ANSWERED)
    assert choose_decision(A.APPROVE, [q, a, old], "").decision == a  # the one approval
    several = choose_decision(A.ANSWER, [q, a], "")
    assert several.decision is None and several.ambiguous and "q, a" in several.why
    assert choose_decision(A.ANSWER, [q, a], "q").decision == q
    none = choose_decision(A.DENY, [q, old], "")
    assert none.decision is None and not none.ambiguous and "no open approval" in none.why
    assert choose_decision(A.APPROVE, [q], "q").decision is None  # not an approval
    assert choose_decision(A.ANSWER, [old], "o").decision is None  # not open


def test_a_repeat_matches_only_the_same_request() -> None:
    kept = ActionRecord("t", "x", A.ANSWER, "d", "team", "user", "ana", 5, 1)
    assert kept.same_request(ActionRecord("t", "x", A.ANSWER, None, "team"))
    assert kept.same_request(ActionRecord("t", "x", A.ANSWER, "d", "team"))
    assert not kept.same_request(ActionRecord("t", "x", A.ANSWER, "e", "team"))
    assert not kept.same_request(ActionRecord("t", "x", A.ANSWER, None, "leads"))
    assert not kept.same_request(ActionRecord("t", "x", A.PAUSE))


def test_prompts_carry_the_handle_the_command_and_the_version() -> None:
    approval = Decision("a", "t", DecisionKind.APPROVAL, DecisionState.OPEN, "Send?", 1, 4, 0)
    assert prompt(3, approval, 6) == (
        "#3 asks (approval): Send?\nReply: /longtask approve #3 6 or /longtask deny #3 6"
    )
    again = Decision(
        "a", "t", DecisionKind.APPROVAL, DecisionState.OPEN, "Send?", 1, 4, 0, repeat_count=3
    )
    assert "[request 3 for the same permission]" in prompt(3, again, 6)
    effect = _decision("e", DecisionKind.EFFECT)
    assert "/longtask answer #1 v2 done or /longtask answer #1 v2 retry" in prompt(1, effect, 2)
    question = _decision("q", DecisionKind.QUESTION)
    assert prompt(1, question, 2).endswith("/longtask answer #1 v2 <your answer>")
    verification = _decision("v", DecisionKind.VERIFICATION)
    assert "v2 confirm or /longtask answer #1 v2 reject" in prompt(1, verification, 2)
    # every prompt's command parses back to the action it names
    for line in (prompt(3, approval, 6), prompt(1, effect, 2)):
        command = line.split("Reply: ")[1].split(" or ")[0]
        assert parse(command).kind is Kind.ACT
