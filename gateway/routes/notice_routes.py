"""The route table's entries for notices (gateway/routes/notices.py), appended to
``ROUTES`` (gateway/routes/__init__.py): the owner's notices as a page and a stream, their
deliveries' state, and a webhook subscription (docs/long-tasks.md "Notices")."""

from __future__ import annotations

from gateway.routes import notices
from gateway.routes.spec import (
    PROJECT,
    Entry,
    Operation,
    json_response,
    param,
    problems,
    ref,
    stream,
)

BASE = "/v1/projects/{project}"
_PROBLEM_CONTENT = {"application/problem+json": {"schema": {"$ref": ref("Problem")}}}
_FORBIDDEN = {
    "403": {
        "description": "another project, or another owner's notices (NOTICES_OF_ANOTHER_OWNER)",
        "content": _PROBLEM_CONTENT,
    }
}
OWNER = param("owner_id", "query", "whose notices; empty: the caller's own (a person's token)")
NOTICE_PAGE_SIZE = param(
    "page_size",
    "query",
    "maximum items; 0 = 100, at most 500",
    {"type": "integer", "minimum": 0, "maximum": 500},
)

NOTICE_ROUTES: tuple[Entry, ...] = (
    Entry(
        "GET",
        f"{BASE}/notices",
        notices.list_notices,
        (
            Operation(
                operation_id="list_notices",
                summary="list notices",
                description="The owner's notices in the project, oldest first: one per "
                "interruption, decision, approval request (with its repeat count) and "
                "terminal outcome (completed, partial, failed), each with the text command "
                "that answers it. Only the owner's own (an operator may name anyone).",
                parameters=(
                    PROJECT,
                    OWNER,
                    param("after_cursor", "query", "only notices after this cursor"),
                    NOTICE_PAGE_SIZE,
                ),
                responses={
                    "200": json_response("the notices", "ListNoticesResponse"),
                    **_FORBIDDEN,
                    **problems("400", "401", "503"),
                },
            ),
        ),
    ),
    Entry(
        "GET",
        f"{BASE}/notices:stream",
        notices.stream_notices,
        (
            stream(
                "stream notices",
                "The owner's notices from after Last-Event-ID (a notice's cursor; none: "
                "from the first), then new ones as they are committed.",
                (OWNER,),
                "`id` (the notice's cursor), `event: notice`, `data: Notice`",
            ),
        ),
    ),
    Entry(
        "GET",
        f"{BASE}/noticeDeliveries",
        notices.list_notice_deliveries,
        (
            Operation(
                operation_id="list_notice_deliveries",
                summary="list notice deliveries",
                description="The owner's notices posted to their webhooks: pending (with "
                "the next try's time), delivered, or dead (dead-lettered after "
                "TRUERUN_NOTICE_MAX_DELIVERIES tries), with the tries and the receiver's "
                "last status.",
                parameters=(
                    PROJECT,
                    OWNER,
                    param("notice_id", "query", "only this notice's deliveries"),
                    NOTICE_PAGE_SIZE,
                ),
                responses={
                    "200": json_response("the deliveries", "ListNoticeDeliveriesResponse"),
                    **_FORBIDDEN,
                    **problems("400", "401", "503"),
                },
            ),
        ),
    ),
    Entry(
        "POST",
        f"{BASE}/noticeWebhooks",
        notices.register_notice_webhook,
        (
            Operation(
                operation_id="register_notice_webhook",
                summary="register a notice webhook",
                description="Each of the owner's notices is POSTed to url as JSON, signed: "
                "Truerun-Signature t=<ms>,v1=<hex HMAC-SHA256 over '<t>.<Truerun-Delivery>."
                "<body>'>. The secret is in this answer only (registering the same url "
                "again rotates it). 400 NOTICE_WEBHOOK_INVALID: not an http(s) URL, or no "
                "TRUERUN_WEBHOOK_KEY on the server. 400 NOTICE_WEBHOOK_NOT_ALLOWED: a host "
                "not in TRUERUN_NOTICE_WEBHOOK_ALLOW, or a link-local or metadata address.",
                parameters=(PROJECT,),
                body="RegisterNoticeWebhookBody",
                body_required=True,
                responses={
                    "201": json_response(
                        "the subscription and its secret", "RegisterNoticeWebhookResponse"
                    ),
                    **_FORBIDDEN,
                    **problems("400", "401", "413", "503"),
                },
            ),
        ),
    ),
)
