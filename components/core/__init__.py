"""The base every package shares: the base of every config section and its one-line error
(`sections`), the first line of an error (`text`) and versioned publication with pruning
(`publish`).

It imports no other package of components/ (only the components/*.py leaves), so every
package of components/, models/ and pipelines/ may import it
(tests/unit/test_import_layers.py).
"""
