"""The project event cursor: an event's place in its project's commit-ordered stream.

A cursor is (tx_id, position): the id of the transaction that wrote the event (raised to its
run's previous event's, so a run's events never sort out of sequence order) and a counter
assigned at insert. docs/events.md says why this order is the commit order as readers see it.
On the wire it is 33 printable ASCII characters, two fixed-width hex numbers, so cursors also
sort as strings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kernel.errors import InvalidCursor

_WIRE = re.compile(r"([0-9a-f]{16})\.([0-9a-f]{16})")
_MAX = 2**63 - 1  # both parts are PostgreSQL BIGINTs


@dataclass(frozen=True, slots=True, order=True)
class EventCursor:
    tx_id: int
    position: int

    def encode(self) -> str:
        return f"{self.tx_id:016x}.{self.position:016x}"

    @staticmethod
    def parse(text: str, field: str = "after_cursor") -> EventCursor | None:
        """``None`` for the empty cursor (the start of the stream)."""
        if text == "":
            return None
        match = _WIRE.fullmatch(text)
        if match is None:
            raise InvalidCursor(f"{field} is not a cursor this server returned", field=field)
        tx_id, position = int(match[1], 16), int(match[2], 16)
        if tx_id > _MAX or position > _MAX:
            raise InvalidCursor(f"{field} is out of range", field=field)
        return EventCursor(tx_id, position)
