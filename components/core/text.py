"""Text for people: the one line an error becomes on the terminal, in a report or a log.

    print(f"mptfx: error: {one_line(error)}")
    reason = one_line(error, limit=300, redact=True)   # no password, at most 300 characters
"""

from __future__ import annotations

import re

from components.redact import redact_text

# A TensorFlow error raised inside a graph: "Graph execution error:", the Python frames the
# node was defined at, then the cause, then "[[{{node ...}}]] [Op:...]".
_GRAPH_ERROR = "Graph execution error:"
_TF_NODE_NOISE = re.compile(r"\s*\[\[\{\{node [^}]*\}\}\]\].*$|\s*\[Op:[^\]]*\].*$")
# An eager op's error: "{{function_node __wrapped__DecodeImage_device_/...}} <the sentence>
# [Op:DecodeImage] name: "; a person wants only the sentence in between.
_TF_EAGER_NOISE = re.compile(r"^\{\{function_node [^}]*\}\}\s*|\s*\[Op:[^\]]*\](\s*name:.*)?$")


def one_line(error: BaseException | str, limit: int | None = None, redact: bool = False) -> str:
    """The first non-blank line of `error`'s message (a TensorFlow OpError's `message`,
    without its function and op names; for an error inside a graph, its cause rather than
    "Graph execution error:"), or the exception's type name when the message is empty.

    Args:
        error: an exception, or a message already taken out of one ("" stays "").
        limit: cut the line to this many characters.
        redact: remove URI passwords first (before the cut, which could split a URI).
    """
    message = getattr(error, "message", None) if isinstance(error, BaseException) else error
    text = str(message if isinstance(message, str) and message.strip() else error)
    if redact:
        text = redact_text(text)
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if lines and lines[0] == _GRAPH_ERROR:
        lines = _graph_error_cause(text) or lines
    line = _TF_EAGER_NOISE.sub("", lines[0]).strip() if lines else ""
    line = line or (type(error).__name__ if isinstance(error, BaseException) else "")
    return line[:limit] if limit else line


def _graph_error_cause(text: str) -> list[str]:
    """The cause of a graph execution error: its last unindented line that is not a Python
    frame or the node's name, without the node and op suffixes."""
    causes = [_TF_NODE_NOISE.sub("", line).strip() for line in text.splitlines()[1:]
              if line.strip() and not line.startswith((" ", "\t", "Detected at node"))]
    return [cause for cause in causes if cause][-1:]
