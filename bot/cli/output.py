"""What commands print on a terminal: tables, times ago, clipped text, and text made safe.

Anything an agent sent (a tool name, a prompt, a session, a reason) is printed through
`terminal`: a carriage return, a line feed, an ANSI escape, a bell, a backspace or a bidi
override (U+202E) in it would let it rewrite what an operator sees. It escapes them as log
lines are escaped (`bot.core.logs.escape`, one function for both): `\\n`, `\\u001b`, …
"""

from __future__ import annotations

from datetime import datetime
from typing import TextIO

from bot.core.logs import escape


def terminal(text: object) -> str:
    """`text` (any value, as `str`) with control, line-breaking and bidi characters escaped."""
    return escape(str(text))


def block(text: str) -> str:
    """Our own multi-line text (JSON with `indent`, whose strings hold no raw line break)
    with each line made safe (`terminal`); its line breaks kept. JSON stays JSON: the
    escapes are JSON's own."""
    return "\n".join(escape(line) for line in text.split("\n"))


def ago(moment: datetime | None, now: datetime) -> str:
    """`5s`, `12m`, `3h`, `2d` between `moment` and `now` (negative: in the future)."""
    if moment is None:
        return "-"
    seconds = (now - moment).total_seconds()
    size = abs(seconds)
    for unit, span in (("d", 86400), ("h", 3600), ("m", 60)):
        if size >= span:
            text = f"{int(size // span)}{unit}"
            break
    else:
        text = f"{int(size)}s"
    return text if seconds >= 0 else f"in {text}"


def table(rows: list[list[str]], out: TextIO) -> None:
    """`rows` as aligned columns, every cell made safe (`terminal`)."""
    rows = [[terminal(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(
            "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip(), file=out
        )


def clip(text: str, size: int) -> str:
    return text if len(text) <= size else text[: size - 1] + "…"


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
