"""Request validation: anything malformed is INVALID_ARGUMENT before anything is read or written."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

from coordinator.domain.redaction import not_a_secret, secret_key, secret_values
from kernel import derived_keys
from kernel.errors import InvalidArgument

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@/+-]{0,127}$")
MAX_TEXT = 512
MAX_SPEC_BYTES = 64 * 1024
MAX_LABELS = 32


def run_id(value: str, field: str = "id") -> str:
    """Run ids are UUIDs; anything else cannot name a run."""
    try:
        parsed = uuid.UUID(value)
    except ValueError:
        raise InvalidArgument(f"{field} must be a run id (a UUID), got {value[:64]!r}") from None
    if str(parsed) != value.lower():
        raise InvalidArgument(f"{field} must be a UUID in canonical form")
    return value.lower()


def name(value: str, field: str, required: bool = True) -> str | None:
    if not value:
        if required:
            raise InvalidArgument(f"{field} is required")
        return None
    if not _NAME.match(value):
        raise InvalidArgument(
            f"{field} must be 1-128 characters of letters, digits and ._:@/+- "
            "(starting with a letter or digit)"
        )
    return value


def text(value: str, field: str, limit: int = MAX_TEXT) -> str | None:
    if len(value) > limit:
        raise InvalidArgument(f"{field} is longer than {limit} characters")
    return value or None


def printable(value: str, field: str, limit: int) -> str:
    """An optional free-text fact ('' when absent): at most ``limit`` printable characters."""
    if len(value) > limit or not value.isprintable():
        raise InvalidArgument(f"{field} must be at most {limit} printable characters")
    return value


def request_id(value: str) -> str:
    """An AIP-155 request id as a caller sends it: never one in the space of the keys
    truerun derives (RESERVED_KEY, kernel/derived_keys.py), which no caller may write."""
    if len(value) > 128 or not value.isprintable():
        raise InvalidArgument("request_id must be at most 128 printable characters")
    return derived_keys.refuse_reserved(value, "request_id")


def idempotency_key(value: str) -> str | None:
    """A caller's idempotency key (None when empty): at most 256 characters, never in the
    reserved space of the keys truerun derives for its own runs (schedule fires, webhook
    deliveries, long-task attempts: kernel/derived_keys.py), so no caller can create the
    run such a key names before truerun does (issue #36)."""
    key = text(value, "idempotency_key", 256)
    return derived_keys.refuse_reserved(key, "idempotency_key") if key else None


def etag(value: str) -> int | None:
    """Etags are the quoted run version; an empty etag means "no version check"."""
    if not value:
        return None
    raw = value.removeprefix("W/").strip('"')
    # ASCII digits only ("²".isdigit() is true, int("²") fails), and within a BIGINT.
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 18):
        raise InvalidArgument(f"etag {value[:32]!r} is not an etag this server issued")
    return int(raw)


def in_range(value: int, field: str, low: int, high: int) -> int:
    if not low <= value <= high:
        raise InvalidArgument(f"{field} must be between {low} and {high}")
    return value


def command_spec(spec: dict[str, object]) -> None:
    """The keys of the reference agent's spec schema (docs/runtime-protocol.md "Start"),
    where a run gives them, checked as the agent would check them, so the common mistake is
    refused here rather than by a runtime: ``command`` (a non-empty string) or ``argv`` (a
    non-empty list of strings), never both; ``timeout_s`` > 0; ``grace_ms`` >= 0; ``env``
    strings. A spec with neither command nor argv is left to its runtime (another kind of
    runtime reads other keys; the reference agent refuses it as an invalid spec, and the run
    fails with that reason)."""
    command, argv = spec.get("command"), spec.get("argv")
    if command is not None and argv is not None:
        raise InvalidArgument("spec has both command and argv; give one")
    if command is not None and (not isinstance(command, str) or not command.strip()):
        raise InvalidArgument("spec.command must be a non-empty string")
    if argv is not None and (
        not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv)
    ):
        raise InvalidArgument("spec.argv must be a non-empty list of strings")
    timeout = spec.get("timeout_s")
    if timeout is not None and (not _number(timeout) or float(timeout) <= 0):  # type: ignore[arg-type]
        raise InvalidArgument("spec.timeout_s must be a positive number")
    grace = spec.get("grace_ms")
    if grace is not None and (not _number(grace) or float(grace) < 0):  # type: ignore[arg-type]
        raise InvalidArgument("spec.grace_ms must be a number >= 0")
    env = spec.get("env")
    if env is not None and (
        not isinstance(env, dict) or not all(_env_value(v) for v in env.values())
    ):
        raise InvalidArgument('spec.env must map names to strings or {"secret_ref": NAME}')
    no_secrets(spec)


