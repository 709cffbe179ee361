"""Benchmarks that print figures; run from the repository root as `python -m bench.<script>`."""
