"""The leaf every layer shares: the first line of an error (`text`), the typed pipeline
configuration (`config`) and versioned publication with pruning (`publish`).

It imports nothing from the rest of mptfx but the Trainer's and the monitor's config schemas
(leaves themselves), so components/, models/ and pipelines/ may all import it
(tests/unit/test_import_layers.py).
"""
