"""Log output: a value from an agent cannot forge a log line; LOG_FORMAT=json is JSON lines."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from approvals.integrations.coding_agents import answer_hook
from approvals.models import ApprovalRequest
from bot.core import logs
from bot.core.settings import Settings
from tests.support.credentials import API_TOKEN

FORGED = (
    "\n2026-12-01 09:00:00,000 INFO bot.slack.listeners request decided id=apr_x status=approved"
)


@pytest.fixture
def output() -> Iterator[io.StringIO]:
    """The root logger configured as the entry point does, into a buffer (restored after)."""
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    stream = io.StringIO()
    yield stream
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in saved[0]:
        root.addHandler(handler)
    root.setLevel(saved[1])


def claude(tool: str) -> dict[str, Any]:
    return {
        "session_id": "s1",
        "hook_event_name": "PreToolUse",
        "tool_name": tool,
        "tool_input": {"command": "ls"},
        "tool_use_id": "toolu_1",
        "cwd": "/tmp",
        "transcript_path": "/tmp/t",
        "permission_mode": "default",
    }


async def failing_submit(event: Any) -> ApprovalRequest:
    raise RuntimeError("submit broke" + FORGED)


async def no_wait(request_id: str, timeout: float) -> ApprovalRequest:  # noqa: ASYNC109
    raise AssertionError("not reached")


@pytest.mark.parametrize("fmt", logs.FORMATS)
async def test_a_newline_in_tool_name_cannot_forge_a_line(fmt: str, output: io.StringIO) -> None:
    logs.configure("INFO", fmt, output)
    out = await answer_hook("claude-code", claude("Bash" + FORGED), failing_submit, no_wait,
                            timeout=5)  # fmt: skip
    assert out is not None and out["hookSpecificOutput"]["permissionDecision"] == "deny"
    lines = output.getvalue().splitlines()
    assert any("hook review failed" in line for line in lines)
    for line in lines:
        assert not line.startswith("2026-12-01 09:00:00,000"), f"forged line: {line!r}"
        if fmt == "json":
            json.loads(line)
        else:  # a record starts with its timestamp; a traceback's lines are indented
            assert line[:1].isdigit() or line.startswith("    "), line
    assert "\\n2026-12-01" in output.getvalue(), "the value is kept, escaped"


@settings(max_examples=200, deadline=None)
@given(value=st.text())
def test_property_one_record_is_one_line(value: str) -> None:
    record = logging.LogRecord(
        "x", logging.INFO, __file__, 1, "tool=%s id=%s", (value, value), None
    )
    text = logs.TextFormatter().format(record)
    assert len(text.splitlines()) == 1 and "\u2028" not in text and "\x1b" not in text
    line = logs.JsonFormatter().format(record)
    assert len(line.splitlines()) == 1
    assert json.loads(line)["message"] == logs.escape(record.getMessage())


def test_json_lines_carry_request_id_route_principal_and_event(output: io.StringIO) -> None:
    logs.configure("INFO", "json", output)
    log = logging.getLogger("bot.test")
    log.info("click id=apr_1 user=U1 outcome=approve route=ops principal=ci-bot")
    log.warning("plain message")
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed id=apr_2")
    records = [json.loads(line) for line in output.getvalue().splitlines()]
    assert len(records) == 3
    first = records[0]
    assert (first["event"], first["request_id"], first["route"], first["principal"]) == (
        "click",
        "apr_1",
        "ops",
        "ci-bot",
    )
    assert first["user"] == "U1" and first["level"] == "INFO" and first["logger"] == "bot.test"
    assert records[1]["event"] == "plain message" and records[1]["request_id"] is None
    assert records[2]["request_id"] == "apr_2" and "ValueError: boom" in records[2]["exception"]


def test_log_format_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOG_FORMAT", "JSON")
    assert Settings().log_format == "json"
    monkeypatch.setenv("LOG_FORMAT", "xml")
    with pytest.raises(ValueError, match="text, json"):
        Settings()
    with pytest.raises(ValueError):
        logs.configure("INFO", "xml")


async def test_a_requests_lifecycle_lines_carry_id_route_and_principal(
    make_bot: Any, slack: Any, reviewer: Any, http: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """LOG_FORMAT=json on a real flow: created, posted and the deciding click name all
    three."""
    from bot.http.principals import derived_name
    from bot.slack import action_ids as ids
    from tests.support.e2e import posted_message

    caplog.set_level(logging.INFO)
    bot = await make_bot()
    async with http.post(
        f"http://127.0.0.1:{bot.port}/v1/approvals",
        json={"tool_name": "deploy", "arguments": {}},
        headers={"Authorization": f"Bearer {API_TOKEN}"},
    ) as resp:
        rid = (await resp.json())["id"]
    await slack.wait_for("chat.postMessage", 1)
    channel, message = posted_message(slack, rid)
    await reviewer("U0ALICE").click(bot, message, channel, ids.APPROVE)
    await bot.ctx.waiter.wait(rid, 10)
    lines = [json.loads(logs.JsonFormatter().format(r)) for r in caplog.records]
    mine = {line["event"]: line for line in lines if line["request_id"] == rid}
    for event in ("request created", "posted", "click"):
        assert event in mine, sorted(mine)
        assert mine[event]["route"] == "default", mine[event]
        assert mine[event]["principal"] == derived_name(API_TOKEN), mine[event]


@pytest.mark.parametrize("fmt", logs.FORMATS)
async def test_a_token_glued_into_a_tool_name_is_masked_in_the_log(
    fmt: str, output: io.StringIO
) -> None:
    """`deploy_ghp_…` as a tool name: the records that name a tool show it masked."""
    from tests.support.secret_corpus import FAKES, leaked_piece

    glued = next(f for f in FAKES if f.text.startswith("deploy_ghp_"))
    logs.configure("INFO", fmt, output)
    out = await answer_hook("claude-code", claude(glued.text), failing_submit, no_wait,
                            timeout=5)  # fmt: skip
    assert out is not None and out["hookSpecificOutput"]["permissionDecision"] == "deny"
    logging.getLogger("approvals.gate").info(
        "gated call not run tool=%s outcome=%s", glued.text, "x"
    )
    text = output.getvalue()
    assert "hook review failed" in text and "gated call not run tool=deploy_••••••" in text
    assert leaked_piece(text, glued.secret) is None, text
