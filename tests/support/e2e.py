"""End-to-end harness: the real bot (aiohttp + bolt) on real Redis, Slack emulated at the edge.

A pytest plugin (`pytest_plugins` in `tests/conftest.py`): its fixtures (`slack`, `make_bot`,
`http`, `reviewer`) are available to every test; its helpers are imported from here."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import aiohttp
import pytest

from approvals._internal.policy import Policy
from approvals._internal.store.keys import Keys
from bot.core.app import Bot, BotConfig
from bot.slack.delivery.dispatcher import DispatcherOptions
from tests.support.credentials import API_TOKEN, BOT_TOKEN, SIGNING_SECRET, VERIFICATION_TOKEN
from tests.support.slack_emulator import SlackEmulator

# SIGNING_SECRET lives in tests.support.credentials; tests import it from here too.

CHANNEL = "C0APPROVALS"
TEAM = "T0EMULATED"


@pytest.fixture
async def slack() -> AsyncIterator[SlackEmulator]:
    async with SlackEmulator(channels={CHANNEL, "C0OPS", "C0SECURITY"}) as emulator:
        yield emulator


def bot_config(redis_url: str, keys: Keys, slack: SlackEmulator | None, **kw: Any) -> BotConfig:
    options = kw.pop(
        "dispatcher",
        DispatcherOptions(pacing=False, read_block_ms=200, backoff_base=0.05, backoff_max=1.0),
    )
    return BotConfig(
        redis_url=redis_url,
        prefix=keys.prefix,
        host="127.0.0.1",
        port=0,
        slack_bot_token=BOT_TOKEN if slack else None,
        slack_signing_secret=SIGNING_SECRET if slack else None,
        slack_api_url=slack.api_url if slack else "https://slack.com/api/",
        api_tokens=kw.pop("api_tokens", (API_TOKEN,)),
        default_channel=CHANNEL,
        consumer=f"c-{uuid.uuid4().hex[:6]}",
        dispatcher=options,
        sweep_interval=0.2,
        **kw,
    )


BotFactory = Callable[..., Awaitable[Bot]]


def fast_dispatcher(**kw: Any) -> DispatcherOptions:
    """The dispatcher with short reads, backoffs, heartbeats and reaps (a dead bot's work is
    taken over within a second), Slack pacing off; `kw` overrides any option."""
    options: dict[str, Any] = {
        "pacing": False,
        "read_block_ms": 100,
        "backoff_base": 0.05,
        "backoff_max": 0.3,
        "heartbeat_interval": 0.1,
        "heartbeat_ttl": 0.5,
        "reap_interval": 0.1,
    }
    return DispatcherOptions(**(options | kw))


@pytest.fixture
async def make_bot(
    redis_url: str, keys: Keys, slack: SlackEmulator, redis: Any
) -> AsyncIterator[BotFactory]:
    """Start bots (replicas) on this test's prefix; all are stopped at teardown."""
    bots: list[Bot] = []

    async def factory(policy: Policy | None = None, **kw: Any) -> Bot:
        use_slack = kw.pop("with_slack", True)
        bot = Bot(bot_config(redis_url, keys, slack if use_slack else None, **kw), policy)
        await bot.start()
        bots.append(bot)
        return bot

    yield factory
    for bot in reversed(bots):
        if bot.ctx is not None:
            await bot.stop()


def sign(
    body: str, *, secret: str = SIGNING_SECRET, timestamp: int | None = None
) -> dict[str, str]:
    ts = str(int(time.time()) if timestamp is None else timestamp)
    digest = hmac.new(secret.encode(), f"v0:{ts}:{body}".encode(), hashlib.sha256).hexdigest()
    return {
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": f"v0={digest}",
        "Content-Type": "application/x-www-form-urlencoded",
    }


def click_payload(
    user: dict[str, Any],
    message: dict[str, Any],
    channel: str,
    action_id: str,
    response_url: str,
    value: str | None = None,
    selected: str | None = None,
) -> dict[str, Any]:
    """The `block_actions` payload Slack sends when `user` (`Reviewer._user`'s shape) clicks
    the element `action_id` of `message` (a button, or a select's option `selected`)."""
    element: dict[str, Any] = {}
    block_id = "approval_actions"
    for block in message.get("blocks", []):
        for el in block.get("elements", []) if block.get("type") == "actions" else []:
            if el.get("action_id") == action_id:
                element = el
        accessory = block.get("accessory") or {}
        if accessory.get("action_id") == action_id:  # a section's button (Details)
            element, block_id = accessory, str(block.get("block_id") or "section")
    assert element, f"no element {action_id!r} in the message"
    action: dict[str, Any] = {
        "action_id": action_id,
        "block_id": block_id,
        "type": element["type"],
        "action_ts": f"{time.time():.6f}",
    }
    if element["type"] == "button":
        action["value"] = value if value is not None else element.get("value")
        action["text"] = element.get("text")
    else:
        opts = element.get("options", [])
        chosen = next(o for o in opts if o["value"] == selected)
        action["selected_option"] = chosen
    return {
        "type": "block_actions",
        "user": user,
        "api_app_id": "A0APPID",
        "token": VERIFICATION_TOKEN,
        "team": {"id": TEAM, "domain": "emulated"},
        "container": {
            "type": "message",
            "message_ts": message["ts"],
            "channel_id": channel,
            "is_ephemeral": False,
        },
        "trigger_id": f"{uuid.uuid4().int % 10**12}.{uuid.uuid4().hex[:8]}",
        "channel": {"id": channel, "name": "approvals"},
        "message": message,
        "response_url": response_url,
        "actions": [action],
    }


