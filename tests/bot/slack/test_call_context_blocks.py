"""A call's context on Slack (`bot/slack/render/call_context.py`): *Why:* under the title, the
diffs with their counts and risk hints, the Details modal; within Slack's limits, validated by
`slack_sdk.models` (blocks and views)."""

from __future__ import annotations

import json
import re
from typing import Any

from slack_sdk.models.blocks import Block
from slack_sdk.models.views import View

from approvals._internal.file_changes import Original, with_changes
from approvals._internal.risk_hints import request_risks
from approvals.models import (
    ApprovalConfig,
    ApprovalEvent,
    ApprovalRequest,
    CallContext,
    Decision,
)
from bot.slack import action_ids as ids
from bot.slack import home
from bot.slack.render import call_context, modals
from bot.slack.render import request_message as rm

CWD = "/srv/app"
PATH = "/srv/app/src/client.py"
ORIGINAL = "import os\nimport time\n\nMAX_RETRIES = 3\nBACKOFF_SECONDS = 0.5\n"
REASON = (
    "The limit is hard-coded as `MAX_RETRIES = 3`. I'll read it from `CLIENT_MAX_RETRIES`.\n"
    "That keeps the default safe.\nCI sets it to 5.\nA fourth line that is collapsed."
)


def request(
    tool: str = "Edit",
    arguments: dict[str, Any] | None = None,
    *,
    reason: str | None = REASON,
    asked: str | None = "Make the retry limit configurable",
    original: str | None = ORIGINAL,
    sensitivity: str = "low",
    path: str = PATH,
) -> ApprovalRequest:
    arguments = arguments or {
        "file_path": path,
        "old_string": "MAX_RETRIES = 3",
        "new_string": 'MAX_RETRIES = int(os.environ.get("CLIENT_MAX_RETRIES", "5"))',
    }
    event = ApprovalEvent(
        kind="file",
        tool_name=tool,
        arguments=arguments,
        path=path,
        cwd=CWD,
        agent="claude-code",
        context=CallContext(reason=reason, user_request=asked) if reason or asked else None,
    )
    originals = {path: Original(True, original)} if original is not None else None
    config = ApprovalConfig(sensitivity=sensitivity)  # type: ignore[arg-type]
    event = with_changes(event, originals)
    return ApprovalRequest(
        event=event, config=config, channel="C0OPS", risks=request_risks(event)
    )  # the risks as `draft_request` finds them


def valid_message(blocks: list[dict[str, Any]]) -> None:
    assert len(blocks) <= 50
    for block in blocks:
        Block.parse(block).validate_json()  # type: ignore[union-attr]
        text = (block.get("text") or {}).get("text", "")
        assert len(text) <= 3000


def valid_view(view: dict[str, Any]) -> None:
    View(**view).validate_json()
    assert len(view["blocks"]) <= 100
    for block in view["blocks"]:
        assert len((block.get("text") or {}).get("text", "")) <= 3000


def sections(blocks: list[dict[str, Any]]) -> list[str]:
    return [b["text"]["text"] for b in blocks if b["type"] == "section"]


