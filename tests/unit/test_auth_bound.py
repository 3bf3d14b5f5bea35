"""The failure bound (kernel/auth_bound.py, coordinator/api/credentials.py FailureLimit) and
whose forwarded address is believed (kernel/proxies.py): pure, over a fake clock."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.api.credentials import FailureLimit
from kernel.auth_bound import SlidingBound, fingerprint, retry_after_seconds
from kernel.errors import TooManyFailures
from kernel.proxies import TrustedProxies


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_key_is_refused_past_its_limit_until_its_oldest_failure_leaves_the_window() -> None:
    clock = Clock()
    bound = SlidingBound(3, 60.0, clock)
    for _ in range(3):
        assert bound.refusal("k") is None
        bound.failed("k")
        clock.now += 10
    assert bound.refusal("k") == pytest.approx(30.0)  # the first failure, at 1000, ends at 1060
    assert bound.refusal("other") is None
    clock.now = 1060.0
    assert bound.refusal("k") is None
    clock.now = 1200.0
    assert bound.refusal("k") is None and len(bound) == 0  # aged-out keys are forgotten


def test_the_bound_keeps_at_most_max_keys() -> None:
    bound = SlidingBound(1, 60.0, Clock(), max_keys=3)
    for key in range(10):
        bound.failed(key)
    assert len(bound) == 3
    assert bound.refusal(9) is not None and bound.refusal(0) is None


def test_failures_are_bounded_per_source_and_fingerprint_and_per_source() -> None:
    clock = Clock()
    limit = FailureLimit(limit=2, window_s=60.0, clock=clock, per_source=5)
    assert limit.refuse("a", "guess") is None and limit.refuse("a", "guess") is None
    refused = limit.refuse("a", "guess")
    assert isinstance(refused, TooManyFailures) and refused.retry_after_s == 60
    assert refused.metadata == {"retry_after_s": "60"}
    assert limit.refuse("b", "guess") is None  # another source
    assert limit.refuse("a", "other-guess") is None  # another credential
    assert limit.refuse("a", "third") is None and limit.refuse("a", "fourth") is None
    assert limit.refuse("a", "fifth") is not None  # five failures of the source: all refused
    clock.now += 61
    assert limit.refuse("a", "guess") is None


def test_a_fingerprint_is_a_keyed_hash_never_the_credential() -> None:
    token = "token-project-p"
    assert fingerprint(token) == fingerprint(token) != fingerprint(token + "x")
    assert token not in fingerprint(token) and len(fingerprint(token)) == 32
    assert fingerprint("") == ""


@pytest.mark.parametrize(("wait", "seconds"), [(0.0, 1), (0.2, 1), (1.0, 1), (1.01, 2), (59.5, 60)])
def test_retry_after_is_whole_seconds_at_least_one(wait: float, seconds: int) -> None:
    assert retry_after_seconds(wait) == seconds


TRUSTED = TrustedProxies.parse("10.0.0.0/8, 127.0.0.1, ::1")


@pytest.mark.parametrize(
    ("peer", "forwarded", "xff", "client"),
    [
        # An untrusted peer is the client, whatever it says.
        ("198.51.100.1", [], ["1.2.3.4"], "198.51.100.1"),
        ("198.51.100.1", ["for=1.2.3.4"], [], "198.51.100.1"),
        # A trusted peer: the rightmost hop not trusted.
        ("127.0.0.1", [], ["1.2.3.4"], "1.2.3.4"),
        ("127.0.0.1", [], ["6.6.6.6, 1.2.3.4, 10.1.2.3"], "1.2.3.4"),
        ("127.0.0.1", [], ["6.6.6.6", "1.2.3.4"], "1.2.3.4"),  # the header twice
        ("127.0.0.1", [], ["10.0.0.2, 10.0.0.1"], "10.0.0.2"),  # all trusted: the leftmost
        ("127.0.0.1", [], [], "127.0.0.1"),
        ("127.0.0.1", [], ["garbage"], "127.0.0.1"),
        ("127.0.0.1", [], ["1.2.3.4, garbage"], "127.0.0.1"),
        ("127.0.0.1", [], ["1.2.3.4:8080"], "1.2.3.4"),
        ("::1", [], ["2001:db8::7"], "2001:db8::7"),
        ("127.0.0.1", [], ["[2001:db8::7]:443"], "2001:db8::7"),
        ("127.0.0.1", [], ["::ffff:1.2.3.4"], "1.2.3.4"),
        # Forwarded (RFC 7239) wins over X-Forwarded-For.
        ("127.0.0.1", ['for="[2001:db8::7]:4711";proto=https'], ["9.9.9.9"], "2001:db8::7"),
        ("127.0.0.1", ["for=1.2.3.4, for=10.0.0.9"], [], "1.2.3.4"),
        ("127.0.0.1", ["for=unknown"], [], "127.0.0.1"),
        ("127.0.0.1", ["proto=http"], [], "127.0.0.1"),
        ("127.0.0.1", ["For=1.2.3.4;by=10.0.0.1"], [], "1.2.3.4"),
    ],
)
def test_a_forwarded_address_is_believed_only_from_a_trusted_proxy(
    peer: str, forwarded: list[str], xff: list[str], client: str
) -> None:
    assert TRUSTED.client(peer, forwarded, xff) == client


def test_no_trusted_proxies_is_the_default_and_believes_nothing() -> None:
    assert TrustedProxies.parse("").client("127.0.0.1", ["for=1.2.3.4"], ["1.2.3.4"]) == (
        "127.0.0.1"
    )
    assert TrustedProxies().networks == ()


@pytest.mark.parametrize("bad", ["10.0.0.0/33", "proxy.example", "1.2.3", "10.0.0.1/8/1"])
def test_a_bad_trusted_proxy_entry_is_named(bad: str) -> None:
    with pytest.raises(ValueError, match="is not an IP address or CIDR"):
        TrustedProxies.parse(f"127.0.0.1, {bad}")


@given(st.lists(st.ip_addresses(v=4).map(str), max_size=40))
def test_an_untrusted_peer_is_always_the_client(hops: list[str]) -> None:
    assert TRUSTED.client("203.0.113.9", [], [", ".join(hops)]) == "203.0.113.9"


@given(st.lists(st.ip_addresses(v=4).map(str), min_size=1, max_size=20))
def test_the_client_is_a_hop_or_the_peer(hops: list[str]) -> None:
    found = TRUSTED.client("127.0.0.1", [], [", ".join(hops)])
    assert found in [*hops, "127.0.0.1"]
    untrusted = [h for h in hops if not TRUSTED.trusts(h)]
    if untrusted:
        assert found == untrusted[-1]


def test_the_documented_defaults() -> None:
    """docs/gateway.md "Tokens and projects": 20 per token, 100 per source, a minute."""
    limit = FailureLimit()
    assert (limit.limit, limit.per_source, limit.window_s) == (20, 100, 60.0)
