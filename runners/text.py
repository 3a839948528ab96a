"""Text files as the input layer reads them (tables and traces): UTF-8, a BOM allowed, and no
character a text file does not hold, so that a binary blob is an error naming its line."""

from __future__ import annotations

import re
from pathlib import Path

_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def decode(path: Path, data: bytes, error: type[Exception], what: str) -> str:
    """``data`` as text, or ``error`` naming the line of the first byte that is not text."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise error(f"{path}: line {line}: not text (byte {data[e.start]:#04x}); {what}") from None
    control = _CONTROL.search(text)
    if control:
        line = text.count("\n", 0, control.start()) + 1
        raise error(f"{path}: line {line}: not text (character {ord(control.group()):#04x}); {what}")
    return text
