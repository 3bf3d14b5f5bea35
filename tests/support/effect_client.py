"""Callers of the effect fixture (tests/support/effect_fixture.py), as functions and as the
shell commands a declared long-task step runs:

    python -m tests.support.effect_client post --url URL [--key KEY] --target T [--summary S]
        --key defaults to $TRUERUN_IDEMPOTENCY_KEY, which the step driver sets for a
        step's command (the step's idempotency key);
        prints the receipt, one JSON line: {"external_id", "target", "summary", "at_ms"}
        (what the step driver's receipt parser reads); exit 0. Exit 1 when the fixture
        refused the request, 3 when no answer came (timeout, connection lost): the effect
        may or may not have happened.
    python -m tests.support.effect_client probe --url URL --key KEY
        exit 0 when the effect exists (its JSON on stdout), 1 when it does not, 2 when the
        fixture could not tell (unreachable, an unexpected answer): a queryable step's probe.

Only the standard library, so a step's command needs nothing installed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote

from tests.support.effect_fixture import MODE_HEADER, WITHHOLD_HEADER

KEY_ENV = "TRUERUN_IDEMPOTENCY_KEY"  # set by the step driver for a step's command
PROBE_DONE, PROBE_NOT_DONE, PROBE_UNKNOWN = 0, 1, 2
POST_REFUSED, POST_NO_ANSWER = 1, 3


class Refused(Exception):
    """The fixture answered with an error status."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body}")
        self.status = status


def request(
    url: str,
    path: str,
    body: dict[str, Any] | None = None,
    *,
    headers: dict[str, str] | None = None,
    timeout_s: float = 10.0,
) -> tuple[int, dict[str, Any]]:
    """(status, JSON body) of one call; error statuses are answers too. Network failures
    (refused connection, timeout) raise OSError."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        url.rstrip("/") + path,
        data=data,
        method="GET" if body is None else "POST",
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as err:
        raw = err.read()
        try:
            return err.code, json.loads(raw or b"{}")
        except ValueError:
            return err.code, {"error": raw.decode(errors="replace")}


def post_effect(
    url: str,
    key: str,
    target: str,
    summary: str = "",
    *,
    idempotent: bool = False,
    withhold: bool = False,
    timeout_s: float = 30.0,
) -> dict[str, Any]:
    """Make one effect; the fixture's answer (the effect, ``duplicate``). Raises Refused on
    an error status, OSError when no answer came."""
    headers = {}
    if idempotent:
        headers[MODE_HEADER] = "idempotent"
    if withhold:
        headers[WITHHOLD_HEADER] = "1"
    body = {"key": key, "target": target, "summary": summary}
    status, answer = request(url, "/effects", body, headers=headers, timeout_s=timeout_s)
    if status not in (200, 201):
        raise Refused(status, json.dumps(answer))
    return answer


def receipt(effect: dict[str, Any]) -> dict[str, Any]:
    """The human-checkable reference of an effect, as a step's receipt carries it."""
    return {
        "external_id": effect["id"],
        "target": effect["target"],
        "summary": effect["summary"],
        "at_ms": effect["at_ms"],
    }


def probe(url: str, key: str, *, timeout_s: float = 10.0) -> tuple[int, dict[str, Any] | None]:
    """(PROBE_DONE | PROBE_NOT_DONE | PROBE_UNKNOWN, the effect when done)."""
    try:
        status, answer = request(url, "/effects?key=" + quote(key, safe=""), timeout_s=timeout_s)
    except (OSError, ValueError):
        return PROBE_UNKNOWN, None
    if status == 200:
        return PROBE_DONE, answer
    if status == 404:
        return PROBE_NOT_DONE, None
    return PROBE_UNKNOWN, None


def stats(url: str, *, timeout_s: float = 10.0) -> dict[str, Any]:
    status, answer = request(url, "/stats", timeout_s=timeout_s)
    if status != 200:
        raise Refused(status, json.dumps(answer))
    return answer


def effects_of(url: str, key: str) -> int:
    """How many effects the fixture recorded under ``key`` (0 when none)."""
    counts: dict[str, int] = stats(url)["keys"].get(key, {})
    return int(counts.get("effects", 0))


def control(url: str, **switches: bool | list[str]) -> dict[str, Any]:
    """Flip the fixture's switches (``idempotent``, ``withhold``, ``release``: booleans;
    ``withhold_keys``: the keys held back whatever ``withhold`` says); the switches now."""
    status, answer = request(url, "/control", dict(switches))
    if status != 200:
        raise Refused(status, json.dumps(answer))
    return answer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.effect_client")
    sub = parser.add_subparsers(dest="command", required=True)
    post = sub.add_parser("post", help="make one effect, print its receipt")
    post.add_argument("--url", required=True)
    post.add_argument("--key", default=os.environ.get(KEY_ENV, ""), help=f"default: ${KEY_ENV}")
    post.add_argument("--target", required=True)
    post.add_argument("--summary", default="")
    post.add_argument("--idempotent", action="store_true", help="ask for idempotent handling")
    post.add_argument("--withhold", action="store_true", help="ask the fixture to hold back")
    post.add_argument("--timeout-s", type=float, default=30.0)
    check = sub.add_parser("probe", help="exit 0 done, 1 not done, 2 unknown")
    check.add_argument("--url", required=True)
    check.add_argument("--key", default=os.environ.get(KEY_ENV, ""), help=f"default: ${KEY_ENV}")
    check.add_argument("--timeout-s", type=float, default=10.0)
    args = parser.parse_args(argv)
    if not args.key:
        parser.error(f"--key is required (or ${KEY_ENV})")
    if args.command == "probe":
        result, effect = probe(args.url, args.key, timeout_s=args.timeout_s)
        if effect is not None:
            print(json.dumps(effect, sort_keys=True))
        return result
    try:
        effect = post_effect(
            args.url,
            args.key,
            args.target,
            args.summary,
            idempotent=args.idempotent,
            withhold=args.withhold,
            timeout_s=args.timeout_s,
        )
    except Refused as err:
        print(f"effect refused: {err}", file=sys.stderr)
        return POST_REFUSED
    except (OSError, ValueError) as err:
        print(f"no answer from {args.url} (the effect may have happened): {err}", file=sys.stderr)
        return POST_NO_ANSWER
    print(json.dumps(receipt(effect), sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
