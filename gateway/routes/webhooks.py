"""A webhook delivery (WebhookService): the one route that takes no bearer token. Its
credential is the signature over its body, which the services check
(docs/automations.md "Exactly once", docs/gateway.md "Webhook deliveries")."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from truerun.v1 import schedule_service_pb2 as pb

from gateway import messages
from gateway.http import json_response
from gateway.problems import Problem
from gateway.routes.common import CALL_TIMEOUT_S, client_address, context, endpoint, raw_body_of
from gateway.upstream import FORWARDED

DELIVERY_HEADER = "x-truerun-delivery"
SIGNATURE_HEADER = "x-truerun-signature"


def _unsigned() -> Problem:
    return Problem(401, "WEBHOOK_SIGNATURE_INVALID", "the delivery's signature does not check out")


@endpoint
async def deliver(request: Request) -> Response:
    """A signed delivery, no bearer token: ``X-Truerun-Delivery`` (its id, the run's
    idempotency key) and ``X-Truerun-Signature`` (``t=<ms>,v1=<hex>``) over the raw body,
    which is forwarded as sent. The services check the signature; a refusal never says
    which part was wrong nor whether the schedule exists. Bad signatures have their own
    bound per schedule, in the services (429 TOO_MANY_BAD_SIGNATURES with Retry-After past
    it; a correctly signed delivery is never refused by it); they never count towards the
    bearer-token bound (docs/gateway.md "Webhook deliveries")."""
    FORWARDED.set("")  # nothing of the caller's is forwarded but the delivery itself
    ctx = context(request)
    client_address(request)
    delivery = request.headers.get(DELIVERY_HEADER, "").strip()
    signature = request.headers.get(SIGNATURE_HEADER, "").strip()
    if not delivery or not signature:  # refused here: nothing reaches the services
        raise _unsigned()
    body = await raw_body_of(request)
    fired = await ctx.webhooks.DeliverWebhook(
        pb.DeliverWebhookRequest(
            project_id=request.path_params["project"],
            schedule_id=request.path_params["schedule"],
            delivery_id=delivery,
            signature=signature,
            body=body,
        ),
        timeout=CALL_TIMEOUT_S,
    )
    # The sender learns its run, not the schedule (its template is the project's business).
    fired.ClearField("schedule")
    return json_response(messages.to_dict(fired))
