"""ScheduleService over gRPC."""
