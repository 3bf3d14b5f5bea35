"""The last barrier of every REST answer: an exception no handler turned into a problem (a bug,
a value a converter cannot take) is answered 500 ``application/problem+json`` with reason
INTERNAL, logged with its traceback on the gateway's side only, and the connection is kept
(docs/gateway.md "Errors"). Without it Starlette answered a text/plain 500 and re-raised, and
the server reset the connection (issue 37).

A response that had already started (a stream) cannot become a problem: its body is ended
cleanly instead, so the client sees the stream end, never a reset.
"""

from __future__ import annotations

import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.problems import Problem, problem_response

log = logging.getLogger(__name__)

INTERNAL_DETAIL = (
    "the gateway failed to answer this request (logged on its side); retry or report it"
)


class CatchAll:
    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        started = False
        finished = False

        async def sending(message: Message) -> None:
            nonlocal started, finished
            if message["type"] == "http.response.start":
                started = True
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                finished = True
            await send(message)

        try:
            await self._app(scope, receive, sending)
        except Exception:
            log.exception("%s %s failed", scope.get("method"), scope.get("path"))
            if not started:
                response = problem_response(Problem(500, "INTERNAL", INTERNAL_DETAIL))
                await response(scope, receive, send)
            elif not finished:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
