"""Slack id kinds, told apart in this one place: users (`U…`, `W…`), user groups (`S…`) and
conversations (`C…`, `G…`, `D…`). Plain strings in, no Slack SDK.

The kind is the first letter; the patterns here accept a kind letter and then upper-case
letters and digits. Callers with stricter rules (settings want at least three characters,
message rendering at least one digit) build them from the same letters.
"""

from __future__ import annotations

import re

USER_LETTERS = "UW"
GROUP_LETTER = "S"
REVIEWER_LETTERS = USER_LETTERS + GROUP_LETTER
CHANNEL_LETTERS = "CGD"

USER_ID = re.compile(rf"[{USER_LETTERS}][A-Z0-9]+")
REVIEWER_ID = re.compile(rf"[{REVIEWER_LETTERS}][A-Z0-9]+")
CHANNEL_ID = re.compile(rf"[{CHANNEL_LETTERS}][A-Z0-9]+")


def is_user_group(reviewer: str) -> bool:
    """A user-group id (`S…`), whose members are looked up, rather than one person."""
    return reviewer[:1] == GROUP_LETTER


def is_user(reviewer: str) -> bool:
    """A user id (`U…`, `W…`)."""
    return reviewer[:1] in tuple(USER_LETTERS)
