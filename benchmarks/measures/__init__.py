"""The measuring modules of `mptfx bench`: what imports TensorFlow and times something, each
called by a section's tasks (benchmarks/sections/, one module a section) in a worker
process (benchmarks/worker.py). A section and what it measures may share a name:
`sections/predict.py` plans and reports, `measures/predict.py` measures.
"""
