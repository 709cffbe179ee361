"""Slack id kinds: the one place that tells a user from a user group from a channel."""

from __future__ import annotations

import pytest

from approvals._internal.slack_ids import (
    CHANNEL_ID,
    REVIEWER_ID,
    USER_ID,
    is_user,
    is_user_group,
)


@pytest.mark.parametrize(
    ("text", "user", "group", "reviewer", "channel"),
    [
        ("U0ALICE", True, False, True, False),
        ("W0ENTERPRISE", True, False, True, False),
        ("S0ONCALL", False, True, True, False),
        ("C0APPROVALS", False, False, False, True),
        ("G0PRIVATE", False, False, False, True),
        ("D0DIRECT", False, False, False, True),
        ("u0alice", False, False, False, False),
        ("", False, False, False, False),
    ],
)
def test_kinds(text: str, user: bool, group: bool, reviewer: bool, channel: bool) -> None:
    assert is_user(text) is user
    assert bool(USER_ID.fullmatch(text)) is user
    assert is_user_group(text) is group
    assert bool(REVIEWER_ID.fullmatch(text)) is reviewer
    assert bool(CHANNEL_ID.fullmatch(text)) is channel
