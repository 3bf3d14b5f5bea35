"""`truerun task create --file`'s request file (services/cli/task_file.py), without I/O
beyond reading the example: what a YAML or JSON request becomes as a LongTaskDraft, and how a
bad one is refused, naming where."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.protobuf import json_format
from truerun.v1 import long_task_service_pb2 as pb

from services.cli.task_file import RequestFileError, draft, load, parse, plan

EXAMPLE = Path(__file__).parents[2] / "docs" / "examples" / "task.yaml"


def test_the_example_file_is_a_complete_request() -> None:
    made = draft(load(str(EXAMPLE)), "")
    assert made.project_id == "default" and made.owner_id == "alice"
    assert made.goal == "Publish this week's summary"
    assert list(made.constraints) == ["never overwrite an older summary"]
    collect, publish = made.steps
    assert (collect.step_id, collect.side_effect) == ("collect", pb.SIDE_EFFECT_CLASS_PURE)
    assert json_format.MessageToDict(collect.action) == {
        "run": "mkdir -p out && date -u +%F > out/numbers.txt",
        "writes": "out/numbers.txt",
    }
    assert publish.side_effect == pb.SIDE_EFFECT_CLASS_QUERYABLE
    action = json_format.MessageToDict(publish.action)
    assert action["receipt"] == "json" and action["approval"] == "publish out/published.txt"
    assert json_format.MessageToDict(publish.probe) == {"run": "test -f out/published.txt"}
    published, readable = made.criteria
    assert published.checker_kind == "file_exists" and not published.optional
    assert json_format.MessageToDict(published.checker) == {"path": "out/published.txt"}
    assert readable.checker_kind == "" and readable.optional  # subjective
    assert made.budget.max_attempts == 5 and made.budget.lifetime.seconds == 2 * 86400


def test_json_reads_the_same_as_yaml() -> None:
    document = {
        "goal": "g",
        "owner": "o",
        "source_ref": "https://chat.example/t/1",
        "steps": [
            {"id": "a", "title": "A", "class": "non-idempotent", "ask": "ok?", "options": ["y"]},
            {"id": "b", "title": "B", "class": "idempotent", "idempotency_key": "k-1"},
        ],
        "criteria": [{"id": "c", "text": "C", "checker": "receipt_present"}],
    }
    from_json = draft(parse(json.dumps(document), json_only=True), "proj")
    from_yaml = draft(parse(json.dumps(document)), "proj")
    assert from_json == from_yaml
    assert from_json.project_id == "proj"
    assert from_json.source_ref == "https://chat.example/t/1"
    assert from_json.steps[0].side_effect == pb.SIDE_EFFECT_CLASS_NON_IDEMPOTENT
    assert json_format.MessageToDict(from_json.steps[0].action) == {"ask": "ok?", "options": ["y"]}
    assert from_json.steps[1].idempotency_key == "k-1"
    assert from_json.criteria[0].checker_kind == "receipt_present"
    assert not from_json.HasField("budget")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("- a list", "must be a mapping"),
        ("goal: [unclosed", "not valid YAML"),
        ("owner: o\nsteps: []\ncriteria: []", "goal: required"),
        ("goal: g\nowner: o\nstep: []", "unknown key(s) step"),
        ("goal: g\nowner: o\nsteps: [{id: a, title: A}]", "steps[0].class: required"),
        ("goal: g\nowner: o\nsteps: [{id: a, title: A, class: risky}]", "not one of pure"),
        ("goal: g\nowner: o\nsteps: [{id: a, title: A, class: pure, retry: 3}]", "retry"),
        ("goal: g\nowner: o\ncriteria: [{id: c}]", "criteria[0].text: required"),
        ("goal: g\nowner: o\ncriteria: [{id: c, text: t, checker: {path: x}}]", "checker"),
        ("goal: g\nowner: o\nbudget: {lifetime: soon}", "budget.lifetime"),
        ("goal: g\nowner: o\nbudget: {max_attempts: -1}", "budget.max_attempts"),
        ("goal: g\nowner: o\nproject: other", "--project 'proj'"),
        # an idempotent step is retried by its class: only a stable key makes that harmless
        (
            "goal: g\nowner: o\nsteps: [{id: a, title: A, class: pure}, {id: b, title: B,"
            " class: idempotent}]",
            "steps[1].idempotency_key: required for an idempotent step",
        ),
        (
            "goal: g\nowner: o\nsteps: [{id: b, title: B, class: idempotent,"
            " idempotency_key: ' '}]",
            "steps[0].idempotency_key: required",
        ),
    ],
)
def test_a_bad_request_is_refused_saying_where(text: str, says: str) -> None:
    with pytest.raises(RequestFileError) as refused:
        draft(parse(text), "proj")
    assert says in str(refused.value)


def test_a_continuation_file_holds_steps_and_criteria_only() -> None:
    steps, criteria = plan(parse("steps: [{id: fix, title: Fix it, class: pure, run: make}]"))
    assert [s.step_id for s in steps] == ["fix"] and criteria == []
    with pytest.raises(RequestFileError, match="steps and criteria only"):
        plan(parse("goal: another goal\nsteps: []"))


def test_an_unreadable_file_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RequestFileError, match="cannot read it"):
        load(str(tmp_path / "missing.yaml"))
    bad = tmp_path / "task.json"
    bad.write_text("goal: yaml in a .json file")
    with pytest.raises(RequestFileError, match="not valid JSON"):
        load(str(bad))


def test_the_request_in_the_docs_is_one_the_cli_takes() -> None:
    """docs/long-tasks.md "Using it" shows a request file: it must stay one that works."""
    text = (EXAMPLE.parents[1] / "long-tasks.md").read_text()
    usage = text.split("## Using it", 1)[1]
    block = usage.split("```yaml\n", 1)[1].split("```", 1)[0]
    made = draft(parse(block), "")
    assert [s.step_id for s in made.steps] == ["collect", "publish"]
    assert made.steps[1].side_effect == pb.SIDE_EFFECT_CLASS_QUERYABLE
    assert [c.checker_kind for c in made.criteria] == ["file_exists", ""]