def details_buttons(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found = [b["accessory"] for b in blocks if "accessory" in b]
    return [b for b in found if b["action_id"] == ids.DETAILS]


def code_lines(text: str) -> list[str]:
    return [
        line for block in re.findall(r"```\n(.*?)\n```", text, re.S) for line in block.split("\n")
    ]


def test_why_sits_under_the_title_collapsed_with_a_details_button() -> None:
    req = request()
    blocks = rm.request_message(req)["blocks"]
    valid_message(blocks)
    assert blocks[0]["type"] == "header"
    why = blocks[1]
    assert why["text"]["text"].startswith("*Why:* The limit is hard-coded")
    assert "A fourth line" not in why["text"]["text"]  # collapsed to three lines
    assert "*The user asked:*\n> Make the retry limit configurable" in why["text"]["text"]
    (button,) = details_buttons(blocks)
    assert button["value"] == req.id  # the id only: it decides nothing
    assert ids.DETAILS not in ids.BUTTON_ACTIONS


def test_the_edit_shows_a_real_diff_with_counts_relative_path_and_no_risk() -> None:
    blocks = rm.request_message(request())["blocks"]
    (change,) = [t for t in sections(blocks) if t.startswith("*Edit*")]
    assert change.startswith("*Edit* `src/client.py` (+1 \u22121)")
    assert code_lines(change) == [
        "@@ -1,5 +1,5 @@",
        " import os",
        " import time",
        " ",
        "-MAX_RETRIES = 3",
        '+MAX_RETRIES = int(os.environ.get("CLIENT_MAX_RETRIES", "5"))',
        " BACKOFF_SECONDS = 0.5",
    ]
    assert "⚠️" not in change


def test_writes_outside_the_cwd_and_to_sensitive_paths_get_a_risk_hint() -> None:
    """File write hints: one line each, beside the *Why:* (the request's own risks, as the agent
    reads them), not repeated on the file's head."""
    req = request("Write", {"file_path": "/etc/cron.d/backup", "content": "* * * * * root x\n"},
                  original=None, path="/etc/cron.d/backup")  # fmt: skip
    blocks = rm.request_message(req)["blocks"]
    valid_message(blocks)
    texts = sections(blocks)
    assert texts[0].startswith("*Why:*")
    assert texts[1].split("\n") == [
        "⚠️ *writes outside the working directory*: /etc/cron.d/backup",
        "⚠️ *writes a sensitive path*: writes a system configuration file under /etc: "
        "/etc/cron.d/backup",
    ]
    (change,) = [t for t in texts if t.startswith("*Write*")]
    assert "new file, 1 line" in change and "⚠️" not in change


def test_no_context_no_why_no_button() -> None:
    req = request("deploy", {"env": "prod"}, reason=None, asked=None)
    blocks = rm.request_message(req)["blocks"]
    assert not details_buttons(blocks)
    assert not any("*Why:*" in t for t in sections(blocks))


def test_text_from_the_agent_is_escaped() -> None:
    req = request(reason="Ping <!channel> & <@U0BOSS> please")
    why = rm.request_message(req)["blocks"][1]["text"]["text"]
    assert "<!channel>" not in why and "&lt;!channel&gt; &amp; &lt;@U0BOSS&gt;" in why


def test_a_2000_line_diff_fits_the_message_and_the_modal_whole_lines_only() -> None:
    old = "\n".join(f"line {i} <a & b>" for i in range(2000))
    new = "\n".join(f"line {i} <a & b>" if i % 10 else f"changed {i} ```" for i in range(2000))
    req = request("Write", {"file_path": PATH, "content": new}, original=old)
    assert req.event.context is not None
    (change,) = req.event.context.files
    assert (change.added, change.removed) == (200, 200)
    message = rm.request_message(req)
    valid_message(message["blocks"])
    shown = next(t for t in sections(message["blocks"]) if t.startswith("*Write*"))
    inline = code_lines(shown)
    assert 0 < len(inline) <= call_context.INLINE_DIFF_LINES
    assert "more diff lines: *Details*" in shown
    every = set(rm.escape(x.replace("```", "`\u200b`\u200b`")) for x in change.diff.split("\n"))
    assert set(inline) <= every  # whole lines, never cut
    view = modals.details_modal(req)
    valid_view(view)
    in_modal = [line for t in sections(view["blocks"]) for line in code_lines(t)]
    assert in_modal == [
        rm.escape(x.replace("```", "`\u200b`\u200b`")) for x in change.diff.split("\n")
    ]


def test_a_diff_bigger_than_a_modal_says_what_it_left_out() -> None:
    """Past what is kept with the request (`MAX_DIFF_TEXT`), or past the modal's 100 blocks
    (here: lines that escaping makes five times longer), the modal ends saying how many diff
    lines it does not show."""
    kept_less = "\n".join(f"{i:05d} " + "z" * 70 for i in range(3000))
    more_blocks = "\n".join("&" * 40 for _ in range(4000))
    for content in (kept_less, more_blocks):
        req = request("Write", {"file_path": PATH, "content": content}, original=None)
        view = modals.details_modal(req)
        valid_view(view)
        note = view["blocks"][-1]
        assert note["type"] == "context"
        assert "more diff lines not shown" in note["elements"][0]["text"]
    assert len(view["blocks"]) == 100


def test_many_files_three_inline_the_rest_counted() -> None:
    patch = "*** Begin Patch\n" + "".join(f"*** Add File: f{i}.txt\n+{i}\n" for i in range(25))
    req = request("apply_patch", {"command": patch + "*** End Patch"}, original=None, path="f0.txt")
    blocks = rm.request_message(req)["blocks"]
    valid_message(blocks)
    assert len([t for t in sections(blocks) if t.startswith("*Create*")]) == 3
    notes = [json.dumps(b, ensure_ascii=False) for b in blocks if b["type"] == "context"]
    assert any("… and 22 more files" in n for n in notes)
    valid_view(modals.details_modal(req))


def test_a_secret_request_shows_counts_never_lines() -> None:
    req = request(sensitivity="secret")
    text = json.dumps(rm.request_message(req)["blocks"]) + json.dumps(modals.details_modal(req))
    assert 'CLIENT_MAX_RETRIES\\", \\"5\\")' not in text
    assert "(+1 \\u22121)" in text and "lines hidden: a secret request" in text


def test_decided_and_escalated_messages_keep_the_context() -> None:
    req = request()
    decided = req.model_copy(update={"status": "denied", "decision": Decision.deny("no", by="U1")})
    for message in (rm.decided_message(decided), rm.escalated_note(req, "C0SEC")):
        valid_message(message["blocks"])
        assert message["blocks"][1]["text"]["text"].startswith("*Why:*")
        assert details_buttons(message["blocks"])


def test_home_and_slash_show_the_reason_the_files_and_details() -> None:
    req = request()
    view = home.home_view(home.Lists([req], []))
    valid_view(view)
    row = view["blocks"][1]
    assert "*Why:* The limit is hard-coded" in row["text"]["text"]
    assert "✏️ `src/client.py` (+1 \u22121)" in row["text"]["text"]
    assert row["accessory"]["action_id"] == ids.DETAILS
    listed = home.slash_list([req])
    valid_message(listed["blocks"])
    assert details_buttons(listed["blocks"])
    one = home.slash_one(req)
    valid_message(one["blocks"])
    assert details_buttons(one["blocks"])


def test_the_review_modal_of_a_digest_row_shows_it_too() -> None:
    view = modals.review_modal(request())
    valid_view(view)
    assert details_buttons(view["blocks"])  # pushed on top of the review modal


def test_the_details_modal_has_the_whole_reason_and_request() -> None:
    long_reason = "\n".join(f"step {i}: because" for i in range(60))
    view = modals.details_modal(request(reason=long_reason, asked="a " * 900))
    valid_view(view)
    why = view["blocks"][1]["text"]["text"]
    assert "step 59: because" in why and why.count("a ") >= 800
    assert view["callback_id"] == ids.DETAILS_MODAL and "submit" not in view
