"""App Home and /approvals rendering (pure): Block Kit limits, unique block ids, the lines."""

from __future__ import annotations

import json

from approvals.models import ApprovalConfig, ApprovalEvent, ApprovalRequest, Decision
from bot.slack import action_ids as ids
from bot.slack.home import (
    MAX_HOME_BLOCKS,
    MAX_MESSAGE_BLOCKS,
    Lists,
    home_view,
    slash_help,
    slash_list,
)


def request(n: int, **config: object) -> ApprovalRequest:
    return ApprovalRequest(
        event=ApprovalEvent(tool_name="deploy", arguments={"n": n}),
        config=ApprovalConfig(**config),  # type: ignore[arg-type]
    )


def test_home_view_fits_block_kit_and_says_how_many_more() -> None:
    waiting = [request(n) for n in range(60)]
    recent = [
        request(100 + n).model_copy(
            update={"status": "approved", "decision": Decision.approve(by="U0ALICE")}
        )
        for n in range(10)
    ]
    view = home_view(Lists(waiting, recent))
    assert view["type"] == "home" and len(view["blocks"]) <= MAX_HOME_BLOCKS
    text = json.dumps(view)
    assert "Waiting for you (60)" in text and "more waiting" in text
    assert all(r.id in text for r in recent)
    block_ids = [b["block_id"] for b in view["blocks"] if "block_id" in b]
    assert len(block_ids) == len(set(block_ids)), "block ids are unique within a view"
    assert all(b.startswith(ids.ACTIONS_BLOCK + ":") for b in block_ids)


def test_choice_requests_keep_their_buttons_and_selects() -> None:
    many = request(1, kind="choice", options=tuple(f"o{i}" for i in range(8)))
    view = home_view(Lists([many], []))
    (actions,) = [b for b in view["blocks"] if b.get("type") == "actions"]
    assert actions["block_id"] == f"{ids.ACTIONS_BLOCK}:{many.id}"
    assert actions["elements"][0]["action_id"] == ids.CHOOSE_SELECT


def test_slash_replies_are_ephemeral_and_fit_a_message() -> None:
    reply = slash_list([request(n) for n in range(40)])
    assert reply["response_type"] == "ephemeral"
    assert len(reply["blocks"]) <= MAX_MESSAGE_BLOCKS and "more waiting" in json.dumps(reply)
    assert slash_list([])["text"] == "Nothing waits for you."
    assert "/approvals help" in slash_help()["text"]
    assert (
        home_view(Lists([], []))["blocks"][1]["elements"][0]["text"] == "Nothing waits for you. 🎉"
    )
