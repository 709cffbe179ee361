"""Durations on the command line: `90`, `30s`, `15m`, `2h`, `1d` → seconds (argparse types)."""

from __future__ import annotations

import argparse
import re

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> float:
    """`90`, `30s`, `15m`, `2h`, `1d` → seconds (not negative)."""
    try:
        seconds = float(text)
    except ValueError:
        found = _DURATION.fullmatch(text.strip())
        if not found:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a duration such as 30, 30s, 15m, 2h"
            ) from None
        seconds = float(found.group(1)) * _UNITS[found.group(2)]
    if not 0 <= seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration such as 30, 30s, 15m, 2h")
    return seconds


def positive_duration(text: str) -> float:
    seconds = duration(text)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be more than 0 seconds")
    return seconds
