"""Schedules and triggers: run templates that fire exactly once per fire time, through the
coordinator's transition door (docs/automations.md)."""
