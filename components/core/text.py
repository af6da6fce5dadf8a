"""Text for people: the one line an error becomes on the terminal, in a report or a log.

    print(f"mptfx: error: {one_line(error)}")
    reason = one_line(error, limit=300, redact=True)   # no password, at most 300 characters
"""

from __future__ import annotations

from components.redact import redact_text


def one_line(error: BaseException | str, limit: int | None = None, redact: bool = False) -> str:
    """The first non-blank line of `error`'s message (a TensorFlow OpError's `message`,
    without its op name), or the exception's type name when the message is empty.

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
    line = lines[0] if lines else (type(error).__name__ if isinstance(error, BaseException)
                                   else "")
    return line[:limit] if limit else line
