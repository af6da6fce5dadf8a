"""The InfraValidator: the blessed candidate loaded and queried as TF Serving serves it."""
