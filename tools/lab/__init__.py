"""The developer lab: instruments for people changing mptfx, run from the checkout.

    python -m tools.lab [--quick] [--sections mfu,overhead,...] [--workspace DIR]

MFU against matmul ceilings, each counted pass timed alone and the profiler's top ops
(`mfu`, `time_breakdown`), what the Trainer adds to plain Keras fit (`overhead`), saved
model vs TF Lite (`publication`), the default pipeline's wall time (`pipeline`) and the
stock-TFX comparison (`stock_tfx`). It reuses `mptfx bench`'s runner, worker and host
section (benchmarks/); nothing under pipelines/, components/, models/ or benchmarks/
imports it, the wheel does not package it and the image does not copy it.
"""
