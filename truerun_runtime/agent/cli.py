"""``truerun agent`` (``truerun-agent`` from the truerun-runtime distribution): the reference
runtime.

    truerun agent [--server H:P --token T --owner O --limit D ...]   run the agent
    truerun agent run-local [--state-dir S] [--now] [--detach] -- CMD ARGS...
    truerun agent status [--state-dir S]

``main(argv)`` takes the arguments after ``agent``; ``console()`` is the ``truerun-agent``
console script (the same command, under its own name). Every flag has a TRUERUN_* env twin
(the flag wins); prefer TRUERUN_TOKEN to --token, so the secret stays out of ``ps``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from truerun_runtime import TlsFiles, channel_target

from .agent import SOCKET, Agent, AgentBusy, RuntimeRefused
from .config import AgentConfig
from .local import request


def default_state_dir() -> str:
    base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return os.path.join(base, "truerun", "agent")


def _flag(
    parser: argparse.ArgumentParser, flag: str, env: str, help_text: str, default: str = ""
) -> None:
    """A flag with a TRUERUN_* twin; the flag wins, then the env, then ``default``."""
    value = os.environ.get(env, default)
    shown = f" (env: {env}" + (f"; default: {default})" if default else ")")
    parser.add_argument(flag, default=value, help=help_text + shown)


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="the truerun reference runtime")
    _flag(
        parser,
        "--server",
        "TRUERUN_SERVER",
        "truerun's gRPC address host:port (https://host:port: TLS)",
        "127.0.0.1:7233",
    )
    _flag(parser, "--tls-ca-file", "TRUERUN_TLS_CA_FILE", "PEM CA bundle to verify truerun (TLS)")
    _flag(
        parser,
        "--tls-client-cert-file",
        "TRUERUN_TLS_CLIENT_CERT_FILE",
        "PEM client certificate for a truerun that requires mTLS",
    )
    _flag(
        parser,
        "--tls-client-key-file",
        "TRUERUN_TLS_CLIENT_KEY_FILE",
        "PEM private key of the client certificate",
    )
    _flag(parser, "--token", "TRUERUN_TOKEN", "the runtime token (a secret)")
    _flag(parser, "--owner", "TRUERUN_OWNER", "the owner whose runs this runtime executes")
    _flag(
        parser,
        "--instance-id",
        "TRUERUN_INSTANCE_ID",
        "runtime instance id; default: generated once and stored in the state dir "
        "(only such an id lets Inspect answer NEVER_RECEIVED)",
    )
    _flag(
        parser,
        "--lineage",
        "TRUERUN_LINEAGE",
        "replace earlier instances of this lineage (only where one instance runs at a time "
        "and its commands die with it, e.g. a StatefulSet pod)",
    )
    _flag(parser, "--state-dir", "TRUERUN_STATE_DIR", "state directory", default_state_dir())
    _flag(parser, "--limit", "TRUERUN_LIMIT", "D: max concurrently running commands", "1")
    _flag(parser, "--labels", "TRUERUN_LABELS", "comma-separated labels")
    _flag(parser, "--routes", "TRUERUN_ROUTES", "comma-separated device_id[:kind] routes")
    _flag(parser, "--grace-ms", "TRUERUN_GRACE_MS", "default SIGTERM->SIGKILL grace", "5000")
    _flag(parser, "--keepalive-ms", "TRUERUN_KEEPALIVE_MS", "gRPC keepalive; 0: off", "30000")
    _flag(
        parser,
        "--self-fence-after-ms",
        "TRUERUN_SELF_FENCE_AFTER_MS",
        "stop a task's command after truerun was unreachable this long, for Starts that "
        "name no self_fence_after_ms; 0: never",
        "0",
    )
    _flag(
        parser,
        "--secrets-dir",
        "TRUERUN_SECRETS_DIR",
        'files of the secrets runs name with {"secret_ref": NAME}; default: STATE_DIR/secrets',
    )
    _flag(parser, "--log-level", "TRUERUN_LOG_LEVEL", "logging level", "INFO")
    sub = parser.add_subparsers(dest="cmd")
    local = sub.add_parser("run-local", help="run a manual local task through the running agent")
    _flag(
        local,
        "--state-dir",
        "TRUERUN_STATE_DIR",
        "the agent's state directory",
        default_state_dir(),
    )
    local.add_argument("--cwd", default=os.getcwd(), help="working directory (default: here)")
    local.add_argument("--now", action="store_true", help="head of the local queue (still in D)")
    local.add_argument("--detach", action="store_true", help="print the task id and return")
    local.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    status = sub.add_parser("status", help="print the running agent's capacity as JSON")
    _flag(
        status,
        "--state-dir",
        "TRUERUN_STATE_DIR",
        "the agent's state directory",
        default_state_dir(),
    )
    return parser


def console() -> int:
    """The ``truerun-agent`` console script of the truerun-runtime distribution."""
    return main(prog="truerun-agent")


def device() -> int:
    """The ``truerun`` console script of the truerun-runtime distribution: on a device the
    one command is ``truerun agent`` (the server's commands come with the truerun
    distribution, which also provides ``truerun agent``; install one of the two)."""
    argv = sys.argv[1:]
    if argv[:1] == ["agent"]:
        return main(argv[1:])
    print(
        "truerun: this is the truerun-runtime distribution: its one command is "
        "`truerun agent` (the server's commands come with the truerun distribution)",
        file=sys.stderr,
    )
    return 2


def main(argv: Sequence[str] | None = None, prog: str = "truerun agent") -> int:
    parser = _parser(prog)
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.cmd == "run-local":
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        if not command:
            parser.error("run-local needs a command after --")
        return asyncio.run(_run_local(args, command))
    if args.cmd == "status":
        return asyncio.run(_status(Path(args.state_dir)))
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        config = _config(args)
    except ValueError as error:
        parser.error(str(error))
    try:
        asyncio.run(_serve(config))
    except AgentBusy as error:
        print(f"truerun agent: {error}", file=sys.stderr)
        return 1
    except RuntimeRefused as error:
        print(f"truerun agent: truerun refused this runtime: {error}", file=sys.stderr)
        return 2
    return 0


def _config(args: argparse.Namespace) -> AgentConfig:
    for name in ("server", "token", "owner"):
        if not getattr(args, name):
            raise ValueError(f"--{name} (or TRUERUN_{name.upper()}) is required")
    limit = int(args.limit)
    if limit < 0:
        raise ValueError("--limit must be >= 0")
    # a bad TLS file is a ValueError too: one line (parser.error), exit status 2
    tls_files = TlsFiles(args.tls_ca_file, args.tls_client_cert_file, args.tls_client_key_file)
    server, credentials = channel_target(args.server, tls_files)
    return AgentConfig(
        server=server,
        credentials=credentials,
        tls_files=tls_files,
        token=args.token,
        owner_id=args.owner,
        state_dir=Path(args.state_dir).expanduser(),
        limit=limit,
        instance_id=args.instance_id,
        lineage=args.lineage or "",
        labels=_split(args.labels),
        routes=_split(args.routes),
        default_grace_ms=int(args.grace_ms),
        keepalive_ms=int(args.keepalive_ms),
        self_fence_after_ms=max(0, int(args.self_fence_after_ms)),
        secrets_dir=Path(args.secrets_dir).expanduser() if args.secrets_dir else None,
    )


def _split(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(",") if part.strip())


async def _serve(config: AgentConfig) -> None:
    agent = Agent(config)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, agent.stop)
    await agent.run()


async def _run_local(args: argparse.Namespace, command: list[str]) -> int:
    message = {"op": "run", "argv": command, "cwd": args.cwd, "front": args.now}
    message["wait"] = not args.detach
    log_path = ""
    final: dict[str, Any] = {}
    try:
        async for answer in request(Path(args.state_dir) / SOCKET, message):
            if not answer.get("ok"):
                print(f"truerun agent: {answer.get('error')}", file=sys.stderr)
                return 2
            if "task_id" in answer:
                log_path = answer["log_path"]
                print(f"{answer['task_id']} log={log_path}", file=sys.stderr)
            final = answer
    except OSError as error:
        print(f"truerun agent: no agent at {args.state_dir}: {error}", file=sys.stderr)
        return 2
    if args.detach:
        return 0
    if not final.get("done"):
        print("truerun agent: the agent went away; the task goes on", file=sys.stderr)
        return 2
    with open(log_path, "rb") as log:
        shutil.copyfileobj(log, sys.stdout.buffer)
    sys.stdout.flush()
    code = final.get("exit_code")
    return int(code) if code is not None else 1


async def _status(state_dir: Path) -> int:
    try:
        async for answer in request(state_dir / SOCKET, {"op": "status"}):
            print(json.dumps(answer, indent=2))
    except OSError as error:
        print(f"truerun agent: no agent at {state_dir}: {error}", file=sys.stderr)
        return 2
    return 0
