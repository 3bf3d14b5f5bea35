"""Every client command's user mistakes and a dead server end in one line on stderr and exit
2, never a traceback: run in process (``main(argv)``) against a port nothing listens on."""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys

import pytest

from services.cli.errors import at_least, server_problem
from services.cli.main import main

RUN = "00000000-0000-0000-0000-000000000001"
COMMANDS = [
    ("submit", "job"),
    ("ls",),
    ("show", RUN),
    ("cancel", RUN),
    ("retry", RUN),
    ("approve", RUN),
    ("watch", RUN),
    ("logs", RUN),
    ("logs", "-f", "--attempt", "2", RUN),
    ("resolve", RUN, "--reason", "r", "--as", "failed"),
    ("fail", RUN, "--reason", "r"),
    ("schedule", "ls"),
    ("schedule", "show", "s1"),
    ("task", "ls"),
    ("task", "show", "t1"),
    ("task", "act", "#3", "pause"),
    ("task", "events", "#3"),  # the handle is resolved first: that call fails
    ("submit", "job", "-o", "json"),
    ("watch", "-o", "json", RUN),
    ("schedule", "fire", "s1", "-o", "yaml"),
]


@pytest.fixture(scope="module")
def dead_server() -> str:
    with socket.socket() as sock:  # a port nothing listens on once the socket is closed
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def _one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2, argv
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("error: "), (argv, err)
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_dead_server_is_one_line_and_exit_2(
    command: tuple[str, ...], dead_server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [*command, "--server", dead_server, "--token", "api-x"]
    assert "[UNAVAILABLE]" in _one_line_error(capsys, argv)


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_bad_server_address_is_one_line_and_exit_2(
    command: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    for server in ("http://[bad", "127.0.0.1:99999", "https://", "host"):
        err = _one_line_error(capsys, [*command, "--server", server, "--token", "x"])
        assert f"--server {server!r}" in err and "[INVALID_ARGUMENT]" in err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["ls", "--limit", "-1"], "-1 is out of range (at least 1)"),
        (["ls", "--limit", "ten"], "'ten' is not a whole number"),
        (["submit", "job", "--max-attempts", "0"], "0 is out of range (at least 1)"),
        (["show"], "required: run_id"),
        (["no-such-command"], "invalid choice"),
    ],
)
def test_usage_mistakes_are_one_line_and_exit_2(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and says in err, err


def test_an_unreadable_tls_file_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TRUERUN_TLS_CA_FILE", "/nonexistent/ca.pem")
    err = _one_line_error(capsys, ["ls", "--server", "127.0.0.1:7233", "--token", "x"])
    assert "TRUERUN_TLS_CA_FILE=/nonexistent/ca.pem: cannot read it" in err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("truerun ")


@pytest.mark.parametrize(
    ("server", "problem"),
    [
        ("127.0.0.1:7233", None),
        ("localhost:7233", None),
        ("https://truerun.example:443", None),
        ("[::1]:7233", None),
        ("unix:/tmp/truerun.sock", None),
        ("dns:///truerun:7233", None),
        ("127.0.0.1", "expected HOST:PORT"),
        ("http://host:1", "expected HOST:PORT"),
        (":7233", "expected HOST:PORT"),
        ("host:0", "from 1 to 65535"),
        ("host:65536", "from 1 to 65535"),
        ("host:port", "from 1 to 65535"),
        ("::1:7233", "in brackets"),
        ("[nope]:7233", "not an IPv6 address"),
    ],
)
def test_server_problem(server: str, problem: str | None) -> None:
    found = server_problem(server)
    assert found == problem if problem is None else problem in (found or ""), found


def test_at_least() -> None:
    parse = at_least(1)
    assert parse("3") == 3
    for bad in ("0", "-2", "1.5", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(bad)


def test_since_is_an_age_or_a_time() -> None:
    from services.cli.runs_ls import since_type

    parse = since_type(now=lambda: 100_000.0)
    assert parse("90s") == 100_000 - 90
    assert parse("10m") == parse("10min") == 100_000 - 600
    assert parse("2h") == 100_000 - 7200 and parse("1d") == 100_000 - 86400
    assert parse("1970-01-02T00:00:00+00:00") == 86400
    for bad in ("yesterday", "-5m", "5 weeks", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(bad)


def test_a_reader_that_stops_reading_is_not_an_error() -> None:
    """`truerun ... | head -1`: the rest is dropped quietly (exit 0, nothing on stderr)."""
    script = (
        "import sys\n"
        "from services.cli import main as m\n"
        "def many(client, args):\n"
        "    for i in range(100000):\n"
        "        print('line', i)\n"
        "    return 0\n"
        "m._CLIENT_COMMANDS['ls'] = many\n"
        "sys.exit(m.main(['ls', '--server', '127.0.0.1:1', '--token', 'x']))\n"
    )
    shell = f'{sys.executable} -c "$SCRIPT" | head -1; echo "${{PIPESTATUS[0]}}" >&2'
    done = subprocess.run(
        ["bash", "-c", shell],
        env={**os.environ, "SCRIPT": script},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.stdout, done.stderr) == ("line 0\n", "0\n")
