"""Reproducible measurements behind `mptfx bench` (see benchmarks/runner.py)."""