def _env_value(value: object) -> bool:
    if isinstance(value, str):
        return True
    return (
        isinstance(value, dict)
        and set(value) == {SECRET_REF}
        and isinstance(value[SECRET_REF], str)
        and bool(SECRET_NAME.fullmatch(value[SECRET_REF]))
    )


#: An env value the runtime resolves from its own secrets: truerun stores only the name.
SECRET_REF = "secret_ref"
SECRET_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_SECRET_ENV_NAME = re.compile(
    r"(?i)(password|passwd|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|private[_-]?key|"
    r"credential)"
)


def no_secrets(spec: dict[str, object]) -> None:
    """truerun never stores a secret in clear (seed B §17): a spec string that looks like one
    (a key of a known format, a password in a URL, ``token=...``), or a literal env value
    under a secret's name, is refused; the caller passes a reference the runtime resolves
    instead (``{"secret_ref": NAME}``, docs/runtime-protocol.md "Secrets")."""
    env = spec.get("env")
    if isinstance(env, dict):
        for name, value in env.items():
            if isinstance(value, str) and value and _SECRET_ENV_NAME.search(str(name)):
                raise InvalidArgument(
                    f"spec.env.{name} looks like a secret; truerun does not store secrets: pass "
                    f'{{"{SECRET_REF}": "NAME"}} and give the runtime the secret NAME'
                )
    for path, text, named in _strings(spec, "spec", False):
        if (named and _literal(text)) or any(_literal(value) for value in secret_values(text)):
            raise InvalidArgument(
                f"{path} contains what looks like a secret; truerun does not store secrets: "
                f'put it in the runtime\'s secrets and pass {{"{SECRET_REF}": "NAME"}} in env'
            )


def _literal(value: str) -> bool:
    """A secret's value written out: not "$TOKEN" / "${API_KEY:-x}" / "$A,$B" (references
    to the environment are how a secret should be passed), not a bare auth scheme word."""
    return not not_a_secret(value)


def _strings(value: object, path: str, named: bool) -> Iterator[tuple[str, str, bool]]:
    """Every string in ``value`` with its path, and whether a key above it names a secret
    (``password``, ``client_secret``, ``apiKey``: redaction.secret_key); ``env`` has its own
    rule above (its names are checked there)."""
    if isinstance(value, str):
        yield path, value, named
    elif isinstance(value, dict):
        for key, item in value.items():
            under = named or (path != "spec.env" and secret_key(str(key)))
            yield from _strings(item, f"{path}.{key}", under)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, f"{path}[{index}]", named)


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


#: The run spec key that opts a run into self-fencing (sent as Start.self_fence_after_ms).
SELF_FENCE_KEY = "self_fence_after_ms"


def self_fence_after_ms(spec: dict[str, object]) -> None:
    """``spec.self_fence_after_ms``, when given, is a whole number of milliseconds >= 0."""
    if SELF_FENCE_KEY not in spec:
        return
    value = spec[SELF_FENCE_KEY]
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or value != int(value)
        or not 0 <= value <= 2**53
    ):
        raise InvalidArgument(f"spec.{SELF_FENCE_KEY} must be a whole number of ms >= 0")
