"""The error of a server process that cannot listen on its address (apart from the server
module, so the CLI can name it without importing every service)."""

from __future__ import annotations


class ListenError(OSError):
    """A server cannot listen on its address (in use, or not this host's)."""
