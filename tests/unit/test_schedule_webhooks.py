"""Webhook signatures (automations/domain/webhooks.py): a delivery is accepted only when signed
by the schedule's secret over its timestamp, delivery id and body, within the replay window;
the secret is derived from the server's key, the schedule and its generation."""

from __future__ import annotations

import pytest

from automations.domain.webhooks import REPLAY_WINDOW_MS, secret_for, sign, verify

KEY = b"k" * 32
NOW = 1_780_300_000_000
SECRET = secret_for(KEY, "proj", "nightly", 1)
BODY = b'{"ref": "main"}'


def test_a_signed_delivery_verifies() -> None:
    signature = sign(SECRET, NOW, "d-1", BODY)
    assert signature.startswith(f"t={NOW},v1=") and len(signature.split("v1=")[1]) == 64
    assert verify(SECRET, signature, "d-1", BODY, NOW)
    assert verify(SECRET, sign(SECRET, NOW, "d-2", b""), "d-2", b"", NOW)


def test_a_wrong_secret_fails() -> None:
    other = secret_for(KEY, "proj", "nightly", 2)
    assert not verify(other, sign(SECRET, NOW, "d-1", BODY), "d-1", BODY, NOW)
    assert not verify(SECRET, sign(other, NOW, "d-1", BODY), "d-1", BODY, NOW)


@pytest.mark.parametrize(
    ("delivery_id", "body"),
    [("d-1", BODY + b" "), ("d-1", b'{"ref": "evil"}'), ("d-2", BODY), ("d-1 ", BODY)],
    ids=["body-appended", "body-changed", "delivery-id", "delivery-id-appended"],
)
def test_a_tampered_delivery_fails(delivery_id: str, body: bytes) -> None:
    assert not verify(SECRET, sign(SECRET, NOW, "d-1", BODY), delivery_id, body, NOW)


def test_a_dot_in_the_delivery_id_is_refused_so_the_boundary_cannot_shift() -> None:
    """ "<t>.evt.<body>" with a body "1.5}" also reads as delivery "evt.1" with body "5}": a
    replay of one signed delivery under a second id (a second run) if dots were allowed."""
    body = b'{"v": 1.5}'
    signature = sign(SECRET, NOW, "evt", body)
    assert verify(SECRET, signature, "evt", body, NOW)
    assert not verify(SECRET, signature, 'evt.{"v": 1', b"5}", NOW)
    with pytest.raises(ValueError, match="ambiguous"):
        sign(SECRET, NOW, "evt.1", body)


def test_a_changed_timestamp_fails() -> None:
    digest = sign(SECRET, NOW, "d-1", BODY).split(",", 1)[1]
    assert not verify(SECRET, f"t={NOW + 1},{digest}", "d-1", BODY, NOW)


@pytest.mark.parametrize(
    ("skew", "accepted"),
    [
        (0, True),
        (REPLAY_WINDOW_MS, True),
        (-REPLAY_WINDOW_MS, True),
        (REPLAY_WINDOW_MS + 1, False),
        (-REPLAY_WINDOW_MS - 1, False),
        (24 * 3_600_000, False),
    ],
)
def test_the_replay_window_holds_both_ways(skew: int, accepted: bool) -> None:
    """``skew``: how far the server's clock is ahead of the signature's timestamp."""
    assert REPLAY_WINDOW_MS == 5 * 60_000
    signature = sign(SECRET, NOW - skew, "d-1", BODY)
    assert verify(SECRET, signature, "d-1", BODY, NOW) is accepted


GOOD = sign(SECRET, NOW, "d-1", BODY)
DIGEST = GOOD.split("v1=")[1]


@pytest.mark.parametrize(
    "signature",
    [
        "",
        "garbage",
        DIGEST,
        f"t={NOW}",
        f"v1={DIGEST}",
        f"t=,v1={DIGEST}",
        f"t=abc,v1={DIGEST}",
        f"t=-{NOW},v1={DIGEST}",
        f"t={NOW}.0,v1={DIGEST}",
        f"t=²,v1={DIGEST}",  # a digit to str.isdigit, not to int()
        f"t={'1' * 5000},v1={DIGEST}",  # more digits than int() converts
        f"t={NOW},v1={DIGEST.upper()}",
        f"t={NOW},v1={DIGEST[:-1]}",
        f"t={NOW},v1=é{DIGEST[1:]}",  # compare_digest refuses non-ASCII str
        f"t={NOW},v0={DIGEST}",
        f"t={NOW} v1={DIGEST}",
    ],
)
def test_a_malformed_header_is_refused_without_raising(signature: str) -> None:
    assert verify(SECRET, signature, "d-1", BODY, NOW) is False


def test_extra_fields_in_the_header_are_ignored() -> None:
    assert verify(SECRET, f"{GOOD},v2=whatever", "d-1", BODY, NOW)
    assert verify(SECRET, f"v0=old,{GOOD}", "d-1", BODY, NOW)


def test_the_secret_is_deterministic_per_schedule_and_generation() -> None:
    assert secret_for(KEY, "proj", "nightly", 1) == SECRET
    assert SECRET.startswith("whsec_") and "=" not in SECRET and len(SECRET) == 6 + 43
    others = {
        secret_for(KEY, "proj", "nightly", 2),
        secret_for(KEY, "proj", "hourly", 1),
        secret_for(KEY, "proj2", "nightly", 1),
        secret_for(KEY, "proj\0nightly", "", 1),  # the separator keeps the fields apart
        secret_for(b"another key", "proj", "nightly", 1),
    }
    assert len(others) == 5 and SECRET not in others
    assert all(secret.startswith("whsec_") for secret in others)
