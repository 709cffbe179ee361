"""Agent hooks end to end: Claude Code and Codex wait on a real bot until a signed Slack click."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

from approvals.integrations.coding_agents import time_budget
from bot.core.app import Bot
from bot.slack import action_ids as ids
from tests.support import eventually, transcripts
from tests.support.credentials import API_TOKEN
from tests.support.e2e import BotFactory, Reviewer, opened_view
from tests.support.secret_corpus import FAKES
from tests.support.slack_emulator import SlackEmulator

REPO = Path(__file__).resolve().parents[2]


def claude_payload(event: str = "PreToolUse", **extra: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "session_id": "sess-e2e",
        "transcript_path": "/tmp/transcript.jsonl",
        "cwd": "/srv/app",
        "hook_event_name": event,
        "tool_name": "Bash",
        "tool_input": {"command": "kubectl rollout restart deploy/web"},
        "permission_mode": "default",
    }
    if event == "PreToolUse":
        payload["tool_use_id"] = f"toolu_{time.monotonic_ns()}"
    payload.update(extra)
    return payload


#: How late a loaded machine may schedule a process past what the hook controls.
SCHEDULING_GRACE = 3.0


def answered_in_time(elapsed: float, reason: str, timeout: float = 5.0) -> None:
    """A command hook's budget runs from its own spawn, so its start-up counts against it
    (the reason names the budget: less than `time_budget(timeout)`), and it answered before
    the agent's `timeout` — give or take what a loaded machine adds to any process."""
    found = re.search(r"within ([0-9.]+) s", reason)
    assert found, reason
    assert float(found.group(1)) < time_budget(timeout), "counted from the spawn"
    limit = timeout + SCHEDULING_GRACE
    assert elapsed < limit, f"answered after {elapsed:.1f}s, past the hook's {timeout:g} s timeout"


async def click_when_posted(
    slack: SlackEmulator, bot: Bot, who: Reviewer, action: str, **submit: str
) -> str:
    """Wait for the bot's post, click `action` on it (signed); for Deny, submit the modal."""
    await slack.wait_for("chat.postMessage", 1, timeout=10)
    (channel, ts), message = next(iter(slack.messages.items()))
    assert await who.click(bot, message, channel, action) == 200
    if action == ids.DENY:
        view = await opened_view(slack)
        values = {ids.REASON_BLOCK: {ids.REASON_ACTION: submit.get("reason", "")}}
        assert await who.submit(bot, view, values) == 200
    return ts


async def test_claude_code_http_hook_waits_for_a_signed_click(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any, http: aiohttp.ClientSession
) -> None:
    bot = await make_bot()
    url = f"http://127.0.0.1:{bot.port}/hooks/claude-code?timeout=30"
    headers = {"Authorization": f"Bearer {API_TOKEN}"}

    async def hook() -> tuple[int, dict[str, Any], float]:
        start = time.monotonic()
        async with http.post(url, json=claude_payload(), headers=headers) as resp:
            return resp.status, await resp.json(), time.monotonic() - start

    call = asyncio.create_task(hook())
    await click_when_posted(slack, bot, reviewer("U0ALICE"), ids.APPROVE)
    status, output, _ = await asyncio.wait_for(call, 10)
    assert status == 200
    assert output["hookSpecificOutput"]["hookEventName"] == "PreToolUse"
    assert output["hookSpecificOutput"]["permissionDecision"] == "allow"
    # The Slack message showed the command the agent is about to run.
    assert "kubectl rollout restart" in json.dumps(next(iter(slack.messages.values())))


async def test_claude_code_http_hook_denial_carries_the_reason(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any, http: aiohttp.ClientSession
) -> None:
    bot = await make_bot()
    url = f"http://127.0.0.1:{bot.port}/hooks/claude-code?timeout=30"
    call = asyncio.create_task(
        http.post(url, json=claude_payload(), headers={"Authorization": f"Bearer {API_TOKEN}"})
    )
    await click_when_posted(slack, bot, reviewer("U0BOB"), ids.DENY, reason="freeze until 5pm")
    resp = await asyncio.wait_for(call, 10)
    output = await resp.json()
    resp.release()
    decision = output["hookSpecificOutput"]
    assert decision["permissionDecision"] == "deny"
    assert "freeze until 5pm" in decision["permissionDecisionReason"]


