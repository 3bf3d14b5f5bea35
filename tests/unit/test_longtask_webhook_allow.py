"""The notice webhooks' URL rule (longtasks/domain/webhook_allow.py; docs/long-tasks.md
"Notices"): the allow list's patterns, and the link-local / metadata refusal that no list
lifts, for literal hosts and for what a name resolves to."""

from __future__ import annotations

import pytest

from longtasks.domain.webhook_allow import parse_allow, url_refusal
from longtasks.service.webhook_guard import WebhookGuard

ALLOW = parse_allow(" hooks.example.com , *.corp.example:8443,127.0.0.1,[::1]:9000 ,")


def test_the_setting_is_parsed_into_lower_case_patterns() -> None:
    assert parse_allow("") == ()
    assert parse_allow("A.Example, ,b:1") == ("a.example", "b:1")
    assert ALLOW == ("hooks.example.com", "*.corp.example:8443", "127.0.0.1", "[::1]:9000")


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://hooks.example.com/x", True),
        ("http://hooks.example.com:8080/x", True),  # a pattern without a port: any port
        ("https://HOOKS.example.com./x", True),
        ("https://evil.example.com/x", False),
        ("https://hooks.example.com.evil.io/x", False),
        ("https://a.corp.example:8443/x", True),
        ("https://a.b.corp.example:8443/x", True),
        ("https://corp.example:8443/x", True),
        ("https://a.corp.example/x", False),  # 443, not 8443
        ("https://xcorp.example:8443/x", False),
        ("http://127.0.0.1:5000/hook", True),
        ("http://[::1]:9000/hook", True),
        ("http://[::1]:9001/hook", False),
    ],
)
def test_an_allow_list_admits_only_its_hosts(url: str, allowed: bool) -> None:
    refused = url_refusal(url, ALLOW)
    assert (refused is None) == allowed, refused
    if not allowed:
        assert "TRUERUN_NOTICE_WEBHOOK_ALLOW" in refused  # type: ignore[operator]


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://169.254.1.2:8080/",
        "http://[fe80::1]/",
        "http://[::ffff:169.254.169.254]/",
        "http://[fd00:ec2::254]/",
        "http://100.100.100.200/",
        "http://metadata.google.internal/computeMetadata/v1/",
    ],
)
def test_link_local_and_metadata_hosts_are_refused_whatever_the_list(url: str) -> None:
    for allow in ((), parse_allow("169.254.169.254,*.google.internal,[fe80::1],metadata")):
        refused = url_refusal(url, allow)
        assert refused is not None and ("link-local" in refused or "metadata" in refused)


def test_a_name_resolving_to_a_link_local_address_is_refused() -> None:
    assert url_refusal("https://hooks.example.com/x", ALLOW, ["93.184.216.34"]) is None
    refused = url_refusal("https://hooks.example.com/x", ALLOW, ["10.0.0.1", "169.254.169.254"])
    assert refused is not None and "169.254.169.254" in refused
    assert url_refusal("https://any.example/x", (), ["fe80::2%eth0"]) is not None


def test_not_an_http_url_is_refused() -> None:
    for url in ("ftp://hooks.example.com/", "hooks.example.com", "http:///x", "http://h:99999/"):
        assert url_refusal(url, ()) is not None


async def test_the_guard_resolves_the_host_only_when_the_url_passes_as_written() -> None:
    asked: list[str] = []

    async def resolve(host: str) -> list[str]:
        asked.append(host)
        return ["169.254.169.254"] if host == "rebound.example" else ["93.184.216.34"]

    guard = WebhookGuard("", resolve)
    assert await guard.refusal("https://ok.example/x") is None
    assert "169.254.169.254" in (await guard.refusal("https://rebound.example/") or "")
    assert await WebhookGuard("ok.example", resolve).refusal("https://no.example/") is not None
    assert asked == ["ok.example", "rebound.example"]  # a listed-out host is never resolved
