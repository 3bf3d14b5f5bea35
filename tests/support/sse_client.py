"""A small Server-Sent Events reader for tests: messages (id, event, data) and comment lines,
from a live httpx stream, with bounded waits."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class Message:
    id: str = ""
    event: str = ""
    data: str = ""
    comments: list[str] = field(default_factory=list)

    def json(self) -> dict[str, Any]:
        document: dict[str, Any] = json.loads(self.data)
        return document


class Stream:
    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._lines = response.aiter_lines()
        self.comments: list[str] = []
        #: What a browser would send as Last-Event-ID now: the last id field read (a message
        #: with an id and no data sets it too).
        self.last_id = ""

    async def next_message(self, timeout: float = 20.0) -> Message:
        """The next message with data (comments seen on the way are kept in ``comments``)."""
        return await asyncio.wait_for(self._next(), timeout)

    async def next_id(self, timeout: float = 20.0) -> str:
        """Read up to the next message with an id (data or not); that id."""
        return (await asyncio.wait_for(self._next(any_id=True), timeout)).id

    async def _next(self, any_id: bool = False) -> Message:
        message = Message()
        async for line in self._lines:
            if line == "":
                if message.id:
                    self.last_id = message.id
                if message.data or (any_id and message.id):
                    return message
                message = Message()
                continue
            if line.startswith(":"):
                self.comments.append(line[1:].strip())
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "id":
                message.id = value
            elif name == "event":
                message.event = value
            elif name == "data":
                message.data = f"{message.data}\n{value}" if message.data else value
        raise EOFError("the stream ended")

    async def wait_comment(self, text: str, timeout: float = 20.0) -> None:
        """Read (and drop) lines until the comment ``text`` arrives; for idle streams."""

        async def until() -> None:
            if text in self.comments:
                return
            async for line in self._lines:
                if line.startswith(":"):
                    self.comments.append(line[1:].strip())
                    if self.comments[-1] == text:
                        return
            raise EOFError("the stream ended")

        await asyncio.wait_for(until(), timeout)


@asynccontextmanager
async def open_stream(
    client: httpx.AsyncClient,
    url: str,
    headers: dict[str, str] | None = None,
    params: dict[str, str] | None = None,
) -> AsyncIterator[Stream]:
    async with client.stream("GET", url, headers=headers, params=params) as response:
        assert response.status_code == 200, (await response.aread()).decode()
        assert response.headers["content-type"].startswith("text/event-stream")
        yield Stream(response)
