"""Which failures mean a dependency (PostgreSQL, Redis) is out of reach rather than a bug.

A call that fails because a connection was reset, refused or timed out is answered
UNAVAILABLE (``STORE_BUSY``, retryable), not INTERNAL: the client should try again, and an
operator reading INTERNAL would look for a defect that is not there. Anything else
unexpected stays INTERNAL (coordinator/api/errors.py).
"""

from __future__ import annotations

import errno

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


def is_outage(error: BaseException) -> bool:
    """True when ``error``, or what it was raised from, says a dependency could not be
    reached. Only the explicit cause is followed: an error raised while handling an outage
    (a bug in a handler) is not itself one."""
    current: BaseException | None = error
    for _ in range(8):  # a cause chain is short; never loop on a cycle
        if current is None:
            return False
        if isinstance(current, _OUTAGES):
            return True
        if isinstance(current, OSError) and current.errno in _UNREACHABLE:
            return True
        if isinstance(current, pg.InterfaceError) and any(t in str(current) for t in _CLOSED):
            return True
        if isinstance(current, RuntimeError) and _TRANSPORT_CLOSED in str(current):
            return True
        current = current.__cause__
    return False


#: Outages that say a call was slow, not that its connection broke.
_SLOW: tuple[type[BaseException], ...] = (TimeoutError, rd.TimeoutError, pg.QueryCanceledError)


def is_broken_connection(error: BaseException) -> bool:
    """An outage that says the connection broke (reset, closed, refused), not that the call
    ran out of time. An idempotent call that failed so may be sent once more on a new
    connection: a pooled connection the network reset while it sat idle fails its next call
    at once, and the retry costs no deadline. A timeout is never retried: that would
    stretch the caller's deadline."""
    if not is_outage(error):
        return False
    current: BaseException | None = error
    for _ in range(8):
        if current is None:
            break
        if isinstance(current, _SLOW):
            return False
        current = current.__cause__
    return True
