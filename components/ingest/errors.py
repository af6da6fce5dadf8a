"""The one exception type ingest raises for bad input data."""


class DataError(ValueError):
    """The input data cannot be ingested; the one-line message names the file or folder."""
