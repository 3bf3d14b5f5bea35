"""The runtime's read-only checkers on real files, a real SQLite database, real shell
commands and a real HTTP server on loopback: each answers passed, failed or unproven with
evidence, never touches what it checks, and a kind it does not know gets no verdict."""

from __future__ import annotations

import hashlib
import http.server
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from truerun_runtime.longtask.checkers import (
    CHECKERS,
    FAILED,
    PASSED,
    UNPROVEN,
    URL_ALLOW_ENV,
    run_checker,
    url_allowed,
)
from truerun_runtime.longtask.verify import verdict


def test_the_registry_is_the_runtime_kinds() -> None:
    assert set(CHECKERS) == {"file_exists", "file_sha256", "command", "http_status", "sql"}


@pytest.mark.parametrize("kind", ["receipt_present", "step_completed", "", "judge"])
def test_kinds_the_runtime_does_not_check_get_no_verdict(kind: str, tmp_path: Path) -> None:
    assert run_checker(kind, {"step_id": "s1"}, cwd=tmp_path, env={}) is None


def test_file_exists(tmp_path: Path) -> None:
    (tmp_path / "r.md").write_text("report\n")
    found = run_checker("file_exists", {"path": "r.md"}, cwd=tmp_path, env={})
    assert found is not None and found.result == PASSED
    (proof,) = found.evidence
    assert proof.kind == "file" and proof.reference == str(tmp_path / "r.md")
    assert proof.render == {"size": 7, "sha256": hashlib.sha256(b"report\n").hexdigest()}
    missing = run_checker("file_exists", {"path": "nope.md"}, cwd=tmp_path, env={})
    assert missing is not None and missing.result == FAILED and not missing.evidence
    absolute = run_checker("file_exists", {"path": str(tmp_path / "r.md")}, cwd=Path("/"), env={})
    assert absolute is not None and absolute.result == PASSED


