"""`approval-bot doctor`: the checks a new operator runs first.

Each check is a `Check` (name, level ok / warning / error, what was found, the fix), for Redis,
Slack, the policy file, the API tokens, the clock and the agents' setup (`bot.agents.check`).
The command prints one line per check (or `--json`) and exits 0 only when no check is an
error. What each check looks at: docs/ARCHITECTURE.md, "Operating".
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import json
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, Literal, TextIO

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from approvals._internal.policy import UNROUTED_CHANNEL, Policy
from approvals._internal.policy_file import PolicyError, build_policy
from approvals._internal.slack_ids import is_user_group
from approvals._internal.store.connection import connect
from bot.agents import check as setup_check
from bot.agents.settings_files import settings_path
from bot.cli.output import plural
from bot.core.settings import Settings

Level = Literal["ok", "warning", "error"]

#: The bot scopes both Slack manifests in config/ ask for (a test keeps them equal).
MANIFEST_SCOPES = frozenset(
    {"channels:history", "chat:write", "commands", "groups:history", "im:write", "usergroups:read"}
)
#: Slack refuses a signed request whose timestamp is further off than this (replay guard).
SIGNATURE_WINDOW = 300.0
#: Skew worth a warning: logs and deadlines disagree with Slack's.
SKEW_WARNING = 30.0
#: Redis round trip worth a warning (median of a few PINGs), in seconds.
LATENCY_WARNING = 0.02
LATENCY_ERROR = 0.25


@dataclass
class Check:
    name: str
    level: Level
    message: str
    fix: str = ""


@dataclass
class Doctor:
    settings: Settings
    redis_url: str | None
    request_url: str | None = None
    project: Path = field(default_factory=Path.cwd)
    home: Path = field(default_factory=Path.home)
    timeout: float = 5.0
    checks: list[Check] = field(default_factory=list)

    def add(self, name: str, level: Level, message: str, fix: str = "") -> None:
        self.checks.append(Check(name, level, message, fix))

    @property
    def ok(self) -> bool:
        return not any(c.level == "error" for c in self.checks)

    async def run(self) -> list[Check]:
        policy = self.check_policy()
        self.check_tokens()
        await self.check_redis()
        await self.check_slack(policy)
        self.check_agents()
        return self.checks

    # -- configuration ---------------------------------------------------------------

    def check_policy(self) -> Policy | None:
        s = self.settings
        try:
            policy = build_policy(
                s.approvals_policy_file, s.approvals_default_channel, s.approvals_reviewers
            )
        except PolicyError as e:
            first = e.message.strip().splitlines()[0] if e.message.strip() else "invalid"
            self.add(
                "policy",
                "error",
                f"{s.approvals_policy_file}: {first}",
                f"run `approval-bot policy check {s.approvals_policy_file}` and fix what it says",
            )
            return None
        where = str(s.approvals_policy_file) if s.approvals_policy_file else "no policy file"
        counts = f"{plural(len(policy.routes), 'route')}, {plural(len(policy.rules), 'rule')}"
        self.add("policy", "ok", f"{where}: {counts}")
        unrouted = [n for n, r in policy.routes.items() if r.channel == UNROUTED_CHANNEL]
        if unrouted:
            # Without Slack nothing is posted anyway (requests are decided with the CLI): a
            # channel to set before Slack is, not a broken configuration.
            slack = s.slack_bot_token is not None
            which = "route" if len(unrouted) == 1 else "routes"
            self.add(
                "policy.channels",
                "error" if slack else "warning",
                f"{which} {', '.join(unrouted)} {'has' if len(unrouted) == 1 else 'have'} no "
                "Slack channel: "
                + (
                    "requests cannot be posted"
                    if slack
                    else "needed once Slack is configured (until then nothing is posted)"
                ),
                "set APPROVALS_DEFAULT_CHANNEL or give each route a `channel` in the policy file",
            )
        return policy

    def check_tokens(self) -> None:
        s = self.settings
        if s.approvals_api_tokens or s.approvals_admin_tokens:
            count = len(s.approvals_api_tokens) + len(s.approvals_admin_tokens)
            self.add("api.tokens", "ok", f"{count} API token(s) set")
        else:
            self.add(
                "api.tokens",
                "warning",
                "APPROVALS_API_TOKENS is not set: serve listens on 127.0.0.1 only and accepts "
                "just its development token (it prints the export line to paste)",
                "set APPROVALS_API_TOKENS=name:token,… (one per agent or team) to serve other "
                "machines",
            )

    # -- Redis -----------------------------------------------------------------------

    async def check_redis(self) -> None:
        if self.redis_url is None:
            self.add(
                "redis",
                "error",
                "no Redis answers (REDIS_URL unset, and no embedded server running for "
                f"APPROVALS_DATA_DIR {self.settings.approvals_data_dir})",
                "set REDIS_URL to the bot's Redis, or start `approval-bot serve` (it runs the "
                "embedded one while it runs)",
            )
            return
        redis = connect(self.redis_url, client_name="approval-bot-doctor", socket_timeout=5)
        try:
            try:
                info = await asyncio.wait_for(redis.info(), self.timeout)
            except Exception as e:
                self.add(
                    "redis",
                    "error",
                    f"cannot reach Redis ({type(e).__name__}: {e})",
                    "check REDIS_URL (host, port, password, rediss:// for TLS) and that "
                    "Redis is running",
                )
                return
            version = str(info.get("redis_version") or info.get("valkey_version") or "?")
            major = int(version.split(".")[0]) if version.split(".")[0].isdigit() else 0
            self.add("redis", "ok", f"reachable, version {version}")
            if major and major < 6:
                self.add(
                    "redis.version",
                    "error",
                    f"Redis {version} is too old (streams, Lua and ACLs need 6.2 or later)",
                    "upgrade to Redis 7 (or Valkey)",
                )
            await self._persistence(redis, info)
            policy = str(info.get("maxmemory_policy") or "")
            if policy == "noeviction":
                self.add("redis.maxmemory-policy", "ok", "noeviction")
            else:
                self.add(
                    "redis.maxmemory-policy",
                    "error",
                    f"maxmemory-policy is {policy or 'unknown'}: when memory fills, Redis "
                    "silently evicts pending requests and outbox entries",
                    "set `maxmemory-policy noeviction` (redis.conf, or CONFIG SET; on a "
                    "managed Redis, its parameter group)",
                )
            await self._latency(redis)
        finally:
            await redis.aclose()

    async def _persistence(self, redis: Any, info: dict[str, Any]) -> None:
        aof = str(info.get("aof_enabled", "0")) == "1"
        try:
            save = (await redis.config_get("save")).get("save", "")
        except Exception:
            save = None  # CONFIG is often disabled on managed Redis
        if aof:
            self.add("redis.persistence", "ok", "AOF on" + (", RDB snapshots" if save else ""))
        elif save:
            self.add(
                "redis.persistence",
                "ok",
                f"RDB snapshots ({save}); up to the last snapshot's changes are lost in a crash",
            )
        elif save is None:
            self.add(
                "redis.persistence",
                "warning",
                "AOF is off and CONFIG GET save is refused: cannot tell whether RDB is on",
                "turn AOF on (`appendonly yes`) or confirm snapshots with your provider",
            )
        else:
            self.add(
                "redis.persistence",
                "warning",
                "neither AOF nor RDB: every pending request dies with a Redis restart",
                "set `appendonly yes` (and `appendfsync everysec`) in redis.conf",
            )

    async def _latency(self, redis: Any) -> None:
        rounds = []
        for _ in range(5):
            started = time.perf_counter()
            await redis.ping()
            rounds.append(time.perf_counter() - started)
        median = statistics.median(rounds)
        text = f"round trip {median * 1000:.1f} ms (median of 5 PINGs)"
        if median >= LATENCY_ERROR:
            self.add("redis.latency", "error", text, "run the bot next to its Redis")
        elif median >= LATENCY_WARNING:
            self.add(
                "redis.latency", "warning", text, "run the bot in the same region as its Redis"
            )
        else:
            self.add("redis.latency", "ok", text)

    # -- Slack -----------------------------------------------------------------------

    async def check_slack(self, policy: Policy | None) -> None:
        s = self.settings
        if s.slack_bot_token is None:
            self.add(
                "slack",
                "warning",
                "Slack is not configured: requests are kept but never posted",
                "set SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET (and SLACK_APP_TOKEN for Socket "
                "Mode); see the README's Slack app setup",
            )
            return
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout)) as http:
            client = AsyncWebClient(
                token=s.slack_bot_token.get_secret_value(),
                base_url=s.slack_api_url,
                session=http,
                timeout=int(self.timeout),
            )
            answer = await self._call("slack.auth", client.auth_test)
            if answer is None:
                return
            self.add(
                "slack.auth",
                "ok",
                f"bot {answer.get('user')} ({answer.get('user_id')}) in {answer.get('team')}",
            )
            self._skew(answer.headers)
            self._scopes(answer.headers)
            for channel in self._channels(policy):
                await self._channel(client, channel)
            for group in {r for r in s.approvals_reviewers if is_user_group(r)} | (
                self._policy_groups(policy)
            ):
                await self._group(client, group)
            if s.slack_app_token is not None:
                await self._app_token(http)
            elif self.request_url:
                await self._request_url(http)

    async def _call(
        self, name: str, call: Callable[..., Awaitable[Any]], **kwargs: Any
    ) -> Any | None:
        try:
            return await call(**kwargs)
        except SlackApiError as e:
            error = str(e.response.get("error", "")) or f"http {e.response.status_code}"
            fixes = {
                "invalid_auth": "SLACK_BOT_TOKEN is wrong or revoked: copy the Bot User OAuth "
                "Token (xoxb-…) again from OAuth & Permissions",
                "not_authed": "set SLACK_BOT_TOKEN",
                "account_inactive": "the app was uninstalled: reinstall it to the workspace",
                "token_revoked": "the token was revoked: reinstall the app and copy the token",
            }
            self.add(name, "error", f"Slack refused: {error}", fixes.get(error, ""))
        except Exception as e:
            self.add(
                name,
                "error",
                f"cannot reach Slack at {self.settings.slack_api_url} ({type(e).__name__})",
                "check the network path (proxy, firewall) to slack.com",
            )
        return None

    def _skew(self, headers: Any) -> None:
        date = _header(headers, "date")
        if not date:
            self.add("clock", "warning", "Slack's answer had no Date header: skew not measured")
            return
        try:
            slack_now = parsedate_to_datetime(date).timestamp()
        except (TypeError, ValueError):
            self.add("clock", "warning", f"unreadable Date header {date!r}")
            return
        skew = time.time() - slack_now
        text = f"this clock is {skew:+.0f} s from Slack's"
        fix = "run NTP (chrony, systemd-timesyncd) on this host"
        if abs(skew) > SIGNATURE_WINDOW:
            self.add("clock", "error", text + ": Slack's signed requests will be refused", fix)
        elif abs(skew) > SKEW_WARNING:
            self.add("clock", "warning", text, fix)
        else:
            self.add("clock", "ok", text)

    def _scopes(self, headers: Any) -> None:
        raw = _header(headers, "x-oauth-scopes")
        if raw is None:
            self.add("slack.scopes", "warning", "Slack did not list the token's scopes")
            return
        have = {s.strip() for s in raw.split(",") if s.strip()}
        missing = sorted(MANIFEST_SCOPES - have)
        if missing:
            self.add(
                "slack.scopes",
                "error",
                f"the bot token lacks {', '.join(missing)} (it has {', '.join(sorted(have))})",
                "add them under OAuth & Permissions (or paste config/slack-manifest.yaml again) "
                "and reinstall the app",
            )
        else:
            self.add("slack.scopes", "ok", f"has every manifest scope ({len(have)} scopes)")

    def _channels(self, policy: Policy | None) -> list[str]:
        found = [self.settings.approvals_default_channel or ""]
        if policy is not None:
            found += [r.channel for r in policy.routes.values()]
        return [c for c in dict.fromkeys(found) if c and c != UNROUTED_CHANNEL]

    @staticmethod
    def _policy_groups(policy: Policy | None) -> set[str]:
        if policy is None:
            return set()
        return {r for route in policy.routes.values() for r in route.reviewers if is_user_group(r)}

    async def _channel(self, client: AsyncWebClient, channel: str) -> None:
        name = f"slack.channel.{channel}"
        try:
            answer = await client.conversations_info(channel=channel)
        except SlackApiError as e:
            error = str(e.response.get("error", ""))
            if error == "missing_scope":
                needed = e.response.get("needed", "channels:read")
                self.add(
                    name,
                    "warning",
                    f"cannot look at {channel} without the {needed} scope",
                    f"add {needed} to read channels here, or post a test request to check it",
                )
            elif error == "channel_not_found":
                self.add(
                    name,
                    "error",
                    f"{channel} does not exist, or is private and the bot is not in it",
                    "use the channel's ID (C…/G…; channel details → About) and /invite "
                    "the bot there",
                )
            else:
                self.add(name, "error", f"conversations.info failed: {error}")
            return
        except Exception as e:
            self.add(name, "error", f"conversations.info failed ({type(e).__name__})")
            return
        info = answer.get("channel") or {}
        label = f"{channel} (#{info.get('name', '?')})"
        if info.get("is_archived"):
            self.add(name, "error", f"{label} is archived", "unarchive it or pick another channel")
        elif not info.get("is_member"):
            self.add(
                name,
                "error",
                f"the bot is not a member of {label}: posts fail with not_in_channel",
                f"in #{info.get('name', channel)}: /invite @approval-bot",
            )
        else:
            self.add(name, "ok", f"{label} exists and the bot is a member")

    async def _group(self, client: AsyncWebClient, group: str) -> None:
        name = f"slack.usergroup.{group}"
        try:
            answer = await client.usergroups_users_list(usergroup=group)
        except SlackApiError as e:
            error = str(e.response.get("error", ""))
            self.add(
                name,
                "error",
                f"user group {group} does not resolve: {error}",
                "check the group ID (S…) in APPROVALS_REVIEWERS / the policy, and the "
                "usergroups:read scope",
            )
            return
        except Exception as e:
            self.add(name, "error", f"usergroups.users.list failed ({type(e).__name__})")
            return
        users = answer.get("users") or []
        level: Level = "ok" if users else "warning"
        fix = "" if users else "add members, or nobody in this group can decide"
        self.add(name, level, f"user group {group}: {len(users)} member(s)", fix)

    async def _app_token(self, http: aiohttp.ClientSession) -> None:
        token = self.settings.slack_app_token
        assert token is not None
        client = AsyncWebClient(
            base_url=self.settings.slack_api_url, session=http, timeout=int(self.timeout)
        )
        try:
            await client.apps_connections_open(app_token=token.get_secret_value())
        except SlackApiError as e:
            error = str(e.response.get("error", ""))
            self.add(
                "slack.socket-mode",
                "error",
                f"the app token cannot open a Socket Mode connection: {error}",
                "create an app-level token with connections:write (Basic Information → "
                "App-Level Tokens) and set SLACK_APP_TOKEN; Socket Mode must be on",
            )
            return
        except Exception as e:
            self.add("slack.socket-mode", "error", f"apps.connections.open failed ({e!r})")
            return
        self.add("slack.socket-mode", "ok", "the app token opens a Socket Mode connection")

    async def _request_url(self, http: aiohttp.ClientSession) -> None:
        """POST a signed url_verification, as Slack does when the request URL is saved."""
        url = self.request_url or ""
        secret = self.settings.slack_signing_secret
        challenge = f"doctor-{time.time_ns()}"
        body = json.dumps({"type": "url_verification", "token": "x", "challenge": challenge})
        headers = {"Content-Type": "application/json"}
        if secret is not None:
            ts = str(int(time.time()))
            digest = hmac.new(
                secret.get_secret_value().encode(), f"v0:{ts}:{body}".encode(), hashlib.sha256
            ).hexdigest()
            headers |= {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}"}
        try:
            async with http.post(url, data=body, headers=headers) as resp:
                text = await resp.text()
                status = resp.status
        except Exception as e:
            self.add(
                "slack.request-url",
                "error",
                f"{url} is not reachable ({type(e).__name__})",
                "Slack must reach it over public HTTPS: check DNS, TLS and the proxy in front",
            )
            return
        if status == 200 and challenge in text:
            self.add("slack.request-url", "ok", f"{url} answers Slack's signed url_verification")
        elif status == 401:
            self.add(
                "slack.request-url",
                "error",
                f"{url} refused the signature (401)",
                "SLACK_SIGNING_SECRET differs from the app's (Basic Information → Signing "
                "Secret), or this bot's clock is off",
            )
        else:
            self.add(
                "slack.request-url",
                "error",
                f"{url} answered {status}, not the challenge",
                "the URL must end in /slack/events and reach `approval-bot serve`",
            )

    # -- agents ----------------------------------------------------------------------

    def check_agents(self) -> None:
        codex_home = self.settings.codex_home_or_default
        for agent in ("claude-code", "codex"):
            scopes = ("project", "local", "user") if agent == "claude-code" else ("project", "user")
            files = [
                settings_path(agent, scope, self.project, self.home, codex_home)  # type: ignore[arg-type]
                for scope in scopes
            ]
            if not any(f.exists() for f in files):
                continue
            report = setup_check.check(
                agent,
                project=self.project,
                home=self.home,
                codex_home=codex_home,
            )
            for finding in report.findings:
                if finding.level == "unknown":  # not verified: never an ok
                    self.add(f"agent.{agent}", "warning", f"cannot tell: {finding.text}")
                else:
                    self.add(f"agent.{agent}", finding.level, finding.text)


def _header(headers: Any, name: str) -> str | None:
    for key, value in dict(headers or {}).items():
        if key.lower() == name:
            return str(value[0] if isinstance(value, list) else value)
    return None


def render(checks: list[Check]) -> str:
    labels = {"error": "ERROR", "warning": "warn ", "ok": "ok   "}
    lines = []
    for c in checks:
        lines.append(f"{labels[c.level]} {c.name}: {c.message}")
        if c.fix and c.level != "ok":
            lines.append(f"      fix: {c.fix}")
    errors = sum(c.level == "error" for c in checks)
    warnings = sum(c.level == "warning" for c in checks)
    lines.append(f"{errors} error(s), {warnings} warning(s)")
    return "\n".join(lines)


def run(args: argparse.Namespace, settings: Settings, redis_url: str | None, out: TextIO) -> int:
    """`approval-bot doctor`: exit 0 when no check is an error, else 1."""
    doctor = Doctor(
        settings,
        redis_url,
        request_url=args.request_url,
        project=Path(args.project).resolve(),
    )
    checks = asyncio.run(doctor.run())
    if args.json:
        print(json.dumps({"ok": doctor.ok, "checks": [asdict(c) for c in checks]}), file=out)
    else:
        print(render(checks), file=out)
    return 0 if doctor.ok else 1
