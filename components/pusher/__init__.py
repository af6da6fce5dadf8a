"""Atomic publication of blessed models in TF Serving's versioned layout."""
