"""The bot's Web API client: its logger's level is set, so slack_sdk formats no debug line
of every payload that nothing would print (it tests `logger.level`, not `isEnabledFor`);
`post_json` (chat.postMessage / chat.update) sends and fails as slack_sdk's path does,
against the emulator; the dispatcher's caller keeps its 429, ok:false and retry rules on it."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import aiohttp
import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_base_client import AsyncBaseClient

from bot.core.context import BotContext
from bot.masking.masker import MASK, Masked
from bot.slack.client import MaskingWebClient
from bot.slack.delivery.calls import Permanent, SlackCaller, Unsure, _without_retries
from bot.slack.render.request_message import _mrkdwn
from tests.support.credentials import (
    APP_TOKEN,
    BOT_TOKEN,
    OTHER_BOT_TOKEN,
    OTHER_SIGNING_SECRET,
    REFRESH_TOKEN,
)
from tests.support.e2e import CHANNEL
from tests.support.slack_emulator import SlackEmulator


@pytest.fixture
def levels() -> Iterator[logging.Logger]:
    """The client logger unset, and the root's level put back afterwards."""
    logger, root = logging.getLogger("slack_sdk.web.bot"), logging.getLogger()
    kept = logger.level, root.level
    logger.setLevel(logging.NOTSET)
    try:
        yield logger
    finally:
        logger.setLevel(kept[0])
        root.setLevel(kept[1])


def test_the_client_logger_has_the_level_in_force(levels: logging.Logger) -> None:
    logging.getLogger().setLevel(logging.WARNING)
    client = MaskingWebClient(token=BOT_TOKEN)
    assert client.logger is levels and levels.level == logging.WARNING
    assert _without_retries(client).logger is levels, "the dispatcher's copy keeps it"


def test_debug_in_force_keeps_the_debug_lines(levels: logging.Logger) -> None:
    logging.getLogger().setLevel(logging.DEBUG)
    assert MaskingWebClient(token=BOT_TOKEN).logger.level == logging.DEBUG


# ---------------------------------------------------------------- post_json against the emulator


async def _client(slack: SlackEmulator, session: aiohttp.ClientSession, *, direct: bool) -> Any:
    """The bot's client as the dispatcher holds it (no retry handlers: `post_json` goes
    straight to the session), or with slack_sdk's default retry handlers (its own path)."""
    client = MaskingWebClient(token=BOT_TOKEN, base_url=slack.api_url, session=session)
    return _without_retries(client) if direct else client


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


@pytest.fixture
def sdk_sends(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The URLs slack_sdk's own request path sent to (`AsyncBaseClient._send`)."""
    sent: list[str] = []
    original = AsyncBaseClient._send

    async def spy(self: Any, http_verb: str, api_url: str, req_args: dict[str, Any]) -> Any:
        sent.append(api_url)
        return await original(self, http_verb, api_url, req_args)

    monkeypatch.setattr(AsyncBaseClient, "_send", spy)
    return sent


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "slack_sdk"])
async def test_post_json_sends_the_fields_masked_and_the_drawn_message_as_it_is(
    slack: SlackEmulator, session: aiohttp.ClientSession, sdk_sends: list[str], direct: bool
) -> None:
    client = await _client(slack, session, direct=direct)
    token = OTHER_BOT_TOKEN  # in content: masked
    drawn = Masked(text="the drawn text", blocks=[{"type": "section", "text": _mrkdwn("hi")}])
    answer = await client.post_json(
        "chat.postMessage",
        {
            "channel": CHANNEL,
            "thread_ts": None,
            "metadata": {"event_type": "t", "event_payload": {"n": token}},
        },
        drawn,
    )
    assert answer["ok"] and answer["channel"] == CHANNEL
    (call,) = slack.calls_to("chat.postMessage")
    assert call.headers["Authorization"] == f"Bearer {BOT_TOKEN}"
    assert call.headers["Content-Type"].startswith("application/json")
    assert "thread_ts" not in call.body, "None values are left out"
    assert call.body["text"] == "the drawn text" and call.body["blocks"] == drawn["blocks"]
    shown = call.body["metadata"]["event_payload"]["n"]
    assert token not in json.dumps(call.body) and shown.startswith(MASK), shown
    assert sdk_sends == ([] if direct else [slack.api_url + "chat.postMessage"])


