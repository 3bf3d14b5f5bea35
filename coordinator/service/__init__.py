"""The application layer of the coordinator: the one transition service and its queries."""
