"""Risk lines and the parsed view on Slack (`bot/slack/render/risk_lines.py`): on the message
beside the *Why:* and under the command, in the Details modal, the digest row and its Review
dialog, App Home and `/approvals` rows; masked; within Slack's limits, validated by
`slack_sdk.models`."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from slack_sdk.models.blocks import Block
from slack_sdk.models.views import View

from approvals._internal.policy import Policy
from approvals._internal.service import draft_request
from approvals._internal.shell.parse import MAX_COMMANDS
from approvals._internal.store.digests import Digest, Row
from approvals.models import ApprovalConfig, ApprovalEvent, ApprovalRequest, CallContext
from bot.slack import action_ids as ids
from bot.slack import home
from bot.slack.render import modals, risk_lines
from bot.slack.render import request_message as rm
from bot.slack.render.digest_message import digest_message

NOW = datetime(2026, 12, 1, tzinfo=UTC)
CWD = "/srv/app"
TOKEN = "ghp_" + "Zq8" * 12  # a GitHub token's shape (made up)


def bash(
    command: str | list[str], *, sensitivity: str = "low", reason: str | None = None
) -> ApprovalRequest:
    """The request `ApprovalService.create` would make (its risks found as it finds them)."""
    event = ApprovalEvent(
        kind="command",
        tool_name="Bash",
        arguments={"command": command},
        command=command if isinstance(command, str) else None,
        cwd=CWD,
        session_id="s-1",
        context=CallContext(reason=reason) if reason else None,
    )
    config = ApprovalConfig(sensitivity=sensitivity)  # type: ignore[arg-type]
    request, _ = draft_request(Policy(), event, config, now=NOW)
    return request


def valid_message(blocks: list[dict[str, Any]]) -> None:
    assert len(blocks) <= 50
    for block in blocks:
        Block.parse(block).validate_json()  # type: ignore[union-attr]
        assert len((block.get("text") or {}).get("text", "")) <= 3000


def valid_view(view: dict[str, Any]) -> None:
    View(**view).validate_json()
    assert len(view["blocks"]) <= 100
    for block in view["blocks"]:
        assert len((block.get("text") or {}).get("text", "")) <= 3000


def sections(blocks: list[dict[str, Any]]) -> list[str]:
    return [b["text"]["text"] for b in blocks if b["type"] == "section"]


def code_lines(text: str) -> list[str]:
    return [
        line for block in re.findall(r"```\n(.*?)\n```", text, re.S) for line in block.split("\n")
    ]


def index_of(texts: list[str], start: str) -> int:
    return next(i for i, t in enumerate(texts) if t.startswith(start))


def test_the_message_shows_each_risk_beside_the_reason_and_the_parsed_view_under_the_command(
) -> None:  # fmt: skip
    req = bash("CI=1 timeout 5 env rm -fr build", reason="Clean the build before packaging.")
    blocks = rm.request_message(req)["blocks"]
    valid_message(blocks)
    texts = sections(blocks)
    assert texts[0].startswith("*Why:* Clean the build")
    assert texts[1] == "⚠️ *recursive delete*: rm -r of build"
    command = index_of(texts, "*Command*")
    parsed = texts[command + 1]
    assert parsed.startswith("*As the shell runs it:*")
    assert code_lines(parsed) == ["rm -f -r build   (via timeout 5, env; with CI=1)"]
    assert command > 1
    # The Details button sits on the first of them (it decides nothing).
    (button,) = [b["accessory"] for b in blocks if "accessory" in b]
    assert button["action_id"] == ids.DETAILS and button["value"] == req.id


def test_a_command_that_reads_as_itself_shows_no_parsed_view_and_no_risk() -> None:
    blocks = rm.request_message(bash("ls -la src && git status"))["blocks"]
    texts = sections(blocks)
    assert not any(t.startswith("*As the shell runs it:*") or "⚠️" in t for t in texts)
    assert not [b for b in blocks if "accessory" in b]
    quoted = sections(rm.request_message(bash("ls '-la' src"))["blocks"])
    assert code_lines(quoted[index_of(quoted, "*As the shell runs it:*")]) == ["ls -l -a src"]


def test_an_unanalysable_command_says_so() -> None:
    texts = sections(rm.request_message(bash('eval "$DEPLOY"'))["blocks"])
    assert texts[0].startswith("⚠️ *could not be analysed*: eval")
    parsed = texts[index_of(texts, "*As the shell runs it:*")]
    assert code_lines(parsed) == [
        "eval '$DEPLOY'   (UNANALYSABLE: eval runs a string only known when it runs)"
    ]


def test_many_risks_and_commands_are_capped_on_the_message_and_whole_in_details() -> None:
    parts = [f"rm -rf dir{i}" for i in range(3)] + [f"git push -f origin b{i}" for i in range(3)]
    parts += [f"chmod 777 f{i}" for i in range(3)] + [f"nice echo {i}" for i in range(40)]
    req = bash(" && ".join(parts))
    assert len(req.risks) > risk_lines.INLINE_RISKS
    blocks = rm.request_message(req)["blocks"]
    valid_message(blocks)
    texts = sections(blocks)
    risks = texts[0].split("\n")
    assert len(risks) == risk_lines.INLINE_RISKS + 1
    assert risks[-1] == f"_… {len(req.risks) - risk_lines.INLINE_RISKS} more risks: *Details*_"
    parsed = texts[index_of(texts, "*As the shell runs it:*")]
    assert len(code_lines(parsed)) == risk_lines.INLINE_PARSED
    assert parsed.endswith(f"_… {len(parts) - risk_lines.INLINE_PARSED:,} more: *Details*_")
    # The Details modal: every risk line and every parsed line.
    view = modals.details_modal(req)
    valid_view(view)
    details = sections(view["blocks"])
    shown = [line for t in details for line in t.split("\n") if line.startswith("⚠️")]
    assert len(shown) == len(req.risks)
    assert len([ln for t in details for ln in code_lines(t)]) == len(parts)


def test_a_long_commands_parsed_view_is_left_to_details() -> None:
    """Past the shell model's parse cache, the message and App Home do not parse the command
    again each time they are drawn: the parsed view is in the Details modal."""
    command = "; ".join(f"timeout 5 make target-{i:05d}" for i in range(400))
    assert len(command) > risk_lines.INLINE_PARSE_CHARS
    req = bash(command)
    texts = sections(rm.request_message(req)["blocks"])
    note = texts[index_of(texts, "*As the shell runs it:*")]
    assert (
        note == f"*As the shell runs it:*\n_a command of {len(command):,} characters: in *Details*_"
    )
    details = sections(modals.details_modal(req)["blocks"])
    lines = [line for t in details for line in code_lines(t)]
    assert lines[0] == "make target-00000   (via timeout 5)"
    assert len(lines) == MAX_COMMANDS + 1 and lines[-1].startswith("UNANALYSABLE: more than")


def test_a_hostile_command_stays_within_slack_limits() -> None:
    command = "; ".join(f"rm -rf '{'&<>' * 200}{i}'" for i in range(300))
    req = bash(command)
    valid_message(rm.request_message(req)["blocks"])
    valid_view(modals.details_modal(req))
    valid_view(home.home_view(home.Lists([req], [])))


def test_the_digest_row_counts_the_risks_and_its_review_dialog_shows_them() -> None:
    req = bash("git push --force origin main")
    digest = Digest("dig_1", "C0OPS", (Row(req.id, 0),), 1, 0, None)
    message = digest_message(digest, {req.id: req}, now=NOW)
    valid_message(message["blocks"])
    (row,) = [t for t in sections(message["blocks"]) if t.startswith("*1.*")]
    assert "⚠️ 3 risks: force push, history rewrite, push to a protected branch" in row
    review = modals.review_modal(req)
    valid_view(review)
    assert any("⚠️ *force push*: git push --force" in t for t in sections(review["blocks"]))


def test_app_home_and_approvals_rows_show_the_first_risk_lines() -> None:
    parts = [f"rm -rf d{i}" for i in range(2)] + ["git push -f origin main"]
    req = bash(" && ".join(parts))
    view = home.home_view(home.Lists([req], []))
    valid_view(view)
    (row,) = [t for t in sections(view["blocks"]) if t.startswith("*Bash*")]
    lines = [line for line in row.split("\n") if "⚠️" in line or "more risks" in line]
    assert lines[: risk_lines.INLINE_HOME_RISKS] == [
        "⚠️ *recursive delete*: rm -r of d0",
        "⚠️ *recursive delete*: rm -r of d1",
        "⚠️ *force push*: git push --force",
    ]
    assert lines[-1] == f"_… {len(req.risks) - 3} more risks: *Details*_"
    buttons = [b["accessory"] for b in view["blocks"] if "accessory" in b]
    assert [b["action_id"] for b in buttons] == [ids.DETAILS]
    reply = home.slash_list([req])
    valid_message(reply["blocks"])
    assert any("⚠️ *recursive delete*" in t for t in sections(reply["blocks"]))


def test_a_secret_in_the_command_is_masked_in_the_parsed_view_and_the_risks() -> None:
    req = bash(f"CI=1 timeout 5 env GITHUB_TOKEN={TOKEN} gh pr list > /etc/motd")
    message = rm.request_message(req)
    blocks = message["blocks"]
    drawn = str(blocks)
    assert TOKEN not in drawn and TOKEN[4:20] not in drawn
    texts = sections(blocks)
    (parsed,) = code_lines(texts[index_of(texts, "*As the shell runs it:*")])
    assert parsed.startswith("gh pr list   (via timeout 5, env; with CI=1 GITHUB_TOKEN=••••••")
    assert TOKEN not in str(modals.details_modal(req))


def test_a_secret_spelled_out_by_the_parsed_view_is_not_shown() -> None:
    """`mysql -pHunter2Secret` splits into `-p -H -u -n …`: no rule finds that, so the line is
    left out."""
    req = bash("timeout 9 mysql -pHunter2Secret db")
    texts = sections(rm.request_message(req)["blocks"])
    parsed = texts[index_of(texts, "*As the shell runs it:*")]
    assert code_lines(parsed) == ["(not shown: it would show part of a secret)"]
    assert "-H -u -n" not in str(modals.details_modal(req))


def test_a_secret_request_shows_only_each_risks_title_and_no_parsed_view() -> None:
    req = bash("timeout 5 rm -rf /srv/customer-acme-data", sensitivity="secret")
    blocks = rm.request_message(req)["blocks"]
    valid_message(blocks)
    drawn = str(blocks) + str(modals.details_modal(req))
    assert "customer-acme" not in drawn
    assert "⚠️ *recursive delete* _(details hidden: a secret request)_" in drawn
    assert "As the shell runs it" not in drawn


def test_an_argv_command_gets_its_parsed_view_too() -> None:
    req = bash(["bash", "-lc", "rm -rf build && ls"])
    texts = sections(rm.request_message(req)["blocks"])
    assert texts[0] == "⚠️ *recursive delete*: rm -r of build"
    parsed = texts[index_of(texts, "*As the shell runs it:*")]
    assert code_lines(parsed) == ["rm -r -f build   (in bash -c)", "ls   (in bash -c)"]


def test_the_decided_message_keeps_the_lines() -> None:
    req = bash("timeout 5 rm -rf build").model_copy(update={"status": "denied"})
    blocks = rm.decided_message(req)["blocks"]
    valid_message(blocks)
    assert "⚠️ *recursive delete*: rm -r of build" in sections(blocks)
