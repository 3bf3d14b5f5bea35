"""Benchmarks; run them as modules (``python -m bench.transition``)."""
