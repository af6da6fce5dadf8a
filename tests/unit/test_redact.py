"""redact(): no password of a tracking URI survives into what is stored or printed."""

import pytest

from components.redact import redact, redact_text, redact_tree, with_credentials


@pytest.mark.parametrize("uri, expected", [
    ("postgresql://alice:s3cret@db:5432/mlflow", "postgresql://alice@db:5432/mlflow"),
    ("postgresql+psycopg2://alice:p%40ss@db/mlflow", "postgresql+psycopg2://alice@db/mlflow"),
    ("https://bob:tok@mlflow.example.com/", "https://bob@mlflow.example.com/"),
    ("https://:onlypass@mlflow.example.com", "https://mlflow.example.com"),
    ("s3://bucket/x?X-Amz-Signature=abc&part=1", "s3://bucket/x?X-Amz-Signature=REDACTED&part=1"),
    ("sqlite:////abs/workspace/mlflow.db", "sqlite:////abs/workspace/mlflow.db"),
    ("http://127.0.0.1:5000", "http://127.0.0.1:5000"),
    ("just text", "just text"),
])
def test_redact_drops_passwords_and_secret_query_values(uri, expected):
    assert redact(uri) == expected


def test_redact_text_and_tree_find_uris_anywhere():
    message = "could not connect to postgresql://u:hunter2@h/db: refused"
    assert redact_text(message) == "could not connect to postgresql://u@h/db: refused"
    tree = {"tracking": {"uri": "mysql://u:hunter2@h/db"}, "list": ["x", "http://a:hunter2@b"]}
    assert "hunter2" not in str(redact_tree(tree))
    assert redact_tree(tree)["tracking"]["uri"] == "mysql://u@h/db"


def test_with_credentials_restores_the_password_from_the_environment_for_databases():
    environ = {"MLFLOW_TRACKING_PASSWORD": "p@ss", "MLFLOW_TRACKING_USERNAME": "svc"}
    assert with_credentials("postgresql://alice@db/mlflow", environ) == \
        "postgresql://alice:p%40ss@db/mlflow"
    assert with_credentials("postgresql://db/mlflow", environ) == "postgresql://svc:p%40ss@db/mlflow"
    # A URI with its own password, HTTP servers (MLflow reads the variables itself) and
    # local stores are left alone.
    for uri in ("postgresql://a:own@db/m", "https://mlflow.example.com", "sqlite:///x.db"):
        assert with_credentials(uri, environ) == uri


def test_a_server_uri_with_credentials_is_probed_without_them():
    import http.server
    import threading

    from components.tracking.store import check_reachable

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's naming)
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        # urllib refuses user:password in a URL; the probe must not report it unreachable.
        assert check_reachable(f"http://alice:s3cret@127.0.0.1:{server.server_port}", 5) is None
    finally:
        server.shutdown()
        server.server_close()
