"""The runtime's deterministic, READ-ONLY checkers: what a verifying attempt runs for the
acceptance criteria whose checker kind is one of these. Each answers passed, failed or
unproven (it could not tell) with evidence; the server binds the evidence to the criterion
and decides completion from it (docs/long-tasks.md "Completion"). The verdict's source is
``checker:<kind>``.

- ``file_exists {path}``: the file exists (evidence: its size and sha256);
- ``file_sha256 {path, sha256}``: the file's sha256 is the one given;
- ``command {run, expect_exit: 0}``: the shell command exits so. It MUST be read-only: the
  checker cannot enforce that, it is the plan's promise;
- ``http_status {url, expect: 200}``: a GET (redirects not followed) answers that status;
  the URL must be covered by a prefix listed in ``TRUERUN_VERIFY_URL_ALLOW``
  (comma-separated; same scheme and host:port, the path starting with the prefix's), else
  it is not fetched and the verdict is unproven;
- ``sql {database, query, expect}``: the first column of the first row (null: no row) of a
  query on a SQLite file opened read-only (``mode=ro``, ``query_only``) equals ``expect``.

A kind not here (``receipt_present``, ``step_completed``: the server's; or none: a
subjective criterion) gets no verdict from the runtime. Relative paths are read from the
attempt's working directory.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PASSED = "passed"
FAILED = "failed"
UNPROVEN = "unproven"
URL_ALLOW_ENV = "TRUERUN_VERIFY_URL_ALLOW"
COMMAND_TIMEOUT_S = 120.0
HTTP_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class Evidence:
    kind: str
    reference: str
    summary: str
    render: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckResult:
    result: str  # PASSED, FAILED or UNPROVEN
    why: str
    evidence: tuple[Evidence, ...] = ()


@dataclass(frozen=True)
class CheckContext:
    cwd: Path
    env: Mapping[str, str]


Checker = Callable[[Mapping[str, Any], CheckContext], CheckResult]


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 16), b""):
            digest.update(block)
    return digest.hexdigest()


def _string(params: Mapping[str, Any], name: str) -> str:
    value = params.get(name)
    if not isinstance(value, str) or not value:
        raise ValueError(f"parameter {name!r} must be a non-empty string")
    return value


def _path(params: Mapping[str, Any], ctx: CheckContext) -> Path:
    path = Path(_string(params, "path"))
    return path if path.is_absolute() else ctx.cwd / path


def _file_evidence(path: Path) -> Evidence:
    digest = sha256_file(path)
    size = path.stat().st_size
    return Evidence(
        "file", str(path), f"{path.name}: {size} bytes", {"size": size, "sha256": digest}
    )


def file_exists(params: Mapping[str, Any], ctx: CheckContext) -> CheckResult:
    path = _path(params, ctx)
    if not path.is_file():
        return CheckResult(FAILED, f"no file {path}")
    return CheckResult(PASSED, f"{path} exists", (_file_evidence(path),))


def file_sha256(params: Mapping[str, Any], ctx: CheckContext) -> CheckResult:
    path = _path(params, ctx)
    expected = _string(params, "sha256").lower()
    if not path.is_file():
        return CheckResult(FAILED, f"no file {path}")
    found = _file_evidence(path)
    if found.render["sha256"] != expected:
        return CheckResult(
            FAILED, f"{path} has sha256 {found.render['sha256']}, not {expected}", (found,)
        )
    return CheckResult(PASSED, f"{path} has the expected sha256", (found,))


def command(params: Mapping[str, Any], ctx: CheckContext) -> CheckResult:
    """A read-only shell command (by the plan's promise). Its output is kept as a hash and a
    size only: it may hold what must not be stored in clear."""
    run = _string(params, "run")
    expect = params.get("expect_exit", 0)
    if isinstance(expect, float) and expect.is_integer():
        expect = int(expect)
    if not isinstance(expect, int) or isinstance(expect, bool):
        raise ValueError("expect_exit must be an integer")
    try:
        done = subprocess.run(
            ["/bin/sh", "-c", run],
            cwd=ctx.cwd,
            env=dict(ctx.env),
            capture_output=True,
            timeout=COMMAND_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return CheckResult(UNPROVEN, f"the command did not finish within {COMMAND_TIMEOUT_S:g} s")
    except OSError as error:
        return CheckResult(UNPROVEN, f"the command could not run: {error.strerror}")
    output = done.stdout + done.stderr
    render = {
        "exit_code": done.returncode,
        "output_sha256": hashlib.sha256(output).hexdigest(),
        "output_bytes": len(output),
    }
    proof = Evidence("command", run, f"exit {done.returncode} (expected {expect})", render)
    result = PASSED if done.returncode == expect else FAILED
    return CheckResult(result, f"exit {done.returncode}, expected {expect}", (proof,))


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is answered, not followed: it could lead off the allow-list."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def url_allowed(url: str, env: Mapping[str, str]) -> bool:
    """Whether a prefix of TRUERUN_VERIFY_URL_ALLOW covers ``url``: the same scheme and
    host:port exactly (so ``http://a.example`` never covers ``http://a.example.evil`` or
    ``http://a.example@evil``), and the URL's path starting with the prefix's. A URL with
    credentials in it is never allowed."""
    target = urllib.parse.urlsplit(url)
    if target.username is not None or target.password is not None:
        return False
    for prefix in (p.strip() for p in env.get(URL_ALLOW_ENV, "").split(",")):
        allowed = urllib.parse.urlsplit(prefix)
        if not (prefix and allowed.scheme and allowed.netloc):
            continue
        same_origin = (allowed.scheme.lower(), allowed.netloc.lower()) == (
            target.scheme.lower(),
            target.netloc.lower(),
        )
        if same_origin and target.path.startswith(allowed.path):
            return True
    return False


def http_status(params: Mapping[str, Any], ctx: CheckContext) -> CheckResult:
    url = _string(params, "url")
    expect = params.get("expect", 200)
    if isinstance(expect, float) and expect.is_integer():
        expect = int(expect)
    if not isinstance(expect, int) or isinstance(expect, bool):
        raise ValueError("expect must be an HTTP status code")
    if not url.startswith(("http://", "https://")):
        return CheckResult(UNPROVEN, f"{url}: only http and https URLs are checked")
    if not url_allowed(url, ctx.env):
        return CheckResult(UNPROVEN, f"{url} is not allowed by {URL_ALLOW_ENV}: not fetched")
    opener = urllib.request.build_opener(_NoRedirect)
    request = urllib.request.Request(url, method="GET")
    try:
        with opener.open(request, timeout=HTTP_TIMEOUT_S) as response:
            status = int(response.status)
    except urllib.error.HTTPError as error:
        status = int(error.code)
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        return CheckResult(UNPROVEN, f"GET {url} failed: {reason}")
    proof = Evidence("url", url, f"GET answered {status} (expected {expect})", {"status": status})
    result = PASSED if status == expect else FAILED
    return CheckResult(result, f"GET {url}: {status}, expected {expect}", (proof,))


def sql(params: Mapping[str, Any], ctx: CheckContext) -> CheckResult:
    database = Path(_string(params, "database"))
    database = database if database.is_absolute() else ctx.cwd / database
    query = _string(params, "query")
    expect = params.get("expect")
    if not database.is_file():
        return CheckResult(UNPROVEN, f"no database {database}")
    try:
        connection = sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro", uri=True)
        try:
            connection.execute("PRAGMA query_only = ON")
            row = connection.execute(query).fetchone()
        finally:
            connection.close()
    except sqlite3.Error as error:
        return CheckResult(UNPROVEN, f"the query failed: {error}")
    found = row[0] if row else None
    if isinstance(found, float) and isinstance(expect, int) and found.is_integer():
        found = int(found)
    if isinstance(expect, float) and expect.is_integer() and isinstance(found, int):
        expect = int(expect)  # JSON numbers arrive as floats from a Struct
    proof = Evidence(
        "query",
        f"{database}: {query}",
        f"answered {found!r} (expected {expect!r})",
        {"value": found},
    )
    result = PASSED if found == expect else FAILED
    return CheckResult(result, f"the query answered {found!r}, expected {expect!r}", (proof,))


CHECKERS: dict[str, Checker] = {
    "file_exists": file_exists,
    "file_sha256": file_sha256,
    "command": command,
    "http_status": http_status,
    "sql": sql,
}


def source_of(kind: str) -> str:
    """The verdict's source string."""
    return f"checker:{kind}"


def run_checker(
    kind: str,
    params: Mapping[str, Any],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> CheckResult | None:
    """The checker's answer; None for a kind the runtime does not check (the server's, or a
    subjective criterion): no verdict is sent for it. Bad parameters are unproven, never
    failed: the criterion was not checked."""
    checker = CHECKERS.get(kind)
    if checker is None:
        return None
    ctx = CheckContext(cwd or Path.cwd(), os.environ if env is None else env)
    try:
        return checker(params, ctx)
    except ValueError as error:
        return CheckResult(UNPROVEN, f"{kind}: {error}")
    except OSError as error:
        return CheckResult(UNPROVEN, f"{kind}: {error.strerror or error}")
