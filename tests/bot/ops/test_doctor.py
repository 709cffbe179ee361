"""`approval-bot doctor` against the Slack emulator and real Redis servers, one fault each."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.core.settings import load_settings
from bot.ops import doctor as doctor_module
from bot.ops.doctor import MANIFEST_SCOPES, Check, Doctor
from bot.ops.embedded_redis import EmbeddedRedis, free_port, start
from tests.support.credentials import (
    API_TOKEN,
    APP_TOKEN,
    BOT_TOKEN,
    OTHER_APP_TOKEN,
    OTHER_BOT_TOKEN,
    OTHER_SIGNING_SECRET,
)
from tests.support.e2e import SIGNING_SECRET, BotFactory
from tests.support.slack_emulator import SlackEmulator

ROOT = Path(__file__).resolve().parents[3]
CHANNEL = "C0APPROVALS"


@pytest.fixture(scope="module")
def good_redis() -> Iterator[str]:
    """A private server as production should run it: AOF on, noeviction."""
    server = start()
    try:
        import redis as sync_redis

        client = sync_redis.Redis.from_url(server.url)
        client.config_set("appendonly", "yes")
        client.close()
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="module")
def evicting_redis() -> Iterator[EmbeddedRedis]:
    """A private server that would lose pending requests: allkeys-lru, no persistence."""
    server = start()
    try:
        import redis as sync_redis

        client = sync_redis.Redis.from_url(server.url)
        client.config_set("maxmemory-policy", "allkeys-lru")
        client.close()
        yield server
    finally:
        server.stop()


@pytest.fixture
async def emulator() -> AsyncIterator[SlackEmulator]:
    async with SlackEmulator(channels={CHANNEL, "C0OPS"}, usergroups={"S0ONCALL": ["U0A"]}) as s:
        yield s


def env(slack: SlackEmulator, redis_url: str, **more: str) -> dict[str, str]:
    return {
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "SLACK_API_URL": slack.api_url,
        "REDIS_URL": redis_url,
        "APPROVALS_DEFAULT_CHANNEL": CHANNEL,
        "APPROVALS_API_TOKENS": f"ci:{API_TOKEN}",
        "HOME": "/nonexistent",
        **more,
    }


async def diagnose(
    values: dict[str, str], tmp_path: Path, request_url: str | None = None
) -> dict[str, Check]:
    settings = load_settings({k: v for k, v in values.items() if v})
    redis_url = values.get("REDIS_URL") or None
    doctor = Doctor(settings, redis_url, request_url=request_url, project=tmp_path, home=tmp_path)
    checks = await doctor.run()
    assert doctor.ok == all(c.level != "error" for c in checks)
    return {c.name: c for c in checks}


def levels(found: dict[str, Check]) -> dict[str, str]:
    return {name: c.level for name, c in found.items()}


async def test_a_healthy_setup_is_all_ok(
    emulator: SlackEmulator, good_redis: str, tmp_path: Path
) -> None:
    found = await diagnose(env(emulator, good_redis), tmp_path)
    assert set(levels(found).values()) == {"ok"}, levels(found)
    assert {"redis", "redis.persistence", "redis.maxmemory-policy", "redis.latency"} <= set(found)
    assert {"slack.auth", "slack.scopes", f"slack.channel.{CHANNEL}", "clock"} <= set(found)
    assert "AOF on" in found["redis.persistence"].message


async def test_the_cli_prints_json_and_exits_0_only_without_errors(
    emulator: SlackEmulator, good_redis: str, tmp_path: Path
) -> None:
    async def run(values: dict[str, str]) -> tuple[int, dict[str, Any]]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bot.cli.main",
            "doctor",
            "--json",
            "--project",
            str(tmp_path),
            cwd=ROOT,
            env={"PATH": os.environ["PATH"], **values},
            stdout=asyncio.subprocess.PIPE,
        )
        out, _ = await proc.communicate()
        return proc.returncode or 0, json.loads(out)

    status, body = await run(env(emulator, good_redis))
    assert status == 0 and body["ok"] is True
    assert all({"name", "level", "message", "fix"} <= set(c) for c in body["checks"])
    status, body = await run(env(emulator, good_redis, SLACK_BOT_TOKEN=OTHER_BOT_TOKEN))
    assert status == 1 and body["ok"] is False
    (auth,) = [c for c in body["checks"] if c["name"] == "slack.auth"]
    assert auth["level"] == "error" and "invalid_auth" in auth["message"] and auth["fix"]


async def test_an_evicting_redis_without_persistence(
    emulator: SlackEmulator, evicting_redis: EmbeddedRedis, tmp_path: Path
) -> None:
    found = await diagnose(env(emulator, evicting_redis.url), tmp_path)
    policy = found["redis.maxmemory-policy"]
    assert policy.level == "error" and "allkeys-lru" in policy.message
    assert "noeviction" in policy.fix
    persistence = found["redis.persistence"]
    assert persistence.level == "warning" and "appendonly yes" in persistence.fix


async def test_an_unreachable_redis(emulator: SlackEmulator, tmp_path: Path) -> None:
    found = await diagnose(env(emulator, f"redis://127.0.0.1:{free_port()}/0"), tmp_path)
    assert found["redis"].level == "error" and "REDIS_URL" in found["redis"].fix
    assert "redis.maxmemory-policy" not in found


async def test_missing_scopes(good_redis: str, tmp_path: Path) -> None:
    async with SlackEmulator(channels={CHANNEL}, scopes={"chat:write", "channels:read"}) as slack:
        found = await diagnose(env(slack, good_redis), tmp_path)
    scopes = found["slack.scopes"]
    assert scopes.level == "error"
    assert "channels:history" in scopes.message and "usergroups:read" in scopes.message
    assert "reinstall" in scopes.fix


async def test_a_channel_that_does_not_exist_and_one_without_the_bot(
    good_redis: str, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        yaml.safe_dump({"routes": {"ops": {"channel": "C0OPS"}, "sec": {"channel": "C0GONE"}}})
    )
    async with SlackEmulator(channels={CHANNEL, "C0OPS"}, not_in_channels={"C0OPS"}) as slack:
        found = await diagnose(env(slack, good_redis, APPROVALS_POLICY_FILE=str(policy)), tmp_path)
    assert found[f"slack.channel.{CHANNEL}"].level == "ok"
    assert found["slack.channel.C0OPS"].level == "error"
    assert "/invite" in found["slack.channel.C0OPS"].fix
    assert found["slack.channel.C0GONE"].level == "error"
    assert "does not exist" in found["slack.channel.C0GONE"].message


async def test_without_channels_read_the_channel_check_is_a_warning(
    good_redis: str, tmp_path: Path
) -> None:
    async with SlackEmulator(channels={CHANNEL}, scopes=MANIFEST_SCOPES) as slack:
        found = await diagnose(env(slack, good_redis), tmp_path)
    channel = found[f"slack.channel.{CHANNEL}"]
    assert channel.level == "warning" and "channels:read" in channel.message


async def test_user_groups_resolve_or_not(
    emulator: SlackEmulator, good_redis: str, tmp_path: Path
) -> None:
    found = await diagnose(
        env(emulator, good_redis, APPROVALS_REVIEWERS="S0ONCALL,S0NOBODY"), tmp_path
    )
    assert found["slack.usergroup.S0ONCALL"].level == "ok"
    assert "1 member" in found["slack.usergroup.S0ONCALL"].message
    assert found["slack.usergroup.S0NOBODY"].level == "error"
    assert "no_such_subteam" in found["slack.usergroup.S0NOBODY"].message


async def test_the_socket_mode_app_token(
    emulator: SlackEmulator, good_redis: str, tmp_path: Path
) -> None:
    found = await diagnose(env(emulator, good_redis, SLACK_APP_TOKEN=APP_TOKEN), tmp_path)
    assert found["slack.socket-mode"].level == "ok"
    found = await diagnose(env(emulator, good_redis, SLACK_APP_TOKEN=OTHER_APP_TOKEN), tmp_path)
    assert found["slack.socket-mode"].level == "error"
    assert "invalid_auth" in found["slack.socket-mode"].message
    assert "connections:write" in found["slack.socket-mode"].fix


@pytest.mark.parametrize(("offset", "level"), [(5, "ok"), (90, "warning"), (-900, "error")])
async def test_clock_skew_against_slacks_date(
    good_redis: str, tmp_path: Path, offset: float, level: str
) -> None:
    async with SlackEmulator(channels={CHANNEL}, clock_offset=offset) as slack:
        found = await diagnose(env(slack, good_redis), tmp_path)
    assert found["clock"].level == level, found["clock"]


async def test_the_http_mode_request_url(
    emulator: SlackEmulator, make_bot: BotFactory, good_redis: str, tmp_path: Path
) -> None:
    bot = await make_bot()
    url = f"http://127.0.0.1:{bot.port}/slack/events"
    found = await diagnose(env(emulator, good_redis), tmp_path, request_url=url)
    assert found["slack.request-url"].level == "ok", found["slack.request-url"]
    wrong = env(emulator, good_redis, SLACK_SIGNING_SECRET=OTHER_SIGNING_SECRET)
    found = await diagnose(wrong, tmp_path, request_url=url)
    assert found["slack.request-url"].level == "error"
    assert "SLACK_SIGNING_SECRET" in found["slack.request-url"].fix
    gone = f"http://127.0.0.1:{free_port()}/slack/events"
    found = await diagnose(env(emulator, good_redis), tmp_path, request_url=gone)
    assert found["slack.request-url"].level == "error"
    assert "not reachable" in found["slack.request-url"].message


async def test_an_invalid_policy_file_and_no_api_tokens(
    emulator: SlackEmulator, good_redis: str, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("rules:\n  - name: x\n    action: maybe\n")
    values = env(emulator, good_redis, APPROVALS_POLICY_FILE=str(policy), APPROVALS_API_TOKENS="")
    found = await diagnose(values, tmp_path)
    assert found["policy"].level == "error" and "policy check" in found["policy"].fix
    assert found["api.tokens"].level == "warning"


async def test_agent_settings_found_are_checked(
    emulator: SlackEmulator, good_redis: str, tmp_path: Path
) -> None:
    found = await diagnose(env(emulator, good_redis), tmp_path)
    assert not any(name.startswith("agent.") for name in found), "no agent settings: no check"
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "settings.json").write_text("{}")
    settings = load_settings(env(emulator, good_redis))
    checks = await Doctor(settings, good_redis, project=tmp_path, home=tmp_path).run()
    agent = [c for c in checks if c.name == "agent.claude-code"]
    assert agent and any(c.level == "error" for c in agent), agent


def test_the_manifest_scopes_are_both_manifests() -> None:
    for name in ("slack-manifest.yaml", "slack-manifest-socket.yaml"):
        manifest = yaml.safe_load((ROOT / "config" / name).read_text())
        assert set(manifest["oauth_config"]["scopes"]["bot"]) == MANIFEST_SCOPES, name


def test_render_names_the_fix() -> None:
    text = doctor_module.render(
        [Check("redis", "ok", "reachable"), Check("clock", "error", "off", "run NTP")]
    )
    assert "ok    redis: reachable" in text and "ERROR clock: off" in text
    assert "fix: run NTP" in text and "1 error(s), 0 warning(s)" in text


async def test_without_slack_a_route_with_no_channel_is_a_warning_not_an_error(
    good_redis: str, tmp_path: Path
) -> None:
    """Trying the bot without Slack (no SLACK_*, no APPROVALS_DEFAULT_CHANNEL): nothing is
    posted, so the missing channel is something to set later, not a failure (exit 0)."""
    found = await diagnose({"REDIS_URL": good_redis, "HOME": "/nonexistent"}, tmp_path)
    assert found["slack"].level == "warning"
    assert found["policy.channels"].level == "warning"
    assert found["policy.channels"].message.startswith("route default has no Slack channel")
    assert "needed once Slack is configured" in found["policy.channels"].message
    assert found["policy"].message == "no policy file: 1 route, 0 rules"
    assert not any(c.level == "error" for c in found.values()), found


async def test_with_slack_a_route_with_no_channel_is_an_error(
    emulator: SlackEmulator, good_redis: str, tmp_path: Path
) -> None:
    found = await diagnose(env(emulator, good_redis, APPROVALS_DEFAULT_CHANNEL=""), tmp_path)
    assert found["policy.channels"].level == "error"
    assert "requests cannot be posted" in found["policy.channels"].message