@dataclass
class Reviewer:
    """Sends signed interaction payloads to a bot's /slack/events as Slack would."""

    user: str
    slack: SlackEmulator
    session: aiohttp.ClientSession
    last_status: int = 0
    last_body: str = ""
    extra_headers: dict[str, str] = field(default_factory=dict)

    def _user(self) -> dict[str, Any]:
        return {
            "id": self.user,
            "username": self.user.lower(),
            "name": self.user.lower(),
            "team_id": TEAM,
        }

    async def send(
        self,
        bot: Bot,
        payload: dict[str, Any],
        *,
        secret: str = SIGNING_SECRET,
        timestamp: int | None = None,
    ) -> int:
        body = urlencode({"payload": json.dumps(payload)})
        headers = sign(body, secret=secret, timestamp=timestamp)
        async with self.session.post(
            f"http://127.0.0.1:{bot.port}/slack/events", data=body, headers=headers
        ) as resp:
            self.last_status = resp.status
            self.last_body = await resp.text()
            return resp.status

    def click_payload(
        self,
        message: dict[str, Any],
        channel: str,
        action_id: str,
        value: str | None = None,
        selected: str | None = None,
    ) -> dict[str, Any]:
        response_url = self.slack.response_url(f"act-{uuid.uuid4().hex[:6]}")
        return click_payload(
            self._user(), message, channel, action_id, response_url, value, selected
        )

    async def click(
        self, bot: Bot, message: dict[str, Any], channel: str, action_id: str, **kw: Any
    ) -> int:
        return await self.send(bot, self.click_payload(message, channel, action_id, **kw))

    def submit_payload(
        self, view: dict[str, Any], values: dict[str, dict[str, str]]
    ) -> dict[str, Any]:
        state = {
            block: {
                action: {"type": "plain_text_input", "value": value}
                for action, value in actions.items()
            }
            for block, actions in values.items()
        }
        return {
            "type": "view_submission",
            "team": {"id": TEAM, "domain": "emulated"},
            "user": self._user(),
            "api_app_id": "A0APPID",
            "token": VERIFICATION_TOKEN,
            "trigger_id": f"{uuid.uuid4().int % 10**12}.{uuid.uuid4().hex[:8]}",
            "view": {
                **view,
                "id": "V" + uuid.uuid4().hex[:8].upper(),
                "team_id": TEAM,
                "state": {"values": state},
                "hash": "h",
            },
        }

    async def submit(
        self, bot: Bot, view: dict[str, Any], values: dict[str, dict[str, str]]
    ) -> int:
        return await self.send(bot, self.submit_payload(view, values))

    async def _post(self, bot: Bot, body: str, content_type: str) -> int:
        headers = sign(body) | {"Content-Type": content_type}
        async with self.session.post(
            f"http://127.0.0.1:{bot.port}/slack/events", data=body, headers=headers
        ) as resp:
            self.last_status = resp.status
            self.last_body = await resp.text()
            return resp.status

    async def slash(self, bot: Bot, text: str = "", channel: str = "C0APPROVALS") -> int:
        """`/approvals <text>` typed in `channel`, as Slack sends a slash command (a signed
        form body); the bot's ephemeral answer is in `last_body`."""
        body = urlencode(
            {
                "token": VERIFICATION_TOKEN,
                "team_id": TEAM,
                "team_domain": "emulated",
                "channel_id": channel,
                "channel_name": "approvals",
                "user_id": self.user,
                "user_name": self.user.lower(),
                "command": "/approvals",
                "text": text,
                "api_app_id": "A0APPID",
                "response_url": self.slack.response_url(f"cmd-{uuid.uuid4().hex[:6]}"),
                "trigger_id": f"{uuid.uuid4().int % 10**12}.{uuid.uuid4().hex[:8]}",
            }
        )
        return await self._post(bot, body, "application/x-www-form-urlencoded")

    async def open_home(self, bot: Bot, tab: str = "home") -> int:
        """The person opens the app's Home tab: Slack's signed `app_home_opened` event."""
        event = {
            "type": "app_home_opened",
            "user": self.user,
            "channel": "D0HOME",
            "tab": tab,
            "event_ts": f"{time.time():.6f}",
        }
        body = json.dumps(
            {
                "token": VERIFICATION_TOKEN,
                "team_id": TEAM,
                "api_app_id": "A0APPID",
                "event": event,
                "type": "event_callback",
                "event_id": "Ev" + uuid.uuid4().hex[:10].upper(),
                "event_time": int(time.time()),
            }
        )
        return await self._post(bot, body, "application/json")

    def home_click_payload(
        self, view: dict[str, Any], action_id: str, request_id: str
    ) -> dict[str, Any]:
        """A click on a button of the person's published Home tab (`view`)."""
        element: dict[str, Any] = {}
        block_id = ""
        for block in view.get("blocks", []):
            found = block.get("elements", []) if block.get("type") == "actions" else []
            found = [*found, *([block["accessory"]] if "accessory" in block else [])]
            for el in found:
                if el.get("action_id") == action_id and str(el.get("value", "")).startswith(
                    request_id
                ):
                    element, block_id = el, str(block.get("block_id") or "section")
        assert element, f"no {action_id!r} for {request_id} on the Home tab"
        return {
            "type": "block_actions",
            "user": self._user(),
            "api_app_id": "A0APPID",
            "token": VERIFICATION_TOKEN,
            "team": {"id": TEAM, "domain": "emulated"},
            "container": {"type": "view", "view_id": view["id"]},
            "trigger_id": f"{uuid.uuid4().int % 10**12}.{uuid.uuid4().hex[:8]}",
            "view": view,
            "actions": [
                {
                    "action_id": action_id,
                    "block_id": block_id,
                    "type": "button",
                    "value": element["value"],
                    "text": element.get("text"),
                    "action_ts": f"{time.time():.6f}",
                }
            ],
        }


