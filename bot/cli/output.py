"""What commands print on a terminal: tables, times ago, clipped text."""

from __future__ import annotations

from datetime import datetime
from typing import TextIO


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
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(
            "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip(), file=out
        )


def clip(text: str, size: int) -> str:
    return text if len(text) <= size else text[: size - 1] + "…"


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