@pytest.mark.parametrize(
    "fault, status, error, retry_after",
    [
        (lambda s: s.fail_next("chat.update", "message_not_found"), 200, "message_not_found", None),
        (lambda s: s.rate_limit_next("chat.update", retry_after=7), 429, "ratelimited", "7"),
        (lambda s: s.server_error_next("chat.update", status=503), 503, None, None),
    ],
    ids=["ok_false", "429", "html_503"],
)
async def test_post_json_fails_as_slack_sdk_fails(
    slack: SlackEmulator,
    session: aiohttp.ClientSession,
    fault: Callable[[SlackEmulator], None],
    status: int,
    error: str | None,
    retry_after: str | None,
) -> None:
    """What `SlackCaller` reads of a failure (status, Slack's error, Retry-After) is the same
    on the direct path as on slack_sdk's."""
    seen = []
    for direct in (True, False):
        client = await _client(slack, session, direct=direct)
        fault(slack)
        with pytest.raises(SlackApiError) as raised:
            await client.post_json("chat.update", {"channel": CHANNEL, "ts": "1.2", "text": "x"})
        response = raised.value.response
        seen.append(
            (response.status_code, response.get("error"), response.headers.get("Retry-After"))
        )
    assert seen == [(status, error, retry_after)] * 2
    assert len(slack.calls_to("chat.update")) == 2


async def test_post_json_gives_up_after_the_clients_timeout_as_slack_sdk_does(
    slack: SlackEmulator, session: aiohttp.ClientSession
) -> None:
    """The client's `timeout` bounds each call on the direct path too, whatever the session's
    own (the fixture's has aiohttp's default of 5 minutes)."""
    client = await _client(slack, session, direct=True)
    client.timeout = 1
    slack.latency_by_method["chat.postMessage"] = 30.0
    with pytest.raises(asyncio.TimeoutError):
        await client.post_json("chat.postMessage", {"channel": CHANNEL, "text": "hi"})
    assert slack.calls_to("chat.postMessage") == []  # the emulator was still sleeping


async def test_post_json_takes_slack_sdks_path_when_the_session_is_gone(
    slack: SlackEmulator, sdk_sends: list[str]
) -> None:
    async with aiohttp.ClientSession() as closed:
        client = await _client(slack, closed, direct=True)
    answer = await client.post_json("chat.postMessage", {"channel": CHANNEL, "text": "hi"})
    assert answer["ok"] and sdk_sends == [slack.api_url + "chat.postMessage"]


# ---------------------------------------------------------------- the caller on that path


def _caller(client: Any, **kw: Any) -> SlackCaller:
    ctx = BotContext(redis=None, keys=None, store=None, service=None, waiter=None, slack=client)  # type: ignore[arg-type]
    options: dict[str, Any] = dict(
        post_interval=1.0,
        burst=3,
        pacing=False,
        max_attempts=3,
        backoff_base=0.01,
        backoff_max=0.01,
    )
    return SlackCaller(ctx, **(options | kw))


async def test_the_caller_waits_out_a_429_and_posts_once(
    slack: SlackEmulator, session: aiohttp.ClientSession
) -> None:
    caller = _caller(await _client(slack, session, direct=False))
    assert caller.client.retry_handlers == [], "the caller's copy goes the direct way"
    slack.rate_limit_next("chat.postMessage", retry_after=1)
    drawn = Masked(text="hello", blocks=[])
    answer = await caller.call(
        CHANNEL, "chat_postMessage", channel=CHANNEL, once=True, message=drawn
    )
    assert answer["ok"]
    assert [c.status for c in slack.calls_to("chat.postMessage")] == [429, 200]
    assert len(slack.messages_in(CHANNEL)) == 1
    assert caller.pace(CHANNEL).blocked_until > 0, "the channel was held back"


