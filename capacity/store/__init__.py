"""Capacity queries over the coordinator's tables, per database, inside claim transactions."""
