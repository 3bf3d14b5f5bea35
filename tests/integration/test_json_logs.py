"""Structured logs (TRUERUN_LOG_FORMAT=json): one JSON object per record and line, the run,
attempt and project of a transition on its records (bound by the door), an exception as one
escaped field, the redaction filter still cleaning message and traceback; and the gateway's
access line: route template, status, duration, bytes, request id, never the query string."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from coordinator.domain import commands as c
from coordinator.domain.redaction import RedactingFilter
from gateway.metrics import GatewayMetrics, MetricsMiddleware
from kernel import logs
from kernel.db.migrate import upgrade
from kernel.logs import JsonFormatter
from services.bootstrap import coordinator, open_store
from services.log_setup import configure_logging
from tests.support.factories import evidence, started

SECRET = "sk-ant-" + "x" * 24  # a token shape the redaction filter knows


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """Every record of the process, JSON-formatted and redacted as in production."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(RedactingFilter())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield out
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def _lines(out: io.StringIO) -> list[dict[str, Any]]:
    text = out.getvalue()
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]  # one object per line, each


async def test_a_transitions_records_carry_its_run_attempt_and_project(
    sqlite_url: str, captured: io.StringIO
) -> None:
    await upgrade(sqlite_url)
    store = await open_store(sqlite_url)
    try:
        app = coordinator(store)
        run, attempt = await started(app.transitions, project_id="proj-logs")
        await app.transitions.execute(evidence(c.RuntimeRunning, attempt, 1))
    finally:
        await store.close()
    door = [r for r in _lines(captured) if r["logger"] == "coordinator.service.transitions"]
    assert [r["msg"] for r in door] == [
        "transition new -> queued: applied",
        "transition queued -> dispatching: applied",
        "transition dispatching -> dispatching: applied",
        "transition dispatching -> running: applied",
    ], door
    for record in door:
        assert record["run_id"] == run.run.id and record["project"] == "proj-logs", record
        assert record["level"] == "debug" and record["ts"].endswith("+00:00"), record
    assert door[-1]["attempt_id"] == attempt.id
    assert logs.current() == {}  # nothing leaks out of the door into what follows


def test_an_exception_is_one_escaped_field_and_redacted(captured: io.StringIO) -> None:
    log = logging.getLogger("truerun.test")
    with logs.bound(request_id="req-1", run_id="run-1"):
        try:
            raise ValueError(f"line one\nline two {SECRET}")
        except ValueError:
            log.exception("failed with %s", SECRET)
    (record,) = _lines(captured)
    assert record["msg"] == "failed with [REDACTED]" or SECRET not in record["msg"]
    assert record["request_id"] == "req-1" and record["run_id"] == "run-1"
    assert "ValueError: line one\nline two" in record["exc"]  # newlines inside the field
    assert "Traceback" in record["exc"] and SECRET not in captured.getvalue()


def test_the_json_setting_installs_one_redacting_handler(
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    for handler in saved:  # a process's root logger has no handler before it configures one
        root.removeHandler(handler)
    try:
        configure_logging("json")
        configure_logging("json")  # again (a server command after main's first call): one
        logging.getLogger("truerun.test").warning("token %s", SECRET)
        err = capsys.readouterr().err
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved:
            root.addHandler(handler)
        root.setLevel(level)
        logging.captureWarnings(False)
    (line,) = err.splitlines()
    record = json.loads(line)
    assert record["level"] == "warning" and record["logger"] == "truerun.test"
    assert SECRET not in err


async def _thing(request: Request) -> PlainTextResponse:
    return PlainTextResponse("x" * 42)


async def test_the_access_line_names_the_template_never_the_path_or_query(
    captured: io.StringIO,
) -> None:
    routes = [Route("/v1/things/{thing}", _thing)]
    app = MetricsMiddleware(Starlette(routes=routes), routes, GatewayMetrics())
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as http:
        kept = await http.get(
            f"/v1/things/thing-0199?token={SECRET}", headers={"X-Request-Id": "abc-123"}
        )
        fresh = await http.get("/v1/things/t2", headers={"X-Request-Id": "bad id\twith tab"})
        missing = await http.get("/nowhere/at/all")
    assert kept.headers["x-request-id"] == "abc-123"
    assert fresh.headers["x-request-id"] != "bad id\twith tab"
    access = [r for r in _lines(captured) if r["logger"] == "truerun.access"]
    assert [(r["method"], r["route"], r["status"]) for r in access] == [
        ("GET", "/v1/things/{thing}", 200),
        ("GET", "/v1/things/{thing}", 200),
        ("GET", "unmatched", 404),
    ]
    assert access[0]["request_id"] == "abc-123" and access[0]["bytes"] == 42
    assert access[1]["request_id"] == fresh.headers["x-request-id"]
    assert access[2]["request_id"] == missing.headers["x-request-id"]
    assert access[2]["level"] == "info" and access[0]["duration_ms"] >= 0
    text = json.dumps(access)  # (the test's own httpx client logs its URLs: not ours)
    assert "thing-0199" not in text and SECRET not in text and "token" not in text
