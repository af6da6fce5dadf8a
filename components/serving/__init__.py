"""Serving operations: models.config (what TF Serving serves), rollout verbs, MLflow pyfunc."""
