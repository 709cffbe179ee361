"""Socket Mode end to end with real-shaped tokens: the real bot (bolt's Socket Mode
handler, slack_sdk's Socket Mode client, the bot's masking Web API client) against the
emulator, which takes the app-level token `xapp-1-…` only in `apps.connections.open`'s
Authorization header and the bot token `xoxb-…` only on the other methods, as Slack does.

The bot once masked its own app-level token on the way out (it looks like a secret, and it
is one), so Slack answered `invalid_auth` and Socket Mode never connected; the suite did not
see it because its stand-in `xapp-test` did not look like a secret."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import aiohttp

from approvals.models import ApprovalConfig, ApprovalEvent
from bot.slack import action_ids as ids
from tests.support.credentials import APP_TOKEN, BOT_TOKEN, SIGNING_SECRET, VERIFICATION_TOKEN
from tests.support.e2e import TEAM, BotFactory, has_actions, posted_message
from tests.support.slack_emulator import Call, SlackEmulator

#: The Slack errors of a refused credential.
AUTH_ERRORS = {"not_authed", "invalid_auth", "not_allowed_token_type", "token_revoked"}


def presented(calls: list[Call]) -> set[tuple[str, str | None, str | None]]:
    """(method, token, where) of each call, and no call refused for its credential."""
    refused = [
        (c.method, c.response) for c in calls if (c.response or {}).get("error") in AUTH_ERRORS
    ]
    assert refused == []
    return {(c.method, c.token, c.token_from) for c in calls}


async def health(port: int) -> dict[str, Any]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{port}/healthz") as resp,
    ):
        return dict(await resp.json())


async def test_socket_mode_connects_with_a_real_app_token_and_a_click_decides(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    """The app-level token reaches apps.connections.open exactly as configured, the socket
    opens, a request whose arguments carry both of the bot's own tokens is posted with them
    masked, a click over the socket decides it, and every call the bot made presented its
    own token untouched."""
    bot = await make_bot(slack_app_token=APP_TOKEN)
    assert bot.ctx is not None and bot.slack_link is not None
    await slack.wait_until(lambda: slack.socket_connections == 1, 15, "the socket")
    (opened,) = slack.calls_to("apps.connections.open")
    assert (opened.token, opened.token_from, opened.ok) == (APP_TOKEN, "header", True)
    await slack.wait_until(lambda: bot.slack_link is not None and bot.slack_link.state == "ok")
    assert (await health(bot.port))["slack"] == "ok"

    leaky = {"env": "prod", "note": f"bot {BOT_TOKEN} app {APP_TOKEN} sig {SIGNING_SECRET}"}
    request = await bot.ctx.service.submit(ApprovalEvent(tool_name="deploy", arguments=leaky))
    waiting = asyncio.create_task(bot.ctx.waiter.wait(request.id, timeout=15))
    await slack.wait_for("chat.postMessage", 1, ok=True)
    channel, message = posted_message(slack, request.id)
    shown = json.dumps(message, ensure_ascii=False)
    assert BOT_TOKEN not in shown and APP_TOKEN not in shown and "••••••" in shown

    payload = reviewer("U0SOCK").click_payload(message, channel, ids.APPROVE)
    ack = await slack.socket_send_interactive(payload)
    assert "envelope_id" in ack
    decided = await waiting
    assert decided.status == "approved" and decided.decision is not None
    assert decided.decision.decided_by == "U0SOCK"
    await slack.wait_for("chat.update", 1, ok=True)
    assert not has_actions(posted_message(slack, request.id)[1])

    sent = json.dumps([c.body for c in slack.calls], ensure_ascii=False)
    assert BOT_TOKEN not in sent and APP_TOKEN not in sent, "no token in any content"
    assert presented(slack.calls) >= {
        ("auth.test", BOT_TOKEN, "header"),
        ("apps.connections.open", APP_TOKEN, "header"),
        ("chat.postMessage", BOT_TOKEN, "header"),
        ("chat.update", BOT_TOKEN, "header"),
    }
    assert {c.token for c in slack.calls} == {BOT_TOKEN, APP_TOKEN}


async def test_a_reconnect_opens_a_new_socket_with_the_same_app_token(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    """Slack asks a client to reconnect (`disconnect`, refresh_requested) every few hours:
    slack_sdk calls apps.connections.open again, with the app token as it was."""
    bot = await make_bot(slack_app_token=APP_TOKEN)
    assert bot.ctx is not None
    await slack.wait_until(lambda: slack.socket_connections == 1, 15, "the socket")
    await slack.socket_disconnect()
    await slack.wait_for("apps.connections.open", 2, ok=True)
    await slack.wait_until(lambda: slack.socket_connections >= 1, 15, "a new socket")
    opened = slack.calls_to("apps.connections.open")
    assert [(c.token, c.token_from) for c in opened] == [(APP_TOKEN, "header")] * len(opened)


async def test_app_home_over_the_socket_publishes_with_the_bot_token(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    """An `app_home_opened` event over the socket: views.publish goes with the bot token (the
    app-level token is for apps.connections.open only)."""
    bot = await make_bot(slack_app_token=APP_TOKEN)
    assert bot.ctx is not None
    event = {
        "type": "app_home_opened",
        "user": "U0ALICE",
        "channel": "D0HOME",
        "tab": "home",
        "event_ts": f"{time.time():.6f}",
    }
    envelope = {
        "team_id": TEAM,
        "api_app_id": "A0APPID",
        "event": event,
        "type": "event_callback",
        "event_id": "Ev" + uuid.uuid4().hex[:10].upper(),
        "event_time": int(time.time()),
    }
    await slack.socket_send("events_api", envelope)
    (published,) = await slack.wait_for("views.publish", 1, ok=True)
    assert (published.token, published.token_from) == (BOT_TOKEN, "header")
    assert published.body["user_id"] == "U0ALICE"


async def test_a_revoked_app_token_is_one_error_naming_slack_app_token(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    """The emulator refuses the app token as Slack refuses a revoked one: the bot stops
    trying and /healthz says why."""
    slack.revoke(APP_TOKEN)
    bot = await make_bot(slack_app_token=APP_TOKEN)
    await slack.wait_until(
        lambda: bot.slack_link is not None and bot.slack_link.state.startswith("error"),
        15,
        "the refusal",
    )
    assert bot.slack_link is not None
    assert "token_revoked" in bot.slack_link.state and "SLACK_APP_TOKEN" in bot.slack_link.state
    assert slack.socket_connections == 0
    assert len(slack.calls_to("apps.connections.open")) == 1, "not retried"
    assert (await health(bot.port))["slack"] == bot.slack_link.state


async def test_a_slash_command_over_the_socket_answers_with_content_masked(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    """In Socket Mode an ack's payload (the `/approvals` list) goes back over the socket, not
    through the HTTP endpoint's way out: what it shows of a request is masked all the same."""
    bot = await make_bot(slack_app_token=APP_TOKEN)
    assert bot.ctx is not None
    prompt = f"rotate {BOT_TOKEN} and {APP_TOKEN}"
    event = ApprovalEvent(tool_name="deploy", arguments={"token": BOT_TOKEN})
    request = await bot.ctx.service.submit(event, ApprovalConfig(prompt=prompt))
    await slack.wait_for("chat.postMessage", 1, ok=True)
    command = {
        "token": VERIFICATION_TOKEN,
        "team_id": TEAM,
        "channel_id": "C0APPROVALS",
        "user_id": "U0ALICE",
        "command": "/approvals",
        "text": "",
        "api_app_id": "A0APPID",
        "response_url": slack.response_url("slash"),
        "trigger_id": "1.2.abc",
    }
    for text in ("", request.id):
        ack = await slack.socket_send("slash_commands", {**command, "text": text})
        shown = json.dumps(ack, ensure_ascii=False)
        assert request.id in shown, shown
        assert BOT_TOKEN not in shown and APP_TOKEN not in shown and "••••••" in shown
