"""`approval-bot mcp-proxy` end to end: the real `mcp` client talks to the proxy (a child
process), which gates a small upstream MCP server written with the same SDK
(`tests/support/mcp_upstream.py`, its own child process). The upstream appends every call it
receives to a file, so each test sees exactly what reached it."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from approvals._internal.policy_file import build_policy
from approvals._internal.store.keys import Keys
from approvals.errors import InvalidRequest
from bot.core.context import BotContext
from tests.support import REVIEWER, decide_next
from tests.support.credentials import API_TOKEN, OTHER_API_TOKEN, THIRD_API_TOKEN, UPSTREAM_TOKEN
from tests.support.e2e import BotFactory
from tests.support.mcp import (
    REPO,
    ProgressLog,
    agent_env,
    approval_bot,
    eventually,
    pending_for,
    settled,
)
from tests.support.slack_emulator import SlackEmulator

UPSTREAM = ("--", sys.executable, "-m", "tests.support.mcp_upstream")


def calls(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def text(result: Any) -> str:
    return "".join(c.text for c in result.content)


def proxy(env: dict[str, str], *flags: str) -> Any:
    return approval_bot(
        "mcp-proxy",
        "--name",
        "files",
        "--progress-interval",
        "0.1",
        "--pass-env",
        "UPSTREAM_LOG",  # where the test upstream records its calls
        *flags,
        *UPSTREAM,
        env=env,
    )


@pytest.fixture
def upstream_log(tmp_path: Path) -> Path:
    return tmp_path / "upstream-calls.jsonl"


async def test_a_gated_session(
    redis_url: str, keys: Keys, ctx: BotContext, upstream_log: Path
) -> None:
    """One client session through the proxy: approve forwards once with the approved arguments
    and returns the upstream's result; deny never calls the upstream; progress, resources,
    prompts and notifications pass through; cancelling withdraws the request, or once
    forwarded cancels the upstream call. (One session: each costs two process starts.)"""
    env = agent_env(redis_url, keys, UPSTREAM_LOG=str(upstream_log))
    received: list[Any] = []

    async def on_message(message: Any) -> None:
        received.append(message)

    async with Client(proxy(env), mode="legacy", message_handler=on_message) as client:
        assert client.server_info is not None and client.server_info.name == "files"

        # approve → forwarded once, with the arguments the reviewer saw
        progress = ProgressLog()
        call = asyncio.create_task(
            client.call_tool("delete_file", {"path": "/tmp/a"}, progress_callback=progress)
        )
        request = await pending_for(ctx.store, "mcp__files__delete_file")
        assert request.event.arguments == {"path": "/tmp/a"}
        assert request.event.agent == "mcp-proxy:files"
        await progress.wait_for(2)  # waiting for the reviewer: progress goes out
        assert calls(upstream_log) == []  # nothing reached the upstream before the decision
        await decide_next(ctx.service, "mcp__files__delete_file")
        result = await call
        assert not result.is_error
        assert text(result) == "deleted /tmp/a"  # the upstream's own result
        assert calls(upstream_log) == [{"tool": "delete_file", "arguments": {"path": "/tmp/a"}}]

        # deny → an isError result with the reason; the upstream is not called
        call = asyncio.create_task(client.call_tool("delete_file", {"path": "/etc/passwd"}))
        await decide_next(ctx.service, "mcp__files__delete_file", "deny", reason="not that one")
        result = await call
        assert result.is_error
        assert text(result) == "Not called: Denied by <@U0REVIEWER>: not that one"
        assert len(calls(upstream_log)) == 1

        # approved with edits → the upstream gets exactly the edit, checked against the
        # upstream tool's inputSchema first
        await client.list_tools()
        call = asyncio.create_task(client.call_tool("delete_file", {"path": "/tmp/b"}))
        request = await pending_for(ctx.store, "mcp__files__delete_file")
        assert request.event.arguments_schema is not None
        with pytest.raises(InvalidRequest, match="path"):
            await ctx.service.edit(request.id, REVIEWER, {"path": 5})
        await ctx.service.edit(request.id, REVIEWER, {"path": "/tmp/c"})
        assert text(await call) == "deleted /tmp/c"
        assert calls(upstream_log)[-1] == {"tool": "delete_file", "arguments": {"path": "/tmp/c"}}

        # resources and prompts as they are
        read = await client.read_resource("file://readme")
        assert read.contents[0].text == "hello from upstream"  # type: ignore[union-attr]
        prompt = await client.get_prompt("review", {"path": "a.py"})
        assert prompt.messages[0].content.text == "Please review a.py"  # type: ignore[union-attr]

        # the upstream's progress follows the waiting progress, always increasing
        progress = ProgressLog()
        call = asyncio.create_task(
            client.call_tool("slow_copy", {"seconds": 0.5}, progress_callback=progress)
        )
        await progress.wait_for(1)
        await decide_next(ctx.service, "mcp__files__slow_copy")
        assert text(await call) == "copied"
        relayed = [m for _, _, m in progress.seen if m and m.startswith("copied")]
        assert relayed == [f"copied {i}/5" for i in range(1, 6)]
        values = [p for p, _, _ in progress.seen]
        assert values == sorted(values) and len(set(values)) == len(values)

        # the upstream's own notifications reach the client
        call = asyncio.create_task(client.call_tool("announce", {}))
        await decide_next(ctx.service, "mcp__files__announce")
        assert text(await call) == "announced"
        await eventually(
            lambda: any(type(m).__name__ == "ToolListChangedNotification" for m in received)
        )

        # cancelled while waiting → the request is withdrawn
        call = asyncio.create_task(client.call_tool("delete_file", {"path": "/x"}))
        request = await pending_for(ctx.store, "mcp__files__delete_file")
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert (await settled(ctx.store, request.id)).status == "cancelled"

        # cancelled once forwarded → the upstream call is cancelled
        call = asyncio.create_task(client.call_tool("slow_copy", {"seconds": 30}))
        await decide_next(ctx.service, "mcp__files__slow_copy")
        forwarded = {"tool": "slow_copy", "arguments": {"seconds": 30}}
        await eventually(lambda: calls(upstream_log)[-1] == forwarded)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await eventually(lambda: calls(upstream_log)[-1]["tool"] == "slow_copy cancelled")
    assert [c["tool"] for c in calls(upstream_log)] == [
        "delete_file",
        "delete_file",
        "slow_copy",
        "announce",
        "slow_copy",
        "slow_copy cancelled",
    ]


async def test_an_allow_rule_forwards_without_slack(
    make_bot: BotFactory,
    slack: SlackEmulator,
    redis_url: str,
    keys: Keys,
    upstream_log: Path,
    tmp_path: Path,
) -> None:
    """Through the real bot's HTTP API: the allow rule answers, nothing is posted to Slack,
    and a deny rule keeps the upstream uncalled."""
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(
        "routes:\n  default:\n    channel: C0APPROVALS\n"
        "rules:\n"
        "  - name: reads\n    match: {tool: 'mcp__files__read_*'}\n    action: allow\n"
        "  - name: no deletes\n    match: {tool: 'mcp__files__delete_*'}\n    action: deny\n"
        "    reason: Deleting is off limits.\n"
    )
    bot = await make_bot(build_policy(policy_file, "C0APPROVALS", ()))
    env = agent_env(redis_url, keys, UPSTREAM_LOG=str(upstream_log))
    env.update(APPROVALS_URL=f"http://127.0.0.1:{bot.port}", APPROVALS_TOKEN=API_TOKEN)
    async with Client(proxy(env, "--mark-gated"), mode="legacy") as client:
        async with asyncio.timeout(15):  # no reviewer here: both answer at once
            read = await client.call_tool("read_file", {"path": "README"})
            delete = await client.call_tool("delete_file", {"path": "README"})
        listed = {t.name: t.description for t in (await client.list_tools()).tools}
    assert not read.is_error and text(read) == "contents of README"
    assert delete.is_error
    assert text(delete) == "Not called: Denied by policy:no deletes: Deleting is off limits."
    assert calls(upstream_log) == [{"tool": "read_file", "arguments": {"path": "README"}}]
    await asyncio.sleep(0.3)  # the dispatcher would have posted by now
    assert slack.calls_to("chat.postMessage") == []
    # Over HTTP the policy lives in the bot: the proxy marks every tool as maybe gated.
    assert listed["read_file"] == "Read a file.\n\n[approval-bot: calls may need approval in Slack]"


async def test_tools_list_marks_gated_tools_from_a_local_policy(
    redis_url: str, keys: Keys, tmp_path: Path
) -> None:
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(
        "routes:\n  default:\n    channel: C0APPROVALS\n"
        "rules:\n"
        "  - name: reads\n    match: {tool: 'mcp__files__read_*'}\n    action: allow\n"
        "  - name: no crash\n    match: {tool: 'mcp__files__crash'}\n    action: deny\n"
    )
    env = agent_env(redis_url, keys, APPROVALS_POLICY_FILE=str(policy_file))
    async with Client(proxy(env, "--mark-gated"), mode="legacy") as client:
        listed = {t.name: t.description for t in (await client.list_tools()).tools}
    assert listed["read_file"] == "Read a file."
    assert listed["delete_file"] == "Delete a file.\n\n[approval-bot: calls need approval in Slack]"
    assert listed["crash"].endswith("[approval-bot: calls are denied by policy]")


async def test_the_upstream_exiting_is_an_error_not_a_hang(
    redis_url: str, keys: Keys, ctx: BotContext, upstream_log: Path
) -> None:
    env = agent_env(redis_url, keys, UPSTREAM_LOG=str(upstream_log))
    async with Client(proxy(env), mode="legacy") as client:
        call = asyncio.create_task(client.call_tool("crash", {}))
        await decide_next(ctx.service, "mcp__files__crash")
        async with asyncio.timeout(10):
            result = await call
        assert result.is_error
        assert "upstream MCP server 'files' exited" in text(result)
        # Then the proxy exits (status 1), so the client sees the server gone too.
        async with asyncio.timeout(10):
            with pytest.raises(Exception):  # noqa: B017 - whatever the SDK raises for a closed server
                await client.list_tools()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def test_a_streamable_http_upstream_with_a_bearer_token(
    redis_url: str, keys: Keys, ctx: BotContext, upstream_log: Path
) -> None:
    port = free_port()
    env = agent_env(redis_url, keys, UPSTREAM_LOG=str(upstream_log))
    upstream = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.support.mcp_upstream", "--http", str(port), UPSTREAM_TOKEN,
        env=env, cwd=REPO, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/mcp"
    flags = ("--name", "files", "--upstream-url", url, "--upstream-bearer-env", "UPSTREAM_TOKEN")
    try:
        await eventually(lambda: _listening(port), within=20)
        good = approval_bot("mcp-proxy", *flags, env={**env, "UPSTREAM_TOKEN": UPSTREAM_TOKEN})
        async with Client(good, mode="legacy") as client:
            call = asyncio.create_task(client.call_tool("delete_file", {"path": "/tmp/b"}))
            await decide_next(ctx.service, "mcp__files__delete_file")
            assert text(await call) == "deleted /tmp/b"
        assert calls(upstream_log) == [{"tool": "delete_file", "arguments": {"path": "/tmp/b"}}]

        # A refused token: the proxy says so and exits 1 instead of serving nothing.
        bad = approval_bot("mcp-proxy", *flags, env={**env, "UPSTREAM_TOKEN": OTHER_API_TOKEN})
        proc = await asyncio.create_subprocess_exec(
            bad.command, *bad.args, env=bad.env, cwd=REPO,
            stdin=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _, err = await asyncio.wait_for(proc.communicate(b""), 30)
        assert proc.returncode == 1
        assert "the upstream MCP server failed" in err.decode()
    finally:
        upstream.terminate()
        await upstream.wait()


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


async def test_route_names_the_policy_route_to_ask_on(
    redis_url: str, keys: Keys, ctx: BotContext, tmp_path: Path, upstream_log: Path
) -> None:
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(
        "routes:\n  default:\n    channel: C0APPROVALS\n  ops:\n    channel: C0OPS\n"
    )
    env = agent_env(
        redis_url, keys, APPROVALS_POLICY_FILE=str(policy_file), UPSTREAM_LOG=str(upstream_log)
    )
    async with Client(proxy(env, "--route", "ops"), mode="legacy") as client:
        call = asyncio.create_task(client.call_tool("read_file", {"path": "a"}))
        request = await decide_next(ctx.service, "mcp__files__read_file")
        assert text(await call) == "contents of a"
    assert (request.route, request.channel) == ("ops", "C0OPS")
    async with Client(proxy(env, "--route", "nope"), mode="legacy") as client:
        result = await client.call_tool("read_file", {"path": "b"})
    assert result.is_error
    assert text(result).startswith("Not called: approval service error: unknown route 'nope'")
    assert calls(upstream_log) == [{"tool": "read_file", "arguments": {"path": "a"}}]


async def test_listen_serves_the_gated_tools_over_streamable_http(
    redis_url: str, keys: Keys, ctx: BotContext, upstream_log: Path
) -> None:
    port = free_port()
    env = agent_env(redis_url, keys, UPSTREAM_LOG=str(upstream_log), PROXY_TOKEN=THIRD_API_TOKEN)
    flags = ("--listen", f"127.0.0.1:{port}", "--listen-token-env", "PROXY_TOKEN")
    params = proxy(env, *flags)
    served = await asyncio.create_subprocess_exec(
        params.command, *params.args, env=params.env, cwd=REPO,
        stdin=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        await eventually(lambda: _listening(port), within=30)
        for token in (None, OTHER_API_TOKEN):
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            async with httpx2.AsyncClient(headers=headers) as http:
                refused = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
            assert refused.status_code == 401
        headers = {"Authorization": f"Bearer {THIRD_API_TOKEN}"}
        async with httpx2.AsyncClient(headers=headers) as http:
            transport = streamable_http_client(url, http_client=http)
            async with Client(transport, mode="legacy") as client:
                call = asyncio.create_task(client.call_tool("delete_file", {"path": "/tmp/c"}))
                await decide_next(ctx.service, "mcp__files__delete_file", "deny", reason="no")
                denied = await call
                call = asyncio.create_task(client.call_tool("read_file", {"path": "/tmp/c"}))
                await decide_next(ctx.service, "mcp__files__read_file")
                read = await call
    finally:
        served.terminate()
        await served.wait()
    assert denied.is_error and text(denied) == "Not called: Denied by <@U0REVIEWER>: no"
    assert text(read) == "contents of /tmp/c"
    assert calls(upstream_log) == [{"tool": "read_file", "arguments": {"path": "/tmp/c"}}]


async def test_listen_without_a_token_does_not_start(redis_url: str, keys: Keys) -> None:
    params = proxy(agent_env(redis_url, keys), "--listen", "127.0.0.1:1")
    proc = await asyncio.create_subprocess_exec(
        params.command, *params.args, env=params.env, cwd=REPO,
        stdin=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2
    assert "--listen needs a bearer token" in err.decode()


async def test_the_upstream_gets_a_scrubbed_environment_and_cannot_read_the_proxys(
    redis_url: str, keys: Keys, upstream_log: Path, tmp_path: Path
) -> None:
    """The upstream sees PATH, HOME, the locale and what --pass-env names: not the approval,
    Slack or Redis settings, not other credentials of the proxy's environment, and not the
    proxy's own /proc/<pid>/environ (the proxy is non-dumpable)."""
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(
        "routes:\n  default:\n    channel: C0APPROVALS\n"
        "rules:\n  - name: env\n    match: {tool: 'mcp__files__environment'}\n    action: allow\n"
    )
    github = "ghp_" + "Zt7Qw2Er9Ty4Ui1Op6As3Df8Gh5Jk0Lz2Xc4"
    env = agent_env(
        redis_url,
        keys,
        UPSTREAM_LOG=str(upstream_log),
        APPROVALS_POLICY_FILE=str(policy_file),
        APPROVALS_TOKEN="tok-" + "4f1b9c2e7d3a8b6c",
        SLACK_WEBHOOK_URL="https://hooks.slack.com/services/T0EMULATED/B0HOOK/AbCdEfGhIjKlMnOpQrStUvWx",
        AWS_SECRET_ACCESS_KEY="wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        GITHUB_PERSONAL_ACCESS_TOKEN=github,
    )
    params = proxy(env, "--pass-env", "GITHUB_PERSONAL_ACCESS_TOKEN")
    async with Client(params, mode="legacy") as client:
        async with asyncio.timeout(15):
            seen = json.loads(text(await client.call_tool("environment", {})))
    names = set(seen["names"])
    assert "GITHUB_PERSONAL_ACCESS_TOKEN" in names and "UPSTREAM_LOG" in names
    assert "PATH" in names
    for private in ("APPROVALS_TOKEN", "APPROVALS_PREFIX", "REDIS_URL", "SLACK_WEBHOOK_URL"):
        assert private not in names, private
    assert "AWS_SECRET_ACCESS_KEY" not in names, "a credential nobody passed reached it"
    # The proxy is non-dumpable (tests/bot/mcp/test_mcp_upstream.py checks the flag): a
    # process of the same user cannot read its environ. Root reads it anyway.
    if sys.platform.startswith("linux") and os.geteuid() != 0:
        assert seen["parent"] == {"readable": False, "error": "PermissionError"}, seen["parent"]