async def test_the_caller_raises_permanent_and_unsure_as_before(
    slack: SlackEmulator, session: aiohttp.ClientSession
) -> None:
    caller = _caller(await _client(slack, session, direct=True))
    slack.fail_next("chat.postMessage", "not_in_channel")
    with pytest.raises(Permanent) as refused:
        await caller.call(CHANNEL, "chat_postMessage", channel=CHANNEL, once=True, text="x")
    assert refused.value.error == "not_in_channel"
    slack.server_error_next("chat.postMessage", status=502)
    with pytest.raises(Unsure):
        await caller.call(CHANNEL, "chat_postMessage", channel=CHANNEL, once=True, text="x")
    # An update may be sent again: tried until it goes through (3 attempts at most).
    posted = await caller.call(CHANNEL, "chat_postMessage", channel=CHANNEL, text="x")
    slack.server_error_next("chat.update", status=500, times=2)
    await caller.call(CHANNEL, "chat_update", channel=CHANNEL, ts=posted["ts"], text="y")
    assert [c.status for c in slack.calls_to("chat.postMessage")] == [200, 502, 200]
    assert [c.status for c in slack.calls_to("chat.update")] == [500, 500, 200]
    assert slack.messages[(CHANNEL, posted["ts"])]["text"] == "y"


# ------------------------------------------------------- credentials pass, content is masked


def _leaky(text: str = "deploy") -> str:
    """A message text with two credentials in it, as an agent's argument might carry them."""
    return f"{text} with {OTHER_BOT_TOKEN} and {APP_TOKEN}"


def _masked_text(call: Any) -> str:
    text = str(call.body["text"])
    assert OTHER_BOT_TOKEN not in text and APP_TOKEN not in text and MASK in text, text
    return text


async def test_the_app_token_reaches_apps_connections_open_untouched(
    slack: SlackEmulator, session: aiohttp.ClientSession
) -> None:
    """Slack_sdk passes the app-level token as the call's `token` parameter; masked,
    Slack got `Bearer ••••••(64+ chars)`, answered invalid_auth, and Socket Mode never
    connected."""
    client = await _client(slack, session, direct=False)
    answer = await client.apps_connections_open(app_token=APP_TOKEN)
    assert answer["ok"] and answer["url"].startswith("ws://")
    (call,) = slack.calls_to("apps.connections.open")
    assert (call.token, call.token_from) == (APP_TOKEN, "header")
    assert call.headers["Authorization"] == f"Bearer {APP_TOKEN}"


@pytest.mark.parametrize("way", ["form", "json", "post_json_direct", "post_json_sdk"])
async def test_a_token_beside_secrets_in_content_goes_as_it_is_and_the_content_masked(
    slack: SlackEmulator, session: aiohttp.ClientSession, way: str
) -> None:
    """A token in the credential position (`token`, a real bot token, one the masker would
    mask) is sent as it is, next to a text and metadata that carry secrets (another bot
    token, the app token, a `token` key inside the metadata): those are masked."""
    client = await _client(slack, session, direct=way != "post_json_sdk")
    client.token = None  # the call's own `token` is its only credential
    metadata = {"event_type": "t", "event_payload": {"token": APP_TOKEN}}
    fields = {"token": BOT_TOKEN, "channel": CHANNEL, "text": _leaky(), "metadata": metadata}
    if way == "form":
        form = {**fields, "metadata": json.dumps(metadata)}
        answer = await client.api_call("chat.postMessage", data=form)
    elif way == "json":
        answer = await client.api_call("chat.postMessage", json=fields)
    else:
        answer = await client.post_json("chat.postMessage", fields)
    assert answer["ok"]
    (call,) = slack.calls_to("chat.postMessage")
    assert call.token == BOT_TOKEN
    assert call.token_from == ("form" if way == "form" else "header")
    _masked_text(call)
    shown = json.dumps(call.body["metadata"], ensure_ascii=False)
    assert APP_TOKEN not in shown and MASK in shown, shown


