"""The gateway's access log: one structured record per request (logger ``truerun.access``),
written when the response ends (an SSE stream: when it closes).

A line names the method, the route template (``/v1/projects/{project}/runs/{run}``, never the
concrete path), the status, the duration in ms, the bytes sent and the request id. Never the
Authorization header, never a query string (``?token=`` would be a credential) and never the
raw path: ids and tokens stay out of the logs as they stay out of the metrics' labels.

The request id is the caller's ``X-Request-Id`` when it is a plain short token, else a new
one; it is bound to the request's log context (kernel/logs.py), sent upstream as gRPC
metadata (kernel/telemetry.py) and echoed in the response's ``X-Request-Id`` header.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Mapping

log = logging.getLogger("truerun.access")

REQUEST_ID_HEADER = b"x-request-id"
_PLAIN_ID = re.compile(rb"[A-Za-z0-9._:-]{1,64}")


def request_id(headers: list[tuple[bytes, bytes]]) -> str:
    for key, value in headers:
        if key.lower() == REQUEST_ID_HEADER and _PLAIN_ID.fullmatch(value):
            return value.decode("ascii")
    return uuid.uuid4().hex[:16]


def status_class(status: int) -> str:
    """``2xx``, ``4xx``, ...: the metrics' label (a bounded set of five)."""
    return f"{status // 100}xx" if 100 <= status <= 599 else "other"


def access_fields(
    method: str, route: str, status: int, seconds: float, sent_bytes: int, rid: str
) -> Mapping[str, object]:
    return {
        "method": method,
        "route": route,
        "status": status,
        "duration_ms": round(seconds * 1000, 3),
        "bytes": sent_bytes,
        "request_id": rid,
    }


def write(fields: Mapping[str, object]) -> None:
    """One record; a 5xx is a warning (on a terminal only those show: services/log_setup.py)."""
    status = fields.get("status", 0)
    level = logging.WARNING if isinstance(status, int) and status >= 500 else logging.INFO
    log.log(level, "%s %s %s", fields["method"], fields["route"], status, extra={"fields": fields})
