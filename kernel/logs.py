"""Structured logs: the ids a record is about, carried in context variables, and a formatter
that writes each record as one JSON object on one line (``TRUERUN_LOG_FORMAT=json``).

The RPC layer binds ``request_id`` for a call (services/rpc_metrics.py), the gateway for a
request (gateway/access_log.py), the door ``run_id``, ``attempt_id`` and ``project`` for a
transition (coordinator/service/transitions.py): any record logged meanwhile, from any module,
carries them without naming them. Only ids and names go here, never a token or a payload.

A JSON record never holds a raw newline: ``json.dumps`` escapes them, so an exception's
traceback is one escaped ``exc`` field and a log shipper never splits a record in two.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar, Token
from datetime import UTC, datetime

#: The context fields, in the order a JSON line writes them.
CONTEXT_FIELDS = ("request_id", "run_id", "attempt_id", "project")
_VARS: dict[str, ContextVar[str]] = {
    name: ContextVar(f"truerun_log_{name}", default="") for name in CONTEXT_FIELDS
}
FORMATS = ("json", "text")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


@contextmanager
def bound(**fields: str | None) -> Iterator[None]:
    """Within the block, records carry ``fields`` (None leaves a field as it was, "" clears
    it); on leaving, every field it names is as it was before, whatever ``bind`` did inside."""
    tokens: list[tuple[ContextVar[str], Token[str]]] = []
    for name, value in fields.items():
        if value is not None:
            var = _VARS[name]  # a KeyError names a field that is not a context field
            tokens.append((var, var.set(value)))
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


def bind(**fields: str | None) -> None:
    """Set context fields for the rest of the current task (an interceptor's call, whose
    context is the call's own: nothing leaks into other calls)."""
    for name, value in fields.items():
        if value:
            _VARS[name].set(value)


def current() -> dict[str, str]:
    """The context fields set now (only the non-empty ones)."""
    return {name: value for name, var in _VARS.items() if (value := var.get())}


class JsonFormatter(logging.Formatter):
    """One line per record: ``ts`` (UTC, ms), ``level``, ``logger``, ``msg``, the context
    fields that are set, a record's ``fields`` (``extra={"fields": {...}}``: an access
    line's method, route, status, ...) and ``exc`` (the traceback, one escaped string)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        line.update(current())
        extra = getattr(record, "fields", None)
        if isinstance(extra, Mapping):
            line.update({str(k): v for k, v in extra.items() if k not in line})
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exc"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """The terminal's format as it always was (tests and people read it), with a record's
    ``fields`` appended as ``key=value`` (so an access line says what it is about in text
    too). The context fields are left out: a terminal line stays the line it was."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        extra = getattr(record, "fields", None)
        if not isinstance(extra, Mapping) or not extra:
            return text
        head, newline, tail = text.partition("\n")  # after the message, before a traceback
        suffix = " ".join(f"{k}={v}" for k, v in extra.items())
        return f"{head} {suffix}{newline}{tail}"


def formatter(kind: str) -> logging.Formatter:
    if kind not in FORMATS:
        raise ValueError(f"log format {kind!r} is not one of {', '.join(FORMATS)}")
    return JsonFormatter() if kind == "json" else TextFormatter()
