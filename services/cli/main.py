"""`truerun`: dev (embedded all-in-one), migrate, and the client commands."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import cast

import grpc

from kernel import json_bounds
from kernel.config import ConfigError, Settings
from services.cli import operator, run_commands, runs_ls, schedule, task
from services.cli.client import Client, fail, tls_from_env
from services.cli.errors import EXIT_INTERRUPTED, at_least, int32, say, server_problem
from services.cli.logs import logs as follow_logs
from services.cli.output import add_output_flag
from services.cli.schedule import _OneLineParser
from services.cli.watch import watch
from services.listen import ListenError
from services.log_setup import SERVICE_DEFAULT, TERMINAL_DEFAULT, configure_for, configure_logging


def _env_flag(parser: argparse.ArgumentParser, flag: str, env: str, help_text: str) -> None:
    """Every flag has a TRUERUN_* twin; the flag wins."""
    parser.add_argument(flag, default=None, help=f"{help_text} (env: {env})")


def _client_flags(p: argparse.ArgumentParser) -> None:
    """--server and --token, which every client command takes."""
    p.add_argument(
        "--server",
        default=os.environ.get("TRUERUN_SERVER", "127.0.0.1:7233"),
        help="the truerun gRPC address; https://host:port or TRUERUN_TLS_CA_FILE: TLS "
        "(env: TRUERUN_SERVER)",
    )
    p.add_argument(
        "--token",
        default=os.environ.get("TRUERUN_API_TOKEN") or os.environ.get("TRUERUN_TOKEN", ""),
        help="an API token (env: TRUERUN_API_TOKEN, then TRUERUN_TOKEN; default: the "
        "embedded server's DATA_DIR/api.token, DATA_DIR from TRUERUN_DATA_DIR or .truerun)",
    )


def _parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(prog="truerun", description=__doc__)
    parser.add_argument(
        "--version", action="version", version=f"truerun {_version()}", help="print the version"
    )
    # every subcommand's usage mistakes in one line too (the parser class is a subclass)
    sub = cast(
        "argparse._SubParsersAction[argparse.ArgumentParser]",
        parser.add_subparsers(dest="cmd", required=True, parser_class=_OneLineParser),
    )
    sub.add_parser("agent", help="the reference runtime agent (see `truerun agent --help`)")

    dev = sub.add_parser("dev", help="run every service in one process on SQLite")
    _env_flag(dev, "--data-dir", "TRUERUN_DATA_DIR", "data directory")
    _env_flag(dev, "--grpc-addr", "TRUERUN_GRPC_ADDR", "host:port, port 0 picks a free one")
    _env_flag(dev, "--database-url", "TRUERUN_DATABASE_URL", "postgresql://... or sqlite:///...")
    _env_flag(
        dev, "--http-addr", "TRUERUN_HTTP_ADDR", "gateway and dashboard host:port, port 0 = any"
    )

    migrate = sub.add_parser("migrate", help="bring the database schema to the newest version")
    _env_flag(migrate, "--database-url", "TRUERUN_DATABASE_URL", "postgresql://... or sqlite:///")
    _env_flag(migrate, "--data-dir", "TRUERUN_DATA_DIR", "data directory (SQLite default)")

    gateway = sub.add_parser("gateway", help="REST, Server-Sent Events and the dashboard")
    _env_flag(gateway, "--http-addr", "TRUERUN_HTTP_ADDR", "host:port, port 0 picks a free one")
    _env_flag(gateway, "--services-addr", "TRUERUN_SERVICES_ADDR", "the services' gRPC address")
    _env_flag(
        gateway,
        "--capacity-addr",
        "TRUERUN_CAPACITY_ADDR",
        "CapacityService's gRPC address (empty = the services' address)",
    )

    reconcile = sub.add_parser(
        "reconciler", help="run the lease and retry scans as their own process"
    )
    _env_flag(reconcile, "--database-url", "TRUERUN_DATABASE_URL", "postgresql://... or sqlite:///")
    _env_flag(reconcile, "--data-dir", "TRUERUN_DATA_DIR", "data directory (SQLite default)")
    _env_flag(reconcile, "--grpc-addr", "TRUERUN_GRPC_ADDR", "gRPC health host:port, port 0 = any")

    for name, help_text in (
        ("coordinator", "serve RunService and RuntimeService (claims via TRUERUN_CAPACITY_ADDR)"),
        ("capacity", "serve CapacityService (observations in TRUERUN_REDIS_URL, claims)"),
    ):
        service = sub.add_parser(name, help=help_text)
        _env_flag(service, "--grpc-addr", "TRUERUN_GRPC_ADDR", "host:port, port 0 picks a free one")
        _env_flag(service, "--database-url", "TRUERUN_DATABASE_URL", "postgresql://...")

    def client(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text)
        _client_flags(p)
        add_output_flag(p)  # every client command: -o text|json|yaml (services/cli/output.py)
        return p

    submit = client("submit", "create a run")
    submit.add_argument("task_id", help="the task the run runs")
    submit.add_argument("--project", default="default", help="(default: default)")
    submit.add_argument(
        "--owner", default=os.environ.get("USER", "me"), help="whose runtimes run it ($USER)"
    )
    submit.add_argument("--agent", default="", help="the agent to run it (default: any)")
    submit.add_argument("--priority", type=int32, default=0, help="higher runs first (default 0)")
    submit.add_argument(
        "--max-attempts", type=at_least(1), default=1, help="attempts before it fails (>= 1)"
    )
    submit.add_argument(
        "--idempotency-key", default="", help="a second submit with it returns the first run"
    )
    submit.add_argument(
        "--requires-approval", action="store_true", help="wait for `truerun approve`"
    )
    # each of these implies --requires-approval (docs/state-model.md "Approvals")
    submit.add_argument(
        "--approvals",
        type=at_least(1),
        default=0,
        help="distinct approvers needed (default 1)",
    )
    submit.add_argument(
        "--approver-group",
        action="append",
        default=[],
        metavar="GROUP",
        help="an approver must be in one of these groups (their token's groups=); repeatable",
    )
    submit.add_argument(
        "--refuse-self-approval", action="store_true", help="its creator may not approve it"
    )
    submit.add_argument(
        "--approval-expires",
        default="",
        metavar="DURATION",
        help="no approval after this long (90s, 15m, 1h30m, 2d)",
    )
    submit.add_argument(
        "--command", dest="run_command", default="", help="the command a runtime should run"
    )

    ls = client("ls", "list runs, newest first")
    runs_ls.add_parser(ls)
    ls.add_argument("--limit", type=at_least(1), default=50, help="at most this many (>= 1)")

    for name, help_text in (
        ("show", "show one run and its events"),
        ("cancel", "cancel a run (at once before start, else a durable request)"),
        ("retry", "retry a finished run as a new run"),
        ("approve", "approve a run that waits for approval"),
        (
            "watch",
            "print a run's events as they are committed, until it ends; exit 0 if it "
            "succeeded, 1 if it ended otherwise, 2 if truerun could not tell, 130 on Ctrl-C",
        ),
    ):
        client(name, help_text).add_argument("run_id", help="the run's id")
    logs = client("logs", "print a run's output (stored apart from its events)")
    logs.add_argument("run_id", help="the run's id")
    logs.add_argument(
        "-f", "--follow", action="store_true", help="keep printing until the run ends"
    )
    logs.add_argument(
        "--attempt", default="", help="an attempt number or id (default: the current attempt)"
    )
    operator.add_parsers(client)
    schedule.add_parsers(sub, _client_flags)
    task.add_parsers(sub, _client_flags)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["agent"]:  # the reference runtime agent has its own flags
        from services.cli.agent import main as agent_main

        return agent_main(argv[1:])
    args = _parser().parse_args(argv)
    configure_logging(TERMINAL_DEFAULT)  # a server command switches once it read its settings
    try:
        return _command(args)
    except ListenError as error:  # a server's port in use: one line, not a traceback
        return say(str(error), "UNAVAILABLE")


def _command(args: argparse.Namespace) -> int:
    if args.cmd == "dev":
        return _dev(args)
    if args.cmd == "migrate":
        return _migrate(args)
    if args.cmd == "gateway":
        from services.cli.gateway import run_gateway

        _start_server_process()
        asyncio.run(run_gateway(_server_settings(args, SERVICE_DEFAULT)))
        return 0
    if args.cmd == "reconciler":
        from services.cli.reconciler import run_reconciler

        _start_server_process()
        asyncio.run(run_reconciler(_server_settings(args, SERVICE_DEFAULT)))
        return 0
    if args.cmd in ("coordinator", "capacity"):
        return _service(args)
    return _client_command(args)


def _client_command(args: argparse.Namespace) -> int:
    """A client command, whose failures are one line on stderr and exit 2, never a traceback
    (services/cli/errors.py has the exit statuses); Ctrl-C is 130, quietly."""
    problem = server_problem(args.server)
    if problem:
        return say(problem, "INVALID_ARGUMENT")
    try:
        client = Client(args.server, token=_token(args.token), tls=tls_from_env(os.environ))
    except ConfigError as error:  # an unreadable or mismatched TLS file
        return say(str(error), "INVALID_ARGUMENT")
    try:
        return int(_CLIENT_COMMANDS[args.cmd](client, args))
    except grpc.RpcError as error:
        return fail(error)
    except BrokenPipeError:  # the reader stopped reading (`| head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no flush error at exit
        return 0
    except (ValueError, OSError) as error:
        return say(str(error) or type(error).__name__, "INVALID_ARGUMENT")
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    finally:
        client.close()


def _version() -> str:
    try:
        return version("truerun")
    except PackageNotFoundError:  # run from a checkout without an install
        return "unknown"


def _token(given: str) -> str:
    """The API token: given, else the one `truerun dev` wrote for its user."""
    if given:
        return given.strip()
    path = Path(os.environ.get("TRUERUN_DATA_DIR", ".truerun")) / "api.token"
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _settings(args: argparse.Namespace) -> Settings:
    return Settings.from_env(
        data_dir=Path(args.data_dir) if getattr(args, "data_dir", None) else None,
        grpc_addr=getattr(args, "grpc_addr", None),
        database_url=getattr(args, "database_url", None),
        http_addr=getattr(args, "http_addr", None),
        services_addr=getattr(args, "services_addr", None),
        capacity_addr=getattr(args, "capacity_addr", None),
    )


def _server_settings(args: argparse.Namespace, default_log_format: str) -> Settings:
    """A server process's settings, its logs switched to TRUERUN_LOG_FORMAT (or
    ``default_log_format``) before it logs anything of its own."""
    settings = _settings(args)
    configure_for(settings, default_log_format)
    json_bounds.configure(json_bounds.from_settings(settings))  # every door's input bounds
    return settings


def _dev(args: argparse.Namespace) -> int:
    from services.cli.dev import run_dev

    _start_server_process()
    asyncio.run(run_dev(_server_settings(args, TERMINAL_DEFAULT)))
    return 0


def _service(args: argparse.Namespace) -> int:
    from services.cli.capacity import run_capacity
    from services.cli.coordinator import run_coordinator

    _start_server_process()
    run = run_coordinator if args.cmd == "coordinator" else run_capacity
    asyncio.run(run(_server_settings(args, SERVICE_DEFAULT)))
    return 0


def _migrate(args: argparse.Namespace) -> int:
    from kernel.db.migrate import upgrade

    settings = _server_settings(args, TERMINAL_DEFAULT)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    asyncio.run(upgrade(settings.resolved_database_url()))
    print("database is at the newest schema")
    return 0


def _start_server_process() -> None:
    """A server process's start: uvloop (when installed) and the collector set for a
    service (services/gc_tuning.py)."""
    from services.gc_tuning import tune_for_service

    tune_for_service()
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is optional off Linux
        return
    uvloop.install()


_CLIENT_COMMANDS = {
    "submit": run_commands.submit,
    "ls": runs_ls.ls,
    "show": run_commands.show,
    "cancel": run_commands.cancel,
    "retry": run_commands.retry,
    "approve": run_commands.approve,
    "watch": lambda client, args: watch(client, args.run_id, args.output),
    "logs": lambda client, args: follow_logs(
        client, args.run_id, args.attempt, args.follow, args.output
    ),
    **operator.COMMANDS,
    "schedule": schedule.run,
    "task": task.run,
}


if __name__ == "__main__":
    sys.exit(main())
