"""The first run on a developer's machine: no REDIS_URL means the data directory's embedded
Redis (never one that happens to answer on localhost:6379), and no APPROVALS_API_TOKENS means
loopback only, with a development token printed as one line to paste."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import re
import stat
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis

from approvals._internal.service import ApprovalService
from approvals._internal.store.connection import connect
from approvals._internal.store.keys import Keys
from approvals._internal.store.store import ApprovalStore
from bot.agents import command_hook
from bot.cli import main as cli
from bot.cli.connect import open_client
from bot.core import app as bot_app
from bot.core.app import Bot, BotConfig, StartError, serve_config
from bot.core.settings import VARIABLES, load_settings
from bot.http import dev_token
from bot.ops import embedded_redis, redis_location
from tests.support import decide_next, eventually, wait_healthy
from tests.support.fresh_machine import STAND_IN_VARIABLE

REPO = Path(__file__).resolve().parents[3]
EXPORT = re.compile(r"^export APPROVALS_URL=(http://127\.0\.0\.1:\d+) APPROVALS_TOKEN=(\S+)$")


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A Redis answering where `localhost:6379` is looked for (its stand-in: a throwaway server
    on a free loopback port; the real one is never touched)."""
    server = embedded_redis.start()
    monkeypatch.setattr(redis_location, "LOCALHOST", server.url)
    try:
        yield server.url
    finally:
        server.stop()