@pytest.mark.parametrize("name", ["APPROVALS_TOKEN", "REDIS_URL", "slack_bot_token", "A B"])
async def test_pass_env_refuses_the_approval_settings(
    redis_url: str, keys: Keys, name: str
) -> None:
    params = proxy(agent_env(redis_url, keys), "--pass-env", name)
    proc = await asyncio.create_subprocess_exec(
        params.command, *params.args, env=params.env, cwd=REPO,
        stdin=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2
    assert "--pass-env" in err.decode()


async def test_an_asked_call_never_reaches_the_upstream(
    redis_url: str, keys: Keys, ctx: BotContext, upstream_log: Path
) -> None:
    """A reviewer's question instead of a decision: an error result carrying the question;
    the upstream is never called."""
    env = agent_env(redis_url, keys, UPSTREAM_LOG=str(upstream_log))
    async with Client(proxy(env), mode="legacy") as client:
        call = asyncio.create_task(client.call_tool("delete_file", {"path": "/srv/data"}))
        request = await pending_for(ctx.store, "mcp__files__delete_file")
        await ctx.service.ask(request.id, REVIEWER, "Is /srv/data backed up?")
        result = await call
        assert result.is_error
        assert text(result).startswith("Not called: Not approved yet:")
        assert "Is /srv/data backed up?" in text(result)
    assert calls(upstream_log) == []
