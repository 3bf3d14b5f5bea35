"""The request file of `truerun task create --file task.yaml` (and `task continue --file`):
YAML or JSON, turned into a LongTaskDraft. The file is a request: truerun never reads it back
as state, and nothing here touches the network or the store.

    goal: "Publish the weekly report"
    owner: alice
    project: default            # optional; --project otherwise
    constraints: ["never email customers"]
    steps:
      - id: build                 # stable across plan versions
        title: Build the report
        class: pure     # pure | idempotent (+ idempotency_key) | queryable | non_idempotent
        run: "make report"        # what the reference agent runs
        writes: out/report.md     # a file-shaped step: its evidence is the file's sha256
      - id: upload
        title: Upload it
        class: queryable
        run: "upload out/report.md"
        receipt: json             # the command prints its receipt as JSON
        probe: "uploaded out/report.md"   # read-only: exit 0 done, 1 not done
        approval: "upload out/report.md"  # a person approves this exact action first
      - id: tomorrow
        title: Wait for tomorrow's window
        continue: {cron: "0 9 * * *", zone: Europe/Berlin}  # the attempt ends; the next goes on
    criteria:
      - id: report
        text: The report exists
        checker: {kind: file_exists, path: out/report.md}
      - id: tone
        text: It reads well       # no checker: subjective (a judge or a person decides)
    budget: {max_attempts: 5, lifetime: 2d}

Unknown keys are refused (a typo would otherwise be a silently missing step property).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from google.protobuf import duration_pb2, struct_pb2
from truerun.v1 import long_task_service_pb2 as pb

from automations.domain.calendar import InvalidCalendar, parse_interval

CLASSES = {
    "pure": pb.SIDE_EFFECT_CLASS_PURE,
    "idempotent": pb.SIDE_EFFECT_CLASS_IDEMPOTENT,
    "queryable": pb.SIDE_EFFECT_CLASS_QUERYABLE,
    "non_idempotent": pb.SIDE_EFFECT_CLASS_NON_IDEMPOTENT,
}
_TASK_KEYS = {"id", "goal", "owner", "project", "agent", "constraints", "sources", "source_ref"}
_PLAN_KEYS = {"steps", "criteria"}
_STEP_KEYS = {"id", "title", "class", "idempotency_key", "input", "probe"}
# What the runtime runs: opaque to truerun, kept as the step's action (docs/long-tasks.md).
_ACTION_KEYS = {
    *("run", "receipt", "writes", "approval", "target", "prepare", "ask", "options"),
    "continue",  # {at | cron | every, zone, catchup}: the attempt continues later here
}
_CRITERION_KEYS = {"id", "text", "checker", "optional"}
_BUDGET_KEYS = {"max_attempts", "max_tokens", "lifetime", "max_corrections"}


class RequestFileError(ValueError):
    """What is wrong with the file, naming where (``steps[2].class: ...``)."""


def load(path: str) -> dict[str, Any]:
    """The file's mapping: JSON when it ends in .json, else YAML (which reads JSON too)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RequestFileError(f"{path}: cannot read it ({exc})") from None
    return parse(text, json_only=path.endswith(".json"), name=path)


def parse(text: str, *, json_only: bool = False, name: str = "the file") -> dict[str, Any]:
    try:
        if json_only:
            document = json.loads(text)
        else:
            document = yaml.safe_load(text)
    except ValueError as exc:
        raise RequestFileError(f"{name}: not valid JSON: {exc}") from None
    except yaml.YAMLError as exc:  # the message names the line
        raise RequestFileError(f"{name}: not valid YAML: {' '.join(str(exc).split())}") from None
    if not isinstance(document, dict):
        raise RequestFileError(f"{name}: the request must be a mapping (goal, owner, steps, ...)")
    return document


def draft(document: dict[str, Any], project: str) -> pb.LongTaskDraft:
    """The LongTaskDraft the file asks for; ``project`` when the file names none."""
    _known(document, _TASK_KEYS | _PLAN_KEYS | {"budget"}, "the request")
    named = _text(document, "project", "the request")
    if named and project and named != project:
        raise RequestFileError(f"project: the file says {named!r}, --project {project!r}")
    steps, criteria = plan(document, keys=_TASK_KEYS | _PLAN_KEYS | {"budget"})
    made = pb.LongTaskDraft(
        project_id=named or project or "default",
        long_task_id=_text(document, "id", "the request"),
        owner_id=_text(document, "owner", "the request"),
        agent_id=_text(document, "agent", "the request"),
        goal=_text(document, "goal", "the request"),
        constraints=_strings(document, "constraints"),
        sources=_strings(document, "sources"),
        source_ref=_text(document, "source_ref", "the request"),
        steps=steps,
        criteria=criteria,
    )
    for required in ("goal", "owner"):
        if not document.get(required):
            raise RequestFileError(f"{required}: required")
    if "budget" in document:
        made.budget.CopyFrom(_budget(document["budget"]))
    return made


