"""The stable error reasons: one vocabulary in the domain, the proto and the gRPC mapping."""

from __future__ import annotations

from truerun.v1 import common_pb2

from coordinator.api.errors import CODES
from kernel.errors import ErrorReason


def test_every_reason_has_a_grpc_code() -> None:
    assert set(CODES) == set(ErrorReason)


def test_domain_reasons_match_the_proto_enum() -> None:
    proto = {
        name.removeprefix("ERROR_REASON_")
        for name in common_pb2.ErrorReason.keys()
        if name != "ERROR_REASON_UNSPECIFIED"
    }
    assert proto == {reason.value for reason in ErrorReason}