def bash_pre_tool_use(command: str, session: str = "sess-shell") -> dict[str, Any]:
    """Claude Code's PreToolUse event for a Bash call, as its hooks send it."""
    return {
        "session_id": session,
        "transcript_path": "/tmp/transcript.jsonl",
        "cwd": "/srv/app",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": command, "description": "run it"},
        "tool_use_id": f"toolu_{time.monotonic_ns()}",
        "permission_mode": "default",
    }


async def bash_hook(
    http: aiohttp.ClientSession, bot: Bot, command: str, query: str = "timeout=30"
) -> dict[str, Any]:
    """`POST /hooks/claude-code` of a Bash call; the answer's `hookSpecificOutput`."""
    url = f"http://127.0.0.1:{bot.port}/hooks/claude-code?{query}"
    headers = {"Authorization": f"Bearer {API_TOKEN}"}
    async with http.post(url, json=bash_pre_tool_use(command), headers=headers) as resp:
        assert resp.status == 200
        body: dict[str, Any] = await resp.json()
    return body["hookSpecificOutput"]


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
def reviewer(slack: SlackEmulator, http: aiohttp.ClientSession) -> Callable[[str], Reviewer]:
    return lambda user: Reviewer(user, slack, http)


def posted_message(slack: SlackEmulator, request_id: str) -> tuple[str, dict[str, Any]]:
    """The (channel, message) the bot posted for `request_id` (as it stands now)."""
    for (channel, _ts), message in slack.messages.items():
        text = json.dumps(message.get("blocks", []))
        if request_id in text:
            return channel, message
    raise AssertionError(f"no message posted for {request_id}")


async def opened_view(slack: SlackEmulator) -> dict[str, Any]:
    """The view of the bot's only `views.open` call so far (waiting for it), decoded."""
    (opened,) = await slack.wait_for("views.open", 1)
    view = opened.body["view"]
    decoded: dict[str, Any] = json.loads(view) if isinstance(view, str) else view
    return decoded


def has_actions(message: dict[str, Any]) -> bool:
    return any(b.get("type") == "actions" for b in message.get("blocks", []))


@asynccontextmanager
async def sweeper_held(bot: Bot) -> AsyncIterator[None]:
    """Hold `bot`'s sweeper for the block: a test with a sub-second deadline that needs the
    request's message posted first (on a loaded machine the post can take longer than the
    deadline, and a request decided or escalated before it is posted is never posted on its
    first route). The real sweeper still does the expiry once the block ends."""
    assert bot.sweeper is not None
    await bot.sweeper.stop()
    try:
        yield
    finally:
        await bot.sweeper.start()
