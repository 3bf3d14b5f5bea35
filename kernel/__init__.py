"""The ground floor every truerun service stands on: ids and tokens, the clock, settings,
TLS files, telemetry, the database schema and its migrations, the error vocabulary every API
carries, and the capacity observation both the coordinator and the capacity service trade
in. It imports nothing of truerun above it (docs/architecture.md)."""
