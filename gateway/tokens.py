"""API bearer tokens (coordinator/api/credentials.py): the gateway authenticates with the
same tokens as every gRPC service and forwards the caller's own token."""

from __future__ import annotations

from coordinator.api.credentials import ALL_PROJECTS, ApiTokens, FailureLimit, Principal

__all__ = ["ALL_PROJECTS", "ApiTokens", "FailureLimit", "Principal"]
