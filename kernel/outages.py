"""Which failures mean a dependency (PostgreSQL, Redis) is out of reach rather than a bug.

A call that fails because a connection was reset, refused or timed out is answered
UNAVAILABLE (``STORE_BUSY``, retryable), not INTERNAL: the client should try again, and an
operator reading INTERNAL would look for a defect that is not there. Anything else
unexpected stays INTERNAL (coordinator/api/errors.py).
"""

from __future__ import annotations

import errno
from collections.abc import Iterator

import asyncpg.exceptions as pg
import redis.exceptions as rd

#: Reset, refused, aborted, a broken pipe (ConnectionError), timed out; PostgreSQL's
#: connection class (08) and operator intervention (57: shutdown, "cannot connect now", a
#: statement cancelled by its timeout); Redis's connection errors and timeouts.
_OUTAGES: tuple[type[BaseException], ...] = (
    ConnectionError,
    TimeoutError,
    pg.PostgresConnectionError,
    pg.OperatorInterventionError,
    rd.ConnectionError,
    rd.TimeoutError,
)

#: Unreachable networks and hosts: other OSErrors (a missing file, say) are no outage.
_UNREACHABLE = {errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ETIMEDOUT, errno.EHOSTDOWN}

#: What asyncpg raises, as an InterfaceError, for a connection that went away under a call.
_CLOSED = ("connection is closed", "connection was closed", "pool is closing")

#: What uvloop raises, as a RuntimeError, when a client (redis-py) writes to a transport the
#: peer already reset: "unable to perform operation on <TCPTransport closed=True ...>; the
#: handler is closed".
_TRANSPORT_CLOSED = "the handler is closed"


def _causes(error: BaseException) -> Iterator[BaseException]:
    """``error`` and what it was raised from, explicitly (``__cause__``), at most 8 deep: a
    cause chain is short; never loop on a cycle."""
    current: BaseException | None = error
    for _ in range(8):
        if current is None:
            return
        yield current
        current = current.__cause__


def _is_outage_itself(error: BaseException) -> bool:
    if isinstance(error, _OUTAGES):
        return True
    if isinstance(error, OSError) and error.errno in _UNREACHABLE:
        return True
    if isinstance(error, pg.InterfaceError) and any(t in str(error) for t in _CLOSED):
        return True
    return isinstance(error, RuntimeError) and _TRANSPORT_CLOSED in str(error)


def is_outage(error: BaseException) -> bool:
    """True when ``error``, or what it was raised from, says a dependency could not be
    reached. Only the explicit cause is followed: an error raised while handling an outage
    (a bug in a handler) is not itself one."""
    return any(_is_outage_itself(e) for e in _causes(error))


#: Outages that say a call was slow, not that its connection broke.
_SLOW: tuple[type[BaseException], ...] = (TimeoutError, rd.TimeoutError, pg.QueryCanceledError)


def is_broken_connection(error: BaseException) -> bool:
    """An outage that says the connection broke (reset, closed, refused), not that the call
    ran out of time. An idempotent call that failed so may be sent once more on a new
    connection: a pooled connection the network reset while it sat idle fails its next call
    at once, and the retry costs no deadline. A timeout is never retried: that would
    stretch the caller's deadline."""
    return is_outage(error) and not any(isinstance(e, _SLOW) for e in _causes(error))
