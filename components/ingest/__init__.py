"""Ingest: image folders or TFRecord files → a TFX `Examples` artifact, read with tf.data.

The TFX component lives in `component.py`; the pure functions it calls (listing, splitting,
decoding, writing) live in their own modules so they can be tested without a pipeline.
"""
