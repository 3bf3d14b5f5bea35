"""Credential-shaped strings in the formats real services issue (made-up values of the right
shape, none of them live), plus tokens truerun itself issues. Every one must be redacted
wherever truerun stores or logs text (issue #11 §4)."""

from __future__ import annotations

from kernel.ids import new_token

_A = "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8S9t0"  # 40 mixed characters to cut from
_HEX = "0123456789abcdef" * 4

#: name -> a value of that format
FORMATS: dict[str, str] = {
    "truerun callback token": new_token("cb"),
    "truerun runtime token": new_token("rt"),
    "truerun API token": new_token("api"),
    "AWS access key id": "AKIAIOSFODNN7EXAMPLE",
    "AWS session key id": "ASIAIOSFODNN7EXAMPLE",
    "GitHub classic token": "ghp_" + _A[:36],
    "GitHub fine-grained token": "github_pat_11ABCDEFG0" + _A[:30],
    "GitLab token": "glpat-" + _A[:20],
    "OpenAI project key": "sk-proj-" + _A,
    "Anthropic key": "sk-ant-api03-" + _A,
    "Stripe live secret key": "sk_live_" + _A[:24],
    "Stripe restricted key": "rk_live_" + _A[:24],
    "Stripe webhook secret": "whsec_" + _A[:32],
    "Slack bot token": "xoxb-123456789012-1234567890123-" + _A[:24],
    "Slack webhook URL": "https://hooks.slack.com/services/T00000000/B00000000/" + _A[:24],
    "Google API key": "AIza" + (_A + _A)[:35],
    "Google OAuth token": "ya29." + _A,
    "JWT": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
    "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "SendGrid key": "SG." + _A[:22] + "." + _A[:40],
    "Twilio API key": "SK" + _HEX[:32],
    "npm token": "npm_" + _A[:36],
    "PyPI token": "pypi-AgEIcHlwaS5vcmc" + (_A * 2)[:60],
    "Hugging Face token": "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh",
    "DigitalOcean token": "dop_v1_" + _HEX[:64],
    "Shopify access token": "shpat_" + _HEX[:32],
    "HashiCorp Vault token": "hvs." + _A[:28],
    "Docker Hub token": "dckr_pat_" + _A[:27],
    "Databricks token": "dapi" + _HEX[:32],
    "Linear key": "lin_api_" + _A,
    "Square token": "sq0atp-" + _A[:22],
    "Atlassian token": "ATATT3xFfGF0" + _A,
    "Telegram bot token": "123456789:AA" + (_A + _A)[:33],
    "Azure storage key": "AccountKey=" + (_A * 3)[:86] + "==",
    "password in a URL": "postgres://app:Sup3rS3cretPw@db.internal:5432/app",
    "Authorization Bearer header": "Authorization: Bearer " + _A[:32],
    "Authorization Basic header": "Authorization: Basic dXNlcjpodW50ZXIyLXp6OXhx",
    "AWS secret access key": "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "Slack user token": "xoxp-223456789012-2234567890123-" + _A[:24],
    "Stripe test key": "sk_test_" + _A[8:32],
    "password assignment": "password=hunter2-zz9xq7",
    "quoted passphrase": '"password": "correct horse battery staple"',
    "private key": "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA"
    + _A
    + "\n-----END RSA PRIVATE KEY-----",
}


def secret_part(value: str) -> str:
    """The part that must never survive (a URL keeps its host; a key keeps its armour)."""
    if value.startswith("postgres://"):
        return "Sup3rS3cretPw"
    if value.startswith("AccountKey="):
        return value.removeprefix("AccountKey=")
    if value.startswith("-----BEGIN"):
        return _A
    for key in ("Authorization: Bearer ", "Authorization: Basic ", "password="):
        if value.startswith(key):
            return value.removeprefix(key)
    if value.startswith("aws_secret_access_key"):
        return value.split("= ")[1]
    if value.startswith('"password"'):
        return "correct horse battery staple"
    return value
