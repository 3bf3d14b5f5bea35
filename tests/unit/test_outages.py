"""kernel/outages.py: which failures are a dependency out of reach (UNAVAILABLE, retryable)
and which stay INTERNAL; of the outages, which say a connection broke (an idempotent call
may go once more) rather than that a call ran out of time (never retried)."""

from __future__ import annotations

import errno

import asyncpg.exceptions as pg
import pytest
import redis.exceptions as rd

from kernel.outages import is_broken_connection, is_outage


def _raised_from(error: BaseException, cause: BaseException) -> BaseException:
    error.__cause__ = cause
    return error


def _raised_while(error: BaseException, context: BaseException) -> BaseException:
    error.__context__ = context
    return error


OUTAGES = [
    ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"),
    ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"),
    BrokenPipeError(errno.EPIPE, "Broken pipe"),
    TimeoutError(),
    OSError(errno.EHOSTUNREACH, "No route to host"),
    OSError(errno.ENETUNREACH, "Network is unreachable"),
    pg.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
    pg.CannotConnectNowError("the database system is starting up"),
    pg.AdminShutdownError("terminating connection due to administrator command"),
    pg.QueryCanceledError("canceling statement due to statement timeout"),
    pg.InterfaceError("connection is closed"),
    pg.InterfaceError("pool is closing"),
    rd.ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused."),
    rd.TimeoutError("Timeout reading from socket"),
    rd.BusyLoadingError("Redis is loading the dataset in memory"),
    RuntimeError(
        "unable to perform operation on <TCPTransport closed=True reading=False 0x1>;"
        " the handler is closed"
    ),
    _raised_from(ValueError("store failed"), ConnectionResetError()),
    _raised_from(KeyError("x"), _raised_from(ValueError("y"), rd.ConnectionError())),
]

NOT_OUTAGES = [
    ValueError("bad value"),
    KeyError("missing"),
    FileNotFoundError(errno.ENOENT, "No such file or directory"),
    PermissionError(errno.EACCES, "Permission denied"),
    RuntimeError("dictionary changed size during iteration"),
    pg.InterfaceError("cannot perform operation: another operation is in progress"),
    pg.UniqueViolationError("duplicate key value violates unique constraint"),
    pg.UndefinedColumnError('column "x" does not exist'),
    rd.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"),
    # raised while handling an outage, not from it: a bug in the handler stays a bug
    _raised_while(TypeError("bad handler"), ConnectionResetError()),
]


@pytest.mark.parametrize("error", OUTAGES, ids=lambda e: f"{type(e).__name__}:{e}"[:60])
def test_a_dependency_out_of_reach_is_an_outage(error: BaseException) -> None:
    assert is_outage(error)


@pytest.mark.parametrize("error", NOT_OUTAGES, ids=lambda e: f"{type(e).__name__}:{e}"[:60])
def test_anything_else_is_not(error: BaseException) -> None:
    assert not is_outage(error)


def test_a_cause_cycle_ends() -> None:
    a, b = ValueError("a"), ValueError("b")
    a.__cause__, b.__cause__ = b, a
    assert not is_outage(a)


SLOW = [
    TimeoutError(),
    pg.QueryCanceledError("canceling statement due to statement timeout"),
    rd.TimeoutError("Timeout reading from socket"),
    _raised_from(rd.ConnectionError("wrapped"), TimeoutError()),
]


@pytest.mark.parametrize("error", SLOW, ids=lambda e: f"{type(e).__name__}:{e}"[:60])
def test_a_timeout_is_no_broken_connection(error: BaseException) -> None:
    assert is_outage(error)
    assert not is_broken_connection(error)


BROKEN = [
    ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"),
    ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"),
    BrokenPipeError(errno.EPIPE, "Broken pipe"),
    pg.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
    pg.InterfaceError("connection is closed"),
    rd.ConnectionError("Error 104 while writing to socket. Connection reset by peer."),
    RuntimeError(
        "unable to perform operation on <TCPTransport closed=True reading=False 0x1>;"
        " the handler is closed"
    ),
    _raised_from(ValueError("store failed"), ConnectionResetError()),
]


@pytest.mark.parametrize("error", BROKEN, ids=lambda e: f"{type(e).__name__}:{e}"[:60])
def test_any_other_outage_is_a_broken_connection(error: BaseException) -> None:
    assert is_broken_connection(error)


@pytest.mark.parametrize("error", NOT_OUTAGES, ids=lambda e: f"{type(e).__name__}:{e}"[:60])
def test_no_other_failure_is_a_broken_connection(error: BaseException) -> None:
    assert not is_broken_connection(error)