def untouched(url: str) -> dict[str, Any]:
    """The stand-in's keys and the commands it ran besides the start-up PING and this
    check's own (HELLO, INFO, DBSIZE)."""
    client = redis.Redis.from_url(url)
    try:
        stats = client.info("commandstats")
        return {
            "keys": client.dbsize(),
            "commands": sorted(
                name
                for name in stats
                if name not in ("cmdstat_ping", "cmdstat_info", "cmdstat_dbsize", "cmdstat_hello")
            ),
        }
    finally:
        client.close()


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, str]:
    """No configuration at all but a data directory (the CLI reads os.environ)."""
    for name in (*VARIABLES, "APPROVALS_ENV_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("APPROVALS_DATA_DIR", str(tmp_path / "data"))
    return {"APPROVALS_DATA_DIR": str(tmp_path / "data")}


def hook_input() -> str:
    return json.dumps(
        {
            "session_id": "sess-first-run",
            "cwd": "/repo",
            "hook_event_name": "PreToolUse",
            "tool_name": "Bash",
            "tool_input": {"command": "make deploy"},
            "permission_mode": "default",
            "tool_use_id": "toolu_01FirstRunBash",
        }
    )


def run_hook(env: dict[str, str]) -> tuple[dict[str, Any], str]:
    """The command hook in this process (as `approval-bot hook claude-code`): answer, stderr."""
    out, err = io.StringIO(), io.StringIO()
    code = command_hook.main(
        ["hook", "claude-code", "--timeout", "30"],
        stdin=io.StringIO(hook_input()),
        stdout=out,
        stderr=err,
        env=env,
        open_client=open_client,
    )
    assert code == 0, "a hook always exits 0"
    return json.loads(out.getvalue()), err.getvalue()


@pytest.fixture
async def serving(
    clean_env: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> AsyncIterator[tuple[int, str, str]]:
    """`serve` with nothing configured: (port, the printed APPROVALS_URL, its token); its
    start-up log is `caplog.get_records("setup")`."""
    caplog.set_level(logging.INFO)
    port = embedded_redis.free_port()
    stop = asyncio.Event()
    task = asyncio.create_task(bot_app.serve(load_settings({**clean_env, "PORT": str(port)}), stop))
    try:
        await wait_healthy(port)
        printed = await eventually(lambda: capsys.readouterr().out, what="the export line")
        (line,) = printed.splitlines()
        match = EXPORT.fullmatch(line)
        assert match, line
        assert match[1] == f"http://127.0.0.1:{port}"
        yield port, match[1], match[2]
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)


async def test_without_redis_url_nothing_is_written_to_a_redis_on_localhost(
    stand_in: str,
    clean_env: dict[str, str],
    serving: tuple[int, str, str],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A Redis answers where localhost:6379 is looked for; serve, the CLI and the hook use
    the data directory's embedded server all the same, and write nothing there."""
    _, url, token = serving
    data = tmp_path / "data"
    embedded = (data / "redis" / embedded_redis.URL_FILE).read_text().strip()
    assert embedded != stand_in
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{url}/v1/approvals",
            json={"tool_name": "deploy", "arguments": {"env": "prod"}},
            headers={"Authorization": f"Bearer {token}"},
        ) as resp:
            assert resp.status == 201, await resp.text()
            created = await resp.json()
    # The CLI finds the embedded server (not the stand-in) and decides there.
    assert await asyncio.to_thread(cli.main, ["approve", created["id"], "--as", "ops"]) == 0
    # The hook without APPROVALS_URL reviews over the embedded Redis too.
    client = connect(embedded, max_connections=4)
    service = ApprovalService(ApprovalStore(client, Keys("approvals")))
    try:
        hook = asyncio.create_task(asyncio.to_thread(run_hook, clean_env))
        decided = await decide_next(service, "Bash", within=20)
        answer, _ = await hook
        assert answer["hookSpecificOutput"]["permissionDecision"] == "allow"
        assert (await service.store.get(created["id"])).status == "approved"
        assert decided.event.tool_name == "Bash"
    finally:
        await client.aclose()
    messages = [r.getMessage() for r in caplog.get_records("setup")]
    redis_lines = [m for m in messages if m.startswith("redis ")]
    assert redis_lines[0].startswith(f"redis {redis_location.describe(embedded)}, embedded"), (
        messages
    )
    standin_address = redis_location.describe(stand_in).removesuffix(" db 0")
    assert any(
        f"a Redis answers on {standin_address} but is not used without REDIS_URL" in m
        for m in messages
    ), "the log says the stand-in is there and how to use it"
    assert untouched(stand_in) == {"keys": 0, "commands": []}


async def test_with_nothing_running_the_hook_denies_naming_what_to_set_and_the_cli_says_so(
    stand_in: str, clean_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """No APPROVALS_URL, no REDIS_URL, no embedded server: the hook denies in one line that
    names what to set (a Redis answering on localhost:6379 is not a configuration)."""
    answer, err = await asyncio.to_thread(run_hook, clean_env)
    decided = answer["hookSpecificOutput"]
    assert decided["permissionDecision"] == "deny"
    assert "set APPROVALS_URL and APPROVALS_TOKEN" in decided["permissionDecisionReason"]
    assert err.count("\n") == 1 and "APPROVALS_URL" in err and "REDIS_URL" in err, err
    assert await asyncio.to_thread(cli.main, ["pending"]) == 2
    cli_err = capsys.readouterr().err
    assert cli_err.count("\n") == 1, cli_err
    assert "REDIS_URL (not set)" in cli_err
    assert f"set REDIS_URL={stand_in} to use it" in cli_err
    assert cli_err.rstrip().endswith("to the Redis the bot uses"), "ends a whole sentence"
    assert untouched(stand_in) == {"keys": 0, "commands": []}


async def test_redis_url_naming_localhost_is_used(
    stand_in: str, clean_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Naming it in REDIS_URL is how the Redis on localhost:6379 is used (as before 0.2.0)."""
    monkeypatch.setenv("REDIS_URL", stand_in)
    assert await asyncio.to_thread(cli.main, ["pending"]) == 0
    client = redis.Redis.from_url(stand_in)
    try:
        assert client.info("commandstats").get("cmdstat_zrange"), "the CLI read pending there"
    finally:
        client.close()


# -- the development token -------------------------------------------------------------------


async def test_dev_token_is_private_reused_and_works_with_the_api_and_the_cli(
    clean_env: dict[str, str], serving: tuple[int, str, str], tmp_path: Path
) -> None:
    _, url, token = serving
    file = tmp_path / "data" / dev_token.FILE
    assert file.read_text().strip() == token
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    # The CLI with the pasted line: the request is made through the API, as `dev`.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "APPROVALS_"))}
    env.pop("REDIS_URL", None)
    env.update(APPROVALS_URL=url, APPROVALS_TOKEN=token)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.support.fresh_machine", "request", "--tool", "deploy",
        "--wait", "0.5",
        env=env, cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2, err.decode()  # no decision within 0.5 s: still pending
    found = re.search(r"waiting for a decision on (apr_[\w-]+)", err.decode())
    assert found and "still pending" in err.decode(), err.decode()
    async with aiohttp.ClientSession() as http:
        where = f"{url}/v1/approvals/{found[1]}"
        async with http.get(where, headers={"Authorization": f"Bearer {token}"}) as resp:
            assert resp.status == 200
            made = await resp.json()
        assert made["tool_name"] == "deploy" and made["principal"] == "dev"
        async with http.get(where) as resp:
            assert resp.status == 401, "no token: refused"
        async with http.get(where, headers={"Authorization": "Bearer not-the-token"}) as resp:
            assert resp.status == 403, "a wrong token: refused"
    wrong = {**env, "APPROVALS_TOKEN": "not-the-dev-token"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.support.fresh_machine", "request", "--tool", "deploy",
        env=wrong, cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 1, err.decode()
    assert err.decode() == "approval-bot: the bearer token is not valid for this API\n"


def test_the_dev_token_is_reused_and_remade_when_missing_or_readable_by_others(
    tmp_path: Path,
) -> None:
    first = dev_token.load_or_create(tmp_path)
    assert dev_token.load_or_create(tmp_path) == first, "reused on the next start"
    file = tmp_path / dev_token.FILE
    file.unlink()
    second = dev_token.load_or_create(tmp_path)
    assert second != first and stat.S_IMODE(file.stat().st_mode) == 0o600
    file.chmod(0o644)  # someone else may have read it: a new one
    third = dev_token.load_or_create(tmp_path)
    assert third != second and stat.S_IMODE(file.stat().st_mode) == 0o600
    file.write_text("short\n")
    assert dev_token.load_or_create(tmp_path) not in ("short", third)


def test_serve_listens_on_loopback_with_a_dev_token_only_without_api_tokens(
    tmp_path: Path,
) -> None:
    data = {"APPROVALS_DATA_DIR": str(tmp_path)}
    config, dev = serve_config(load_settings(data), "redis://127.0.0.1:1/0")
    assert config.host == "127.0.0.1" and dev is not None
    assert config.api_tokens == (f"dev:{dev}",) and config.admin_tokens == ()
    with_tokens = {**data, "APPROVALS_API_TOKENS": "ci:3f9a1c7e5b2d4a6c8e0f1a2b3c4d5e6f"}
    config, dev = serve_config(load_settings(with_tokens), "redis://127.0.0.1:1/0")
    assert config.host == "0.0.0.0" and dev is None
    admin_only = {**data, "APPROVALS_ADMIN_TOKENS": "ops:9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b"}
    config, dev = serve_config(load_settings(admin_only), "redis://127.0.0.1:1/0")
    assert config.host == "0.0.0.0" and dev is None


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.10"])
async def test_a_bind_beyond_loopback_without_api_tokens_is_refused(
    redis_url: str, keys: Keys, host: str
) -> None:
    """Never an open API: no address other than loopback is even tried without a token."""
    bot = Bot(BotConfig(redis_url=redis_url, prefix=keys.prefix, host=host, port=0))
    try:
        with pytest.raises(StartError, match="without API tokens: set APPROVALS_API_TOKENS"):
            await bot.start()
        assert bot.runner is None or not bot.runner.sites, "nothing listens"
    finally:
        await bot.stop()


async def test_a_serve_process_prints_the_export_line_and_the_token_works(
    tmp_path: Path, stand_in: str
) -> None:
    """As a person runs it: `approval-bot serve` in its own process, nothing configured; the
    printed line is on stdout, the log on stderr, and a Redis on "localhost:6379" untouched."""
    port = embedded_redis.free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "APPROVALS_"))}
    env.pop("REDIS_URL", None)
    env.update(APPROVALS_DATA_DIR=str(tmp_path), PORT=str(port), **{STAND_IN_VARIABLE: stand_in})
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.support.fresh_machine", "serve",
        env=env, cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode().strip()
        match = EXPORT.fullmatch(line)
        assert match and match[1] == f"http://127.0.0.1:{port}", line
        async with aiohttp.ClientSession() as http:
            async with http.post(
                f"{match[1]}/v1/approvals",
                json={"tool_name": "deploy", "arguments": {}},
                headers={"Authorization": f"Bearer {match[2]}"},
            ) as resp:
                assert resp.status == 201, await resp.text()
    finally:
        proc.terminate()
        _, log = await asyncio.wait_for(proc.communicate(), 30)
    lines = log.decode().splitlines()
    assert match[2] not in log.decode(), "the token is printed, never logged"
    first_redis = next(line for line in lines if " redis " in f" {line}")
    assert "embedded" in first_redis, lines
    assert untouched(stand_in) == {"keys": 0, "commands": []}