def plan(
    document: dict[str, Any], keys: set[str] = _PLAN_KEYS
) -> tuple[list[pb.StepDraft], list[pb.CriterionDraft]]:
    """The steps and criteria of a file (a continuation's file holds only these)."""
    _known(document, keys, "a continuation file (steps and criteria only)")
    steps = [_step(item, f"steps[{i}]") for i, item in enumerate(_list(document, "steps"))]
    criteria = [
        _criterion(item, f"criteria[{i}]") for i, item in enumerate(_list(document, "criteria"))
    ]
    return steps, criteria


def _step(item: Any, where: str) -> pb.StepDraft:
    if not isinstance(item, dict):
        raise RequestFileError(f"{where}: a step is a mapping (id, title, class, run, ...)")
    _known(item, _STEP_KEYS | _ACTION_KEYS, where)
    for required in ("id", "title", "class"):
        if not item.get(required):
            raise RequestFileError(f"{where}.{required}: required")
    side_effect = str(item["class"]).strip().lower().replace("-", "_")
    if side_effect not in CLASSES:
        raise RequestFileError(
            f"{where}.class: {item['class']!r} is not one of {', '.join(CLASSES)}"
        )
    if side_effect == "idempotent" and not _text(item, "idempotency_key", where):
        # what the server refuses too, said here with the file's own position: only a key
        # that stays the same on every attempt makes the retry of an idempotent step harmless
        raise RequestFileError(
            f"{where}.idempotency_key: required for an idempotent step (a key that stays the"
            " same on every attempt), or declare it queryable or non_idempotent"
        )
    step = pb.StepDraft(
        step_id=_text(item, "id", where),
        title=_text(item, "title", where),
        side_effect=CLASSES[side_effect],
        idempotency_key=_text(item, "idempotency_key", where),
        input_summary=_text(item, "input", where),
    )
    action = {k: v for k, v in item.items() if k in _ACTION_KEYS}
    if action:
        step.action.CopyFrom(_struct(action, where))
    if "probe" in item:
        probe = item["probe"]
        step.probe.CopyFrom(_struct(probe if isinstance(probe, dict) else {"run": probe}, where))
    return step


def _criterion(item: Any, where: str) -> pb.CriterionDraft:
    if not isinstance(item, dict):
        raise RequestFileError(f"{where}: a criterion is a mapping (id, text, checker)")
    _known(item, _CRITERION_KEYS, where)
    for required in ("id", "text"):
        if not item.get(required):
            raise RequestFileError(f"{where}.{required}: required")
    optional = item.get("optional", False)
    if not isinstance(optional, bool):
        raise RequestFileError(f"{where}.optional: true or false")
    made = pb.CriterionDraft(
        criterion_id=_text(item, "id", where), text=_text(item, "text", where), optional=optional
    )
    checker = item.get("checker")
    if checker is None or checker == "none":
        return made  # subjective: a judge or a person decides
    if isinstance(checker, str):
        checker = {"kind": checker}
    if not isinstance(checker, dict) or not isinstance(checker.get("kind"), str):
        raise RequestFileError(f"{where}.checker: {{kind: <checker>, <params>...}} or none")
    params = {k: v for k, v in checker.items() if k != "kind"}
    made.checker_kind = checker["kind"]
    if params:
        made.checker.CopyFrom(_struct(params, f"{where}.checker"))
    return made


def _budget(value: Any) -> pb.LongTaskBudget:
    if not isinstance(value, dict):
        raise RequestFileError("budget: a mapping (max_attempts, max_tokens, lifetime, ...)")
    _known(value, _BUDGET_KEYS, "budget")
    budget = pb.LongTaskBudget()
    for name in ("max_attempts", "max_tokens", "max_corrections"):
        number = value.get(name, 0)
        if not isinstance(number, int) or isinstance(number, bool) or number < 0:
            raise RequestFileError(f"budget.{name}: a whole number, 0 or more")
        setattr(budget, name, number)
    if value.get("lifetime") is not None:
        lifetime = duration_pb2.Duration()
        try:
            lifetime.FromMilliseconds(parse_interval(str(value["lifetime"])))
        except InvalidCalendar as exc:
            why = str(exc).removeprefix("interval: ")
            raise RequestFileError(f"budget.lifetime: {why}") from None
        budget.lifetime.CopyFrom(lifetime)
    return budget


def _known(document: dict[str, Any], keys: set[str], where: str) -> None:
    unknown = sorted(str(k) for k in set(document) - keys)
    if unknown:
        raise RequestFileError(
            f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(keys))})"
        )


def _text(document: dict[str, Any], name: str, where: str) -> str:
    value = document.get(name)
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise RequestFileError(f"{where}.{name}: text")
    return str(value).strip()


def _strings(document: dict[str, Any], name: str) -> list[str]:
    return [str(item) for item in _list(document, name)]


def _list(document: dict[str, Any], name: str) -> list[Any]:
    value = document.get(name) or []
    if not isinstance(value, list):
        raise RequestFileError(f"{name}: a list")
    return value


def _struct(value: dict[str, Any], where: str) -> struct_pb2.Struct:
    made = struct_pb2.Struct()
    try:
        made.update(value)
    except (TypeError, ValueError) as exc:
        raise RequestFileError(f"{where}: {exc}") from None
    return made
