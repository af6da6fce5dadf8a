"""Stops the pipeline when ExampleValidator found anomalies, before any training."""