async def test_oauth_credentials_go_as_they_are(
    slack: SlackEmulator, session: aiohttp.ClientSession
) -> None:
    """`client_id`, `client_secret`, `code`, `refresh_token`: the OAuth methods' credentials
    (a refresh token is one the masker would mask). The emulator does not answer OAuth; it
    records what arrived."""
    client = await _client(slack, session, direct=False)
    form = {
        "client_id": "4123121235.9872358710",
        "client_secret": OTHER_SIGNING_SECRET,
        "grant_type": "refresh_token",
        "refresh_token": REFRESH_TOKEN,
    }
    with pytest.raises(SlackApiError):
        await client.api_call("oauth.v2.access", data=form)
    (call,) = slack.calls_to("oauth.v2.access")
    assert call.body == form


#: Each Web API method the bot calls (bot/slack/…), as the bot calls it, with a text that
#: carries secrets where the method takes one.
BOT_CALLS: dict[str, Callable[[Any], Any]] = {
    "auth.test": lambda c: c.auth_test(),
    "chat.postMessage": lambda c: c.chat_postMessage(channel=CHANNEL, text=_leaky()),
    "chat.update": lambda c: c.chat_update(channel=CHANNEL, ts="1.2", text=_leaky()),
    "chat.postEphemeral": lambda c: c.chat_postEphemeral(
        channel=CHANNEL, user="U0ALICE", text=_leaky()
    ),
    "chat.getPermalink": lambda c: c.chat_getPermalink(channel=CHANNEL, message_ts="1.2"),
    "views.open": lambda c: c.views_open(
        trigger_id="1.2.a", view={"type": "modal", "title": _plain("x"), "blocks": []}
    ),
    "views.update": lambda c: c.views_update(view_id="V1", view={"type": "modal"}),
    "views.publish": lambda c: c.views_publish(
        user_id="U0ALICE", view={"type": "home", "blocks": [_section(_leaky())]}
    ),
    "usergroups.users.list": lambda c: c.usergroups_users_list(usergroup="S0ONCALL"),
    "users.info": lambda c: c.users_info(user="U0ALICE"),
    "conversations.open": lambda c: c.conversations_open(users="U0ALICE"),
    "conversations.info": lambda c: c.conversations_info(channel=CHANNEL),
    "conversations.history": lambda c: c.conversations_history(channel=CHANNEL, limit=5),
}


def _plain(text: str) -> dict[str, Any]:
    return {"type": "plain_text", "text": text}


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


@pytest.mark.parametrize("method", sorted(BOT_CALLS))
async def test_every_method_the_bot_calls_presents_the_bot_token_untouched(
    slack: SlackEmulator, session: aiohttp.ClientSession, method: str
) -> None:
    """Whatever Slack then answers (a made-up ts, view id or trigger), the call came with the
    exact bot token in its header and was not refused for it; texts in it are masked."""
    slack.add_usergroup("S0ONCALL", ["U0ALICE"])
    client = await _client(slack, session, direct=False)
    try:
        await BOT_CALLS[method](client)
    except SlackApiError as e:
        assert e.response["error"] not in {"invalid_auth", "not_authed"}, e.response
    (call,) = slack.calls_to(method)
    assert (call.token, call.token_from) == (BOT_TOKEN, "header")
    assert call.response is not None and call.response.get("error") not in {
        "invalid_auth",
        "not_authed",
        "not_allowed_token_type",
    }
    shown = json.dumps(call.body)
    assert OTHER_BOT_TOKEN not in shown and APP_TOKEN not in shown, shown
