"""The coordinator side of the runtime protocol: sessions, event ingest, start dispatch."""