async def run_command_hook(
    bot: Bot, dialect: str, payload: dict[str, Any], *args: str, prefix: tuple[str, ...] = ()
) -> tuple[int, str, str]:
    """`approval-bot hook DIALECT` as the agent runs it: a process, JSON on stdin (`prefix`:
    a command it runs under, such as `setpriv`)."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "APPROVALS_", "REDIS"))
    }
    env.update(APPROVALS_URL=f"http://127.0.0.1:{bot.port}", APPROVALS_TOKEN=API_TOKEN)
    proc = await asyncio.create_subprocess_exec(
        *prefix, sys.executable, "-m", "bot.cli.main", "hook", dialect, *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=env, cwd=REPO,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(json.dumps(payload).encode()), 30)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_claude_code_command_hook_waits_for_a_signed_click(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    bot = await make_bot()
    call = asyncio.create_task(
        run_command_hook(bot, "claude-code", claude_payload(), "--timeout", "30")
    )
    await click_when_posted(slack, bot, reviewer("U0ALICE"), ids.APPROVE)
    code, out, err = await call
    assert code == 0, err
    output = json.loads(out)
    assert output["hookSpecificOutput"]["permissionDecision"] == "allow"


async def test_claude_code_permission_request_denied_in_slack(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    bot = await make_bot()
    payload = claude_payload("PermissionRequest")
    call = asyncio.create_task(run_command_hook(bot, "claude-code", payload, "--timeout", "30"))
    await click_when_posted(slack, bot, reviewer("U0BOB"), ids.DENY, reason="use staging")
    code, out, err = await call
    assert code == 0, err
    decision = json.loads(out)["hookSpecificOutput"]
    assert decision["hookEventName"] == "PermissionRequest"
    assert decision["decision"]["behavior"] == "deny"
    assert "use staging" in decision["decision"]["message"]


async def test_command_hook_timeout_answers_before_the_agent_gives_up(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    bot = await make_bot()
    start = time.monotonic()
    code, out, err = await run_command_hook(
        bot, "claude-code", claude_payload(), "--timeout", "5", "--on-timeout", "deny"
    )
    elapsed = time.monotonic() - start
    assert code == 0, err
    decision = json.loads(out)["hookSpecificOutput"]
    assert decision["permissionDecision"] == "deny"
    assert "no approval decision within" in decision["permissionDecisionReason"].lower()
    answered_in_time(elapsed, decision["permissionDecisionReason"])
    # The withdrawn request's message says so: no buttons left for a late click.
    await slack.wait_for("chat.update", 1, timeout=5)


async def test_codex_pre_tool_use_runs_on_approve_and_is_blocked_on_deny(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    bot = await make_bot()
    payload = {
        "session_id": "codex-1",
        "cwd": "/srv/app",
        "hook_event_name": "PreToolUse",
        "tool_name": "shell",
        "tool_input": {"command": ["rm", "-rf", "build/"]},
        "tool_use_id": "call_1",
    }
    call = asyncio.create_task(run_command_hook(bot, "codex", payload, "--timeout", "30"))
    await click_when_posted(slack, bot, reviewer("U0ALICE"), ids.APPROVE)
    code, out, err = await call
    assert code == 0, err
    assert out.strip() == "", "no output lets the call run"

    slack.reset()
    denied = {**payload, "tool_use_id": "call_2"}
    call = asyncio.create_task(run_command_hook(bot, "codex", denied, "--timeout", "30"))
    await click_when_posted(slack, bot, reviewer("U0ALICE"), ids.DENY, reason="not build/")
    code, out, err = await call
    assert code == 0, err
    decision = json.loads(out)["hookSpecificOutput"]
    assert decision["permissionDecision"] == "deny"
    assert "not build/" in decision["permissionDecisionReason"]


async def test_command_hook_answers_in_time_when_the_bot_does_not() -> None:
    """A bot that accepts the connection and never answers (a hung process, a black-holed
    proxy): the hook still denies before the agent's timeout, which would let the call run."""
    held: list[asyncio.StreamWriter] = []

    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        await reader.read()  # read until the client gives up; never reply

    server = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "APPROVALS_", "REDIS"))
    }
    env.update(APPROVALS_URL=f"http://127.0.0.1:{port}", APPROVALS_TOKEN=API_TOKEN)
    start = time.monotonic()
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot.cli.main", "hook", "claude-code", "--timeout", "5",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=env, cwd=REPO,
        )  # fmt: skip
        out, err = await asyncio.wait_for(
            proc.communicate(json.dumps(claude_payload()).encode()), 40
        )
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, err.decode()
    decision = json.loads(out)["hookSpecificOutput"]
    assert decision["permissionDecision"] == "deny"
    answered_in_time(elapsed, decision["permissionDecisionReason"])


