"""LongTaskService and LongTaskAttemptService over gRPC."""
