"""The gRPC edge of the capacity service."""
