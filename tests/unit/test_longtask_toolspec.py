"""The pure parsing behind the reference agent's declared tool calls and the step driver's
continuations (docs/runtime-protocol.md "Declared tool calls"; docs/long-tasks.md
"Continuations and catch-up", section 10): the ``tools`` section of a run spec, a
``continue`` action, and the agent's choice of process for a Start."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from truerun.v1 import long_task_service_pb2 as pb

from services.cli.task_file import draft, load
from truerun_runtime.agent.tasks import SpecError, parse_spec
from truerun_runtime.longtask.actions import ActionError, parse_action
from truerun_runtime.longtask.continuing import ContinueError, duration_ms, parse_continue
from truerun_runtime.longtask.toolspec import TOOLS_ENV, ToolSpecError, parse_tools

EDIT = {"id": "edit", "tier": "idempotent", "run": "echo edit", "receipt": "json"}
T = {"text": "do it"}
SEND = {"id": "send", "title": "send it", "tier": "non_idempotent", "run": "echo sent"}


def test_a_tools_section_reads_its_request_calls_plan_and_default_criteria() -> None:
    spec = parse_tools(
        {
            "text": "Edit the page, then send it",
            "calls": [EDIT, SEND],
            "plan": [{"id": "later", "continue": {"every": "1h"}}, {"id": "tell", "ask": "ok?"}],
        }
    )
    assert spec.request.text == "Edit the page, then send it"
    assert not spec.request.force and not spec.request.suppress
    assert [(s.step_id, s.title, s.tier) for s in spec.calls] == [
        ("edit", "edit", "idempotent"),
        ("send", "send it", "non_idempotent"),
    ]
    assert spec.calls[0].action == {"run": "echo edit", "receipt": "json"}
    assert [(s.step_id, s.tier, s.waits) for s in spec.plan] == [
        ("later", "pure", True),
        ("tell", "pure", True),
    ]
    assert not spec.calls[1].waits
    call = spec.calls[1].call()
    assert (call.tier, call.target, call.summary, call.action) == (
        "non_idempotent",
        "send it",
        "echo sent",
        {"run": "echo sent"},
    )
    assert [(c.criterion_id, c.checker_kind, c.checker) for c in spec.criteria] == [
        ("c-edit", "step_completed", {"step_id": "edit"}),
        ("c-send", "step_completed", {"step_id": "send"}),
        ("c-later", "step_completed", {"step_id": "later"}),
        ("c-tell", "step_completed", {"step_id": "tell"}),
    ]
    given = parse_tools(
        {"text": "look", "plan": [SEND], "force": True, "criteria": [{"text": "done"}]}
    )
    assert given.request.force and given.calls == () and given.steps == given.plan
    assert [(c.criterion_id, c.text, c.checker_kind) for c in given.criteria] == [
        ("c1", "done", "")
    ]


@pytest.mark.parametrize(
    ("section", "words"),
    [
        ("x", "tools must be an object"),
        ({**T, "calls": [EDIT], "extra": 1}, "unknown keys: extra"),
        ({"text": 3}, "tools.text must be the user's request"),
        ({"calls": [EDIT]}, "tools.text must be the user's request"),
        ({"text": "t", "force": True, "suppress": True}, "force or suppress"),
        ({"text": "t", "force": "yes"}, "true or false"),
        ({"text": "t", "force": True}, "needs a call or a plan step"),
        ({**T, "calls": {"id": "x"}}, "tools.calls must be a list"),
        ({**T, "calls": ["echo"]}, "tools.calls[0] must be an object"),
        ({**T, "calls": [{**EDIT, "id": "bad id"}]}, "tools.calls[0].id"),
        ({**T, "calls": [{**EDIT, "title": ""}]}, ".title must be a non-empty string"),
        ({**T, "calls": [{"id": "a", "run": "x"}]}, "tier must be one of"),
        ({**T, "calls": [{**EDIT, "tier": "risky"}]}, "tier must be one of"),
        ({**T, "calls": [{**EDIT, "receipt": "xml"}]}, "receipt must be"),
        ({**T, "calls": [{**EDIT, "run": ""}]}, "run must be a non-empty"),
        ({**T, "calls": [{**EDIT, "ask": "why?"}]}, "unknown keys: ask"),
        ({**T, "calls": [{**EDIT, "idempotency_key": 7}]}, "idempotency_key must be a string"),
        ({**T, "calls": [EDIT], "plan": [{**SEND, "id": "edit"}]}, "unique: edit"),
        (
            {**T, "plan": [{"id": "w", "tier": "idempotent", "continue": {"every": "1h"}}]},
            "is pure",
        ),
        ({**T, "plan": [{"id": "w", "continue": {"every": "soon"}}]}, "every must be a duration"),
        ({**T, "criteria": [{"text": ""}]}, "criteria[0].text"),
        ({**T, "criteria": [{"text": "t", "checker": []}]}, "checker must be an object"),
        ({**T, "criteria": [{"text": "t", "why": 1}]}, "unknown keys: why"),
    ],
)
def test_a_tools_section_that_cannot_run_is_refused_naming_why(section: Any, words: str) -> None:
    with pytest.raises(ToolSpecError, match=words.replace("[", r"\[").replace("]", r"\]")):
        parse_tools(section)


def _ms(when: datetime) -> int:
    return int(when.timestamp() * 1000)


def test_a_continue_action_is_a_continuation_spec() -> None:
    every = parse_action({"continue": {"every": "2s", "catchup": "15m", "reason": "nightly"}})
    assert every.is_continuation and not every.is_question and every.later is not None
    assert every.later.every.ToMilliseconds() == 2000
    assert every.later.catchup_window.ToMilliseconds() == 900_000
    assert every.later.reason == "nightly" and not every.later.cron
    cron = parse_continue({"cron": "0 9 * * 1-5", "zone": "Europe/Berlin"})
    assert (cron.cron, cron.time_zone, cron.HasField("at")) == (
        "0 9 * * 1-5",
        "Europe/Berlin",
        False,
    )
    berlin = parse_continue({"at": "2026-12-02T09:00", "zone": "Europe/Berlin"})
    assert berlin.at.ToMilliseconds() == _ms(datetime(2026, 12, 2, 8, 0, tzinfo=UTC))  # CET
    utc = parse_continue({"at": "2026-12-02T09:00:00+00:00"})
    assert utc.at.ToMilliseconds() == _ms(datetime(2026, 12, 2, 9, 0, tzinfo=UTC))
    assert parse_continue({"at": 1_000}).at.ToMilliseconds() == 1_000
    assert [duration_ms(t, "d") for t in ("250ms", "1.5s", "2m", "1h", "1d")] == [
        250,
        1500,
        120_000,
        3_600_000,
        86_400_000,
    ]
    assert isinstance(every.later, pb.ContinuationSpec)


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ({}, "continue must be an object"),
        ({"every": "1h", "cron": "* * * * *"}, "exactly one"),
        ({"zone": "UTC"}, "exactly one"),
        ({"every": "0s"}, "longer than 0"),
        ({"every": 5}, "every must be a duration"),
        ({"every": "1h", "catchup": "a while"}, "catchup must be a duration"),
        ({"at": "tomorrow"}, "not an ISO 8601"),
        ({"at": True}, "ISO 8601 time or milliseconds"),
        ({"at": "2026-12-02T09:00", "zone": "Mars/Olympus"}, "IANA"),
        ({"cron": 5}, "cron must be a string"),
        ({"every": "1h", "when": "x"}, "unknown keys: when"),
    ],
)
def test_a_continuation_that_cannot_be_asked_for_is_refused(spec: Any, words: str) -> None:
    with pytest.raises(ContinueError, match=words):
        parse_continue(spec)
    with pytest.raises(ActionError):
        parse_action({"continue": spec})
    with pytest.raises(ActionError, match="one only"):
        parse_action({"continue": {"every": "1h"}, "run": "echo"})


def test_the_agent_runs_declared_tools_with_the_tool_runner() -> None:
    section = {"text": "edit it", "calls": [EDIT]}
    spec = parse_spec({"tools": section, "env": {"A": "1"}})
    assert spec.argv == [sys.executable, "-m", "truerun_runtime.longtask", "tools"]
    assert spec.long_task  # it dials truerun: the agent gives it the server's address
    assert json.loads(spec.env[TOOLS_ENV]) == section and spec.env["A"] == "1"
    plain = parse_spec({"tools": section, "command": "echo hi"})  # a command wins
    assert plain.argv == ["/bin/sh", "-c", "echo hi"] and TOOLS_ENV not in plain.env
    driver = parse_spec({"tools": section, "long_task": {"id": "lt"}})  # an attempt: the driver
    assert driver.argv == [sys.executable, "-m", "truerun_runtime.longtask"]
    with pytest.raises(SpecError, match="tier must be one of"):
        parse_spec({"tools": {**T, "calls": [{"id": "a", "run": "x"}]}})


def test_the_examples_parse_as_the_agent_and_the_step_driver_read_them() -> None:
    examples = Path(__file__).parents[2] / "docs" / "examples"
    body = json.loads((examples / "tools-run.json").read_text())
    spec = parse_tools(body["spec"]["tools"])
    assert [(c.step_id, c.tier) for c in spec.calls] == [
        ("edit", "idempotent"),
        ("send", "non_idempotent"),
    ]
    assert [c.checker_kind for c in spec.criteria] == ["receipt_present"]
    made = draft(load(str(examples / "continue-later.yaml")), "")
    actions = [parse_action(json_format.MessageToDict(s.action)) for s in made.steps]
    assert [a.is_continuation for a in actions] == [False, True, False]
    later = actions[1].later
    assert later is not None and (later.cron, later.time_zone) == ("0 6 * * *", "Europe/Berlin")
    assert later.catchup_window.ToMilliseconds() == 2 * 3_600_000
