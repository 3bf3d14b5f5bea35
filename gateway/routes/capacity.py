"""Capacity: the runtimes, one runtime instance's occupancy, the agents (CapacityService)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from truerun.v1 import capacity_service_pb2

from gateway import messages
from gateway.http import json_response
from gateway.routes.common import CALL_TIMEOUT_S, context, endpoint, principal


@endpoint
async def get_occupancy(request: Request) -> Response:
    principal(request)
    answer = await context(request).capacity.GetOccupancy(
        capacity_service_pb2.GetOccupancyRequest(
            owner_id=request.path_params["owner"],
            runtime_instance_id=request.path_params["instance"],
        ),
        timeout=CALL_TIMEOUT_S,
    )
    return json_response(messages.to_dict(answer))


@endpoint
async def get_agent(request: Request) -> Response:
    principal(request)
    answer = await context(request).capacity.GetAgent(
        capacity_service_pb2.GetAgentRequest(agent_id=request.path_params["agent"]),
        timeout=CALL_TIMEOUT_S,
    )
    return json_response(messages.to_dict(answer))


@endpoint
async def list_runtimes(request: Request) -> Response:
    principal(request)
    answer = await context(request).capacity.ListRuntimes(
        capacity_service_pb2.ListRuntimesRequest(owner_id=request.query_params.get("owner_id", "")),
        timeout=CALL_TIMEOUT_S,
    )
    return json_response(messages.to_dict(answer))


@endpoint
async def list_agents(request: Request) -> Response:
    principal(request)
    answer = await context(request).capacity.ListAgents(
        capacity_service_pb2.ListAgentsRequest(), timeout=CALL_TIMEOUT_S
    )
    return json_response(messages.to_dict(answer))