async def test_codex_hook_timeout_denies_before_the_agent_gives_up(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    bot = await make_bot()
    payload = {
        "session_id": "codex-t",
        "cwd": "/srv/app",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "terraform destroy"},
        "tool_use_id": "call_timeout",
    }
    start = time.monotonic()
    code, out, err = await run_command_hook(bot, "codex", payload, "--timeout", "5")
    elapsed = time.monotonic() - start
    assert code == 0, err
    decision = json.loads(out)["hookSpecificOutput"]
    assert decision["permissionDecision"] == "deny" and decision["permissionDecisionReason"]
    answered_in_time(elapsed, decision["permissionDecisionReason"])


async def test_a_hook_whose_caller_went_away_withdraws_its_request(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    """The agent stopped waiting (its hook process killed, the user interrupted): the bot
    notices the closed connection within seconds, not at the hook's timeout, and withdraws
    the request, so its Slack message stops offering an Approve nobody waits for."""
    bot = await make_bot()
    assert bot.ctx is not None
    ctx = bot.ctx
    body = json.dumps(claude_payload()).encode()
    _reader, writer = await asyncio.open_connection("127.0.0.1", bot.port)
    writer.write(
        b"POST /hooks/claude-code?timeout=60 HTTP/1.1\r\nHost: x\r\n"
        + f"Authorization: Bearer {API_TOKEN}\r\nContent-Type: application/json\r\n".encode()
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    await writer.drain()
    await slack.wait_for("chat.postMessage", 1, timeout=10)
    await eventually(lambda: ctx.waiter.waiting == 1, what="the hook waiting")
    (pending,) = await ctx.store.list_pending()
    writer.close()
    await writer.wait_closed()
    # Within the Waiter's look at closed connections (every 2 s), far before the 60 s.
    await eventually(lambda: ctx.waiter.waiting == 0, within=15, what="the wait ended")

    async def withdrawn() -> Any:
        request = await ctx.store.get(pending.id)
        return request if request.status == "cancelled" else None

    request = await eventually(withdrawn, within=10, what="the request withdrawn")
    assert request.decision is not None
    assert "hook was stopped" in (request.decision.reason or "")
    await slack.wait_for("chat.update", 1, timeout=10)
    blocks = next(iter(slack.messages.values())).get("blocks", [])
    assert blocks and not [b for b in blocks if b.get("type") == "actions"]  # no buttons left


# -- the agent's reason and the diff --------------------------------------------------


def edit_call(project: Path, transcript: Path) -> dict[str, Any]:
    """Claude Code's PreToolUse for the `Edit` the fixture transcript ends with."""
    return claude_payload(
        tool_name="Edit",
        tool_input={
            "file_path": str(project / "src" / "client.py"),
            "old_string": "MAX_RETRIES = 3",
            "new_string": 'MAX_RETRIES = int(os.environ.get("CLIENT_MAX_RETRIES", "5"))',
        },
        cwd=str(project),
        transcript_path=str(transcript),
        tool_use_id=transcripts.CLAUDE_EDIT_CALL,
    )


def project_with_client(tmp_path: Path) -> Path:
    project = tmp_path / "app"
    (project / "src").mkdir(parents=True)
    (project / "src" / "client.py").write_text(
        "import os\nimport time\n\nMAX_RETRIES = 3\nBACKOFF_SECONDS = 0.5\n"
    )
    return project


async def test_claude_code_edit_shows_the_reason_and_the_diff_in_slack(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any, tmp_path: Path
) -> None:
    """The command hook reads the transcript (the agent's words before this Edit, the user's
    request with a token pasted in it) and the file, and the posted message shows *Why:*,
    the request with the token masked, and the real diff with line numbers."""
    bot = await make_bot()
    token = next(f.secret for f in FAKES if f.rule == "github_token")
    project = project_with_client(tmp_path)
    transcript = transcripts.write(tmp_path, transcripts.CLAUDE_EDIT, token)
    call = asyncio.create_task(
        run_command_hook(bot, "claude-code", edit_call(project, transcript), "--timeout", "30")
    )
    await slack.wait_for("chat.postMessage", 1, timeout=10)
    (channel, _ts), message = next(iter(slack.messages.items()))
    shown = "\n".join(b["text"]["text"] for b in message["blocks"] if b["type"] == "section")
    assert message["blocks"][1]["text"]["text"].startswith(
        "*Why:* The limit is hard-coded as `MAX_RETRIES = 3`."
    )
    assert "*The user asked:*\n> The retry test in tests/test_client.py is flaky" in shown
    assert token not in shown and token[:12] not in shown
    assert "*Edit* `src/client.py` (+1 \u22121)" in shown
    assert "@@ -1,5 +1,5 @@\n import os\n import time\n \n-MAX_RETRIES = 3\n+MAX_RETRIES" in shown
    # Details opens the whole of it; it decides nothing.
    alice = reviewer("U0ALICE")
    assert await alice.click(bot, message, channel, ids.DETAILS) == 200
    view = await opened_view(slack)
    assert view["callback_id"] == ids.DETAILS_MODAL
    assert "against the file as the agent's hook read it" in json.dumps(view, ensure_ascii=False)
    assert call.done() is False
    assert await alice.click(bot, message, channel, ids.APPROVE) == 200
    code, out, err = await call
    assert code == 0, err
    assert json.loads(out)["hookSpecificOutput"]["permissionDecision"] == "allow"


async def test_a_transcript_the_agents_user_cannot_read_still_gets_an_answer(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any, tmp_path: Path
) -> None:
    """The transcript shut to the agent's user (as root: without the capabilities that
    override file modes): the hook says so on stderr and the call is reviewed without a
    reason; the diff still comes from the file it can read."""
    bot = await make_bot()
    project = project_with_client(tmp_path)
    transcript = transcripts.write(tmp_path, transcripts.CLAUDE_EDIT)
    transcript.chmod(0)
    prefix = ("setpriv", "--bounding-set=-dac_override,-dac_read_search")
    payload = edit_call(project, transcript)
    call = asyncio.create_task(
        run_command_hook(
            bot,
            "claude-code",
            payload,
            "--timeout",
            "30",
            prefix=prefix if os.geteuid() == 0 else (),
        )
    )
    await click_when_posted(slack, bot, reviewer("U0ALICE"), ids.APPROVE)
    code, out, err = await call
    assert code == 0, err
    assert json.loads(out)["hookSpecificOutput"]["permissionDecision"] == "allow"
    assert "no reason sent: transcript not read: permission denied" in err
    blocks = next(iter(slack.messages.values()))["blocks"]
    shown = "\n".join(b["text"]["text"] for b in blocks if b["type"] == "section")
    assert "*Why:*" not in shown and "-MAX_RETRIES = 3" in shown


async def test_a_missing_transcript_and_a_malformed_context_change_nothing(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any, tmp_path: Path
) -> None:
    """No transcript file; then a context of the wrong shape sent to the http hook: each is
    reviewed and answered as any call, the decision the reviewer's."""
    bot = await make_bot()
    project = project_with_client(tmp_path)
    payload = edit_call(project, tmp_path / "gone.jsonl")
    call = asyncio.create_task(run_command_hook(bot, "claude-code", payload, "--timeout", "30"))
    await click_when_posted(slack, bot, reviewer("U0BOB"), ids.DENY, reason="not today")
    code, out, _ = await call
    assert code == 0
    decision = json.loads(out)["hookSpecificOutput"]
    assert decision["permissionDecision"] == "deny"
    assert "not today" in decision["permissionDecisionReason"]
