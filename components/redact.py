"""Credentials out of every URI before it is stored or printed.

A tracking URI such as `postgresql://alice:s3cret@db/mlflow` or
`https://alice:s3cret@mlflow.example.com` would otherwise be copied into summary.json, MLflow
params and tags, logs and the terminal. `redact` drops the password (and query values such
as `?token=`) and keeps the rest, so the URI still names the server and stays usable with the
password supplied the standard way: MLFLOW_TRACKING_PASSWORD (MLflow's own variable for
HTTP servers; `with_credentials` applies it to database URIs too) or PGPASSWORD.

    redact("postgresql://alice:s3cret@db:5432/mlflow")  # 'postgresql://alice@db:5432/mlflow'

This module imports nothing from the project, so every layer can use it.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

# Query parameters that carry secrets in storage and database URIs (SAS tokens, S3
# presigned URLs, libpq's password=).
_SECRET_QUERY_KEYS = re.compile(r"pass|secret|token|sig|key|credential|auth", re.IGNORECASE)
_URI_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
REDACTED = "REDACTED"
ENV_USERNAME = "MLFLOW_TRACKING_USERNAME"
ENV_PASSWORD = "MLFLOW_TRACKING_PASSWORD"


def redact(uri: str) -> str:
    """`uri` without its password and secret query values; other text comes back unchanged."""
    if "://" not in uri:
        return uri
    try:
        parts = urllib.parse.urlsplit(uri)
    except ValueError:
        return uri
    netloc = parts.netloc
    secret_query = any(_SECRET_QUERY_KEYS.search(key) for key, _ in
                       urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
    if "@" not in netloc and not secret_query:
        return uri  # nothing to hide; unsplit would also reformat sqlite:////abs paths
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}@{hostport}" if user else hostport
    query = parts.query
    if query:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
        query = urllib.parse.urlencode(
            [(key, REDACTED if _SECRET_QUERY_KEYS.search(key) else value) for key, value in pairs],
            safe="/:")
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_text(text: str) -> str:
    """Every URI inside `text` (an error message, a log line) redacted."""
    return _URI_IN_TEXT.sub(lambda match: redact(match.group(0)), text)


def redact_tree(value: Any) -> Any:
    """A copy of a JSON-like tree (dicts, lists, strings) with every string redacted."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        return {key: redact_tree(inner) for key, inner in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_tree(inner) for inner in value]
    return value


def with_credentials(uri: str, environ: Mapping[str, str]) -> str:
    """A database URI with MLFLOW_TRACKING_USERNAME / PASSWORD filled in when it has none.

    MLflow itself reads these variables only for HTTP servers; for a database store the
    password must be in the URI SQLAlchemy receives, so it is added here, in memory only.
    """
    password = environ.get(ENV_PASSWORD, "")
    parts = urllib.parse.urlsplit(uri)
    scheme = parts.scheme.split("+")[0]
    if not password or scheme in ("http", "https", "file", "sqlite", "") or not parts.hostname:
        return uri
    userinfo, _, hostport = parts.netloc.rpartition("@")
    if ":" in userinfo:
        return uri  # the URI brings its own password
    user = userinfo or urllib.parse.quote(environ.get(ENV_USERNAME, ""), safe="")
    netloc = f"{user}:{urllib.parse.quote(password, safe='')}@{hostport or parts.netloc}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))
