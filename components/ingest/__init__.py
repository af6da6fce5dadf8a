"""Ingest: image folders, TFRecord files or volumes → a TFX `Examples` artifact, read with tf.data.

The TFX component lives in `component.py`; what it runs lives in modules of their own so they
can be tested without a pipeline: the data selection (`spans.py`, `listing.py` — the one
listing of a run's data — and `selection.py`), splitting, decoding and writing.
"""
