"""Secrets a run's env names by reference (``{"secret_ref": NAME}``): truerun stores only the
name; this runtime resolves the value when the command starts, from its own environment
(``TRUERUN_SECRET_<NAME>``, the name upper-cased with every other character as ``_``) or a
file ``<secrets dir>/NAME`` (default ``<state>/secrets``, one value, a trailing newline
dropped). The value is never written to the task's files or sent anywhere."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

ENV_PREFIX = "TRUERUN_SECRET_"


def env_name(secret: str) -> str:
    return ENV_PREFIX + re.sub(r"[^A-Z0-9]", "_", secret.upper())


def resolve(secret: str, directory: Path, environ: Mapping[str, str] = os.environ) -> str | None:
    """The secret's value, or None when this runtime does not have it."""
    if (value := environ.get(env_name(secret))) is not None:
        return value
    try:
        return (directory / secret).read_text().removesuffix("\n")
    except (OSError, UnicodeDecodeError):
        return None


def missing(secrets: Mapping[str, str], directory: Path) -> list[str]:
    """The referenced secret names this runtime cannot resolve."""
    return sorted({name for name in secrets.values() if resolve(name, directory) is None})
