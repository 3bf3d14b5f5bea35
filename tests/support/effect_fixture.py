"""An external service of the tests' own whose every mutation is a side effect to count.

The long-task suites need something outside truerun that a step changes, that remembers
every change across kills of every truerun process, and that can be asked afterwards what
happened. This is it: a tiny HTTP server on loopback, run as a process of its own
(``python -m tests.support.effect_fixture --port 0 --state FILE``, or ``FixtureProcess``).

- ``POST /effects`` with ``{"key", "target", "summary"?}`` records one effect: a JSON line
  appended to the state file and fsynced *before* anything is answered or shown, so an
  effect that any reader saw survives a kill of the fixture itself. Answer 201 with the
  effect (``id``, ``key``, ``target``, ``summary``, ``at_ms``, ``duplicate``).
- **Idempotent mode** (header ``X-Effect-Mode: idempotent``, or ``--idempotent`` /
  ``POST /control {"idempotent": true}`` for every request): a key seen before creates no
  second effect; the duplicate is recorded (counted) and answered 200 with the first effect.
  Otherwise every POST is a new effect, whatever its key: a non-idempotent service.
- **Withhold** (header ``X-Effect-Withhold: 1``, or ``POST /control {"withhold": true}``, or
  ``{"withhold_keys": [...]}`` for those keys only, so other steps running meanwhile go on):
  the effect is recorded and visible, then the answer is held back until ``--hold-s`` passes,
  ``POST /control {"release": true}``, or the caller hangs up (its process was killed). So a
  harness can kill the caller after the effect and before it could have heard of it.
- ``GET /effects?key=K``: 200 with the first effect of that key, or 404 (the queryable
  step's probe). ``GET /effects``: every effect. ``GET /stats``: per key, ``effects`` and
  ``duplicates``, the totals, and the holds (open now, and how each one ended).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.support.effect_holds import Holds

LISTENING = "effect fixture listening on "
MODE_HEADER = "X-Effect-Mode"
WITHHOLD_HEADER = "X-Effect-Withhold"
DEFAULT_HOLD_S = 600.0  # longer than any caller's timeout in the suites
_MAX_BODY = 64 * 1024


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class Effect:
    id: str
    key: str
    target: str
    summary: str
    at_ms: int


@dataclass
class KeyCount:
    effects: int = 0
    duplicates: int = 0


class Ledger:
    """The effects, durable in one append-only file of JSON lines.

    Lines are ``{"type": "effect", ...Effect}`` and ``{"type": "duplicate", "key", "id",
    "at_ms"}``. A torn last line (the fixture killed mid-write) was never fsynced, so never
    answered nor shown: it is cut off on load."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._effects: list[Effect] = []
        self._first: dict[str, Effect] = {}
        self._counts: dict[str, KeyCount] = {}
        self._load()
        self._file = open(path, "ab")  # held for the server's lifetime

    def _load(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        good = 0
        for line in data.splitlines(keepends=True):
            if not line.endswith(b"\n"):
                break
            try:
                self._apply(json.loads(line))
            except (ValueError, KeyError, TypeError):
                break
            good += len(line)
        if good < len(data):
            with open(self.path, "r+b") as f:
                f.truncate(good)

    def _apply(self, record: dict[str, Any]) -> None:
        count = self._counts.setdefault(str(record["key"]), KeyCount())
        if record["type"] == "effect":
            effect = Effect(
                id=str(record["id"]),
                key=str(record["key"]),
                target=str(record["target"]),
                summary=str(record["summary"]),
                at_ms=int(record["at_ms"]),
            )
            self._effects.append(effect)
            self._first.setdefault(effect.key, effect)
            count.effects += 1
        elif record["type"] == "duplicate":
            count.duplicates += 1
        else:
            raise ValueError(f"unknown record type {record['type']!r}")

    def _append(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record, sort_keys=True).encode() + b"\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        self._apply(record)  # shown only once durable

    def post(self, key: str, target: str, summary: str, *, idempotent: bool) -> tuple[Effect, bool]:
        """Record one mutation; (the effect answered, whether it was a duplicate)."""
        with self._lock:
            first = self._first.get(key)
            if idempotent and first is not None:
                self._append({"type": "duplicate", "key": key, "id": first.id, "at_ms": now_ms()})
                return first, True
            effect = Effect(
                id=f"eff-{len(self._effects) + 1:06d}",
                key=key,
                target=target,
                summary=summary,
                at_ms=now_ms(),
            )
            self._append({"type": "effect", **asdict(effect)})
            return effect, False

    def first(self, key: str) -> Effect | None:
        with self._lock:
            return self._first.get(key)

    def effects(self) -> list[Effect]:
        with self._lock:
            return list(self._effects)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            keys = {k: asdict(c) for k, c in sorted(self._counts.items())}
            return {
                "effects": sum(c.effects for c in self._counts.values()),
                "duplicates": sum(c.duplicates for c in self._counts.values()),
                "keys": keys,
            }

    def close(self) -> None:
        self._file.close()


class EffectServer(ThreadingHTTPServer):
    daemon_threads = True  # a held answer never keeps the process from exiting

    def __init__(
        self, port: int, ledger: Ledger, *, idempotent: bool, withhold: bool, hold_s: float
    ) -> None:
        self.ledger = ledger
        self.idempotent = idempotent
        self.holds = Holds(hold_s, withhold)
        super().__init__(("127.0.0.1", port), _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def control(self) -> dict[str, Any]:
        holds = self.holds
        return {
            "idempotent": self.idempotent,
            "withhold": holds.withhold,
            "withhold_keys": sorted(holds.keys),
        }


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _Handler(BaseHTTPRequestHandler):
    server: EffectServer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the suites read the state file and /stats, not an access log

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        if url.path == "/effects" and "key" in query:
            effect = self.server.ledger.first(query["key"][0])
            if effect is None:
                self._answer(404, {"error": "no effect with that key"})
            else:
                self._answer(200, asdict(effect))
        elif url.path == "/effects":
            self._answer(200, {"effects": [asdict(e) for e in self.server.ledger.effects()]})
        elif url.path == "/stats":
            self._answer(200, {**self.server.ledger.stats(), "holds": self.server.holds.stats()})
        elif url.path == "/health":
            self._answer(200, {"ok": True})
        else:
            self._answer(404, {"error": f"no resource {url.path}"})

    def do_POST(self) -> None:
        try:
            body = self._body()
            if self.path == "/effects":
                self._post_effect(body)
            elif self.path == "/control":
                self._control(body)
            else:
                self._answer(404, {"error": f"no resource {self.path}"})
        except _Refused as refused:
            self._answer(refused.status, {"error": str(refused)})

    def _body(self) -> dict[str, Any]:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise _Refused(400, "Content-Length is not a number") from None
        if length < 0:
            raise _Refused(400, "Content-Length is negative")
        if length > _MAX_BODY:
            self.rfile.read(min(length, 64 * _MAX_BODY))  # read, so the answer is not lost
            self.close_connection = True  # to a reset of a closed socket with unread input
            raise _Refused(413, "body too large")
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError as err:
            raise _Refused(400, f"body is not JSON: {err}") from err
        if not isinstance(body, dict):
            raise _Refused(400, "body must be a JSON object")
        return body

    def _post_effect(self, body: dict[str, Any]) -> None:
        key, target = body.get("key"), body.get("target")
        summary = body.get("summary", "")
        for name, value in (("key", key), ("target", target)):
            if not isinstance(value, str) or not value:
                raise _Refused(400, f"{name} must be a non-empty string")
        if not isinstance(summary, str):
            raise _Refused(400, "summary must be a string")
        assert isinstance(key, str) and isinstance(target, str)
        mode = self.headers.get(MODE_HEADER, "").lower()
        idempotent = mode == "idempotent" or (mode == "" and self.server.idempotent)
        effect, duplicate = self.server.ledger.post(
            key, target, summary or f"effect on {target}", idempotent=idempotent
        )
        holds = self.server.holds
        withhold = self.headers.get(WITHHOLD_HEADER, "") == "1" or holds.withhold
        withhold = withhold or key in holds.keys
        if withhold and holds.hold(key, self.connection) == "hung_up":
            self.close_connection = True
            return  # nobody is left to answer
        self._answer(200 if duplicate else 201, {**asdict(effect), "duplicate": duplicate})

    def _control(self, body: dict[str, Any]) -> None:
        for name in ("idempotent", "withhold", "release"):
            if name in body and not isinstance(body[name], bool):
                raise _Refused(400, f"{name} must be true or false")
        keys = body.get("withhold_keys", [])
        if not isinstance(keys, list) or not all(isinstance(k, str) and k for k in keys):
            raise _Refused(400, "withhold_keys must be a list of non-empty strings")
        if "withhold_keys" in body:
            self.server.holds.keys = frozenset(keys)
        if "idempotent" in body:
            self.server.idempotent = body["idempotent"]
        if "withhold" in body:
            self.server.holds.withhold = body["withhold"]
        if body.get("release"):
            self.server.holds.release()
        self._answer(200, self.server.control())

    def _answer(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload, sort_keys=True).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            self.close_connection = True  # the caller went away meanwhile


def serve(
    state: Path,
    port: int = 0,
    *,
    idempotent: bool = False,
    withhold: bool = False,
    hold_s: float = DEFAULT_HOLD_S,
) -> EffectServer:
    """A bound server (call ``serve_forever``); its ledger read back from ``state``."""
    return EffectServer(
        port, Ledger(state), idempotent=idempotent, withhold=withhold, hold_s=hold_s
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.effect_fixture")
    parser.add_argument("--port", type=int, default=0, help="0: any free port (printed)")
    parser.add_argument("--state", type=Path, required=True, help="the effects file")
    parser.add_argument("--idempotent", action="store_true", help="every request idempotent")
    parser.add_argument("--withhold", action="store_true", help="hold back every answer")
    parser.add_argument("--hold-s", type=float, default=DEFAULT_HOLD_S)
    args = parser.parse_args(argv)
    server = serve(
        args.state,
        args.port,
        idempotent=args.idempotent,
        withhold=args.withhold,
        hold_s=args.hold_s,
    )
    print(f"{LISTENING}{server.url}", flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        server.ledger.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
