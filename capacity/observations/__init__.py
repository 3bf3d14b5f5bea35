"""Capacity observations: what each runtime instance last said about its capacity."""

from __future__ import annotations

from capacity.observations.base import ObservationStore
from capacity.observations.memory import MemoryObservationStore
from capacity.observations.redis_store import RedisObservationStore, observation_key
from kernel.observation import (
    CorruptObservation,
    Observation,
    ObservationRejected,
    Route,
    decode,
    encode,
    is_fresh,
    validate,
)

__all__ = [
    "CorruptObservation",
    "MemoryObservationStore",
    "Observation",
    "ObservationRejected",
    "ObservationStore",
    "RedisObservationStore",
    "Route",
    "decode",
    "encode",
    "is_fresh",
    "observation_key",
    "validate",
]