def test_file_sha256(tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(b"abc")
    good = hashlib.sha256(b"abc").hexdigest()
    found = run_checker(
        "file_sha256", {"path": "a.bin", "sha256": good.upper()}, cwd=tmp_path, env={}
    )
    assert found is not None and found.result == PASSED
    wrong = run_checker("file_sha256", {"path": "a.bin", "sha256": "0" * 64}, cwd=tmp_path, env={})
    assert (
        wrong is not None and wrong.result == FAILED and wrong.evidence[0].render["sha256"] == good
    )


def test_bad_parameters_are_unproven_never_failed(tmp_path: Path) -> None:
    for kind, params in [
        ("file_exists", {}),
        ("file_sha256", {"path": "x"}),
        ("command", {"run": "true", "expect_exit": "zero"}),
        ("http_status", {}),
        ("sql", {"database": "db.sqlite"}),
    ]:
        found = run_checker(kind, params, cwd=tmp_path, env={})
        assert found is not None and found.result == UNPROVEN, (kind, found)


def test_command_exit_code_and_output_kept_as_a_hash_only(tmp_path: Path) -> None:
    found = run_checker("command", {"run": "printf 's3%s\\n' cret"}, cwd=tmp_path, env={})
    assert found is not None and found.result == PASSED
    (proof,) = found.evidence
    assert proof.kind == "command" and proof.render["exit_code"] == 0
    assert proof.render["output_sha256"] == hashlib.sha256(b"s3cret\n").hexdigest()
    assert "s3cret" not in repr(found)
    expected = run_checker("command", {"run": "exit 3", "expect_exit": 3.0}, cwd=tmp_path, env={})
    assert expected is not None and expected.result == PASSED
    failed = run_checker("command", {"run": "test -f missing"}, cwd=tmp_path, env={})
    assert failed is not None and failed.result == FAILED


def test_sql_reads_only(tmp_path: Path) -> None:
    db = tmp_path / "app.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("create table orders (id integer, status text)")
        conn.execute("insert into orders values (1, 'shipped'), (2, 'shipped')")
    count = {"database": "app.sqlite", "query": "select count(*) from orders", "expect": 2.0}
    found = run_checker("sql", count, cwd=tmp_path, env={})
    assert found is not None and found.result == PASSED and found.evidence[0].render == {"value": 2}
    text = {
        "database": str(db),
        "query": "select status from orders where id = 1",
        "expect": "sent",
    }
    wrong = run_checker("sql", text, cwd=tmp_path, env={})
    assert wrong is not None and wrong.result == FAILED
    write = {"database": str(db), "query": "delete from orders", "expect": None}
    refused = run_checker("sql", write, cwd=tmp_path, env={})
    assert refused is not None and refused.result == UNPROVEN and "readonly" in refused.why
    with sqlite3.connect(db) as conn:
        assert conn.execute("select count(*) from orders").fetchone() == (2,)
    nothing = run_checker("sql", {**count, "database": "none.sqlite"}, cwd=tmp_path, env={})
    assert nothing is not None and nothing.result == UNPROVEN
    assert not (tmp_path / "none.sqlite").exists()


class _Handler(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.seen.append(f"GET {self.path}")
        if self.path == "/moved":
            self.send_response(302)
            self.send_header("Location", "http://example.invalid/")
        else:
            self.send_response(200 if self.path == "/ok" else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def http_base() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_http_status_gets_only_allowed_urls(http_base: str, tmp_path: Path) -> None:
    _Handler.seen.clear()
    allow = {URL_ALLOW_ENV: f"https://elsewhere.example/, {http_base}/"}
    ok = run_checker("http_status", {"url": f"{http_base}/ok"}, cwd=tmp_path, env=allow)
    assert ok is not None and ok.result == PASSED and ok.evidence[0].render == {"status": 200}
    gone = run_checker("http_status", {"url": f"{http_base}/gone"}, cwd=tmp_path, env=allow)
    assert gone is not None and gone.result == FAILED
    moved = run_checker(
        "http_status", {"url": f"{http_base}/moved", "expect": 302}, cwd=tmp_path, env=allow
    )
    assert moved is not None and moved.result == PASSED  # answered, not followed
    assert _Handler.seen == ["GET /ok", "GET /gone", "GET /moved"]
    for env in ({}, {URL_ALLOW_ENV: "http://127.0.0.2/"}):
        refused = run_checker("http_status", {"url": f"{http_base}/ok"}, cwd=tmp_path, env=env)
        assert refused is not None and refused.result == UNPROVEN
        assert URL_ALLOW_ENV in refused.why
    assert len(_Handler.seen) == 3  # nothing fetched when not allowed


def test_verdict_source_and_evidence(tmp_path: Path) -> None:
    from truerun.v1 import long_task_service_pb2 as pb

    (tmp_path / "r.md").write_text("x")
    found = run_checker("file_exists", {"path": "r.md"}, cwd=tmp_path, env={})
    assert found is not None
    made = verdict("c1", "file_exists", found)
    assert made.source == "checker:file_exists" and made.result == pb.CRITERION_RESULT_PASSED
    assert made.evidence[0].kind == "file"
    missing = run_checker("file_exists", {"path": "no.md"}, cwd=tmp_path, env={})
    assert missing is not None
    failed = verdict("c1", "file_exists", missing)
    assert failed.result == pb.CRITERION_RESULT_FAILED and failed.evidence[0].kind == "check"


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("http://127.0.0.1:8000/health", True),
        ("http://127.0.0.1:8000/", True),
        ("HTTP://127.0.0.1:8000/x", True),
        ("http://127.0.0.1:80000/health", False),  # another port, same leading characters
        ("http://127.0.0.1:8000@evil.example/health", False),  # credentials: another host
        ("http://user:pw@127.0.0.1:8000/health", False),
        ("https://127.0.0.1:8000/health", False),  # another scheme
        ("http://api.example/v1/orders", True),
        ("http://api.example/v2/orders", False),  # outside the prefix's path
        ("http://api.example.evil/v1/orders", False),
    ],
)
def test_the_url_allow_list_matches_origins_not_characters(url: str, allowed: bool) -> None:
    env = {URL_ALLOW_ENV: "http://127.0.0.1:8000/, http://api.example/v1/, not a url"}
    assert url_allowed(url, env) is allowed
