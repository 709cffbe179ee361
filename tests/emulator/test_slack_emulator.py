"""The Slack emulator, driven by the real slack_sdk clients the bot uses."""

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook.async_client import AsyncWebhookClient

from tests.support.credentials import APP_TOKEN, BOT_TOKEN, OTHER_APP_TOKEN, OTHER_BOT_TOKEN
from tests.support.slack_emulator import SlackEmulator

TS = re.compile(r"^\d{10}\.\d{6}$")
SECTION = {"type": "section", "text": {"type": "mrkdwn", "text": "Approve *deploy*?"}}


@pytest.fixture
async def slack() -> AsyncIterator[SlackEmulator]:
    async with SlackEmulator() as emulator:
        yield emulator


@pytest.fixture
def client(slack: SlackEmulator) -> AsyncWebClient:
    web = AsyncWebClient(token=BOT_TOKEN, base_url=slack.api_url)
    web.retry_handlers.clear()  # see every 429 / 5xx ourselves
    return web


async def api_error(call: Any) -> SlackApiError:
    with pytest.raises(SlackApiError) as info:
        await call
    return info.value


async def test_api_url_ends_with_slash_and_port_is_ephemeral(slack: SlackEmulator) -> None:
    assert slack.api_url.endswith("/api/")
    assert slack.api_url.startswith("http://127.0.0.1:")
    assert slack.port > 0


async def test_auth_test_identifies_the_bot(slack: SlackEmulator, client: AsyncWebClient) -> None:
    res = await client.auth_test()
    assert res["ok"] is True
    assert res["user_id"] == slack.BOT_USER_ID
    assert res["bot_id"] == slack.BOT_ID
    assert res["team_id"] == slack.TEAM_ID
    assert res["url"].startswith("https://")
    assert slack.calls[0].headers["Authorization"] == f"Bearer {BOT_TOKEN}"


async def test_post_message_shape_and_recording(
    slack: SlackEmulator, client: AsyncWebClient
) -> None:
    first = await client.chat_postMessage(channel="C1", text="hello", blocks=[SECTION])
    second = await client.chat_postMessage(channel="C1", text="again")
    assert first["channel"] == "C1"
    assert TS.match(first["ts"]) and TS.match(second["ts"])
    assert float(second["ts"]) > float(first["ts"])
    assert first["message"]["text"] == "hello"
    assert first["message"]["blocks"] == [SECTION]
    assert first["message"]["bot_id"] == slack.BOT_ID
    assert first["message"]["ts"] == first["ts"]
    assert slack.messages[("C1", first["ts"])]["blocks"] == [SECTION]
    assert [m["text"] for m in slack.messages_in("C1")] == ["hello", "again"]
    (call, _) = slack.calls_to("chat.postMessage")
    assert call.body == {"channel": "C1", "text": "hello", "blocks": [SECTION]}
    assert call.ok and call.status == 200


async def test_form_encoded_bodies_decode_json_fields(
    slack: SlackEmulator, client: AsyncWebClient
) -> None:
    data = {"channel": "C9", "text": "form", "blocks": json.dumps([SECTION])}
    res = await client.api_call("chat.postMessage", data=data)
    assert res["message"]["blocks"] == [SECTION]
    assert slack.calls_to("chat.postMessage")[0].body["blocks"] == [SECTION]
    # token in the form body instead of a header is accepted too, as by Slack
    anonymous = AsyncWebClient(base_url=slack.api_url)
    res = await anonymous.api_call("auth.test", data={"token": BOT_TOKEN})
    assert res["user_id"] == slack.BOT_USER_ID


async def test_update_replaces_message_and_keeps_blocks_when_absent(
    slack: SlackEmulator, client: AsyncWebClient
) -> None:
    posted = await client.chat_postMessage(channel="C1", text="pending", blocks=[SECTION])
    ts = posted["ts"]
    res = await client.chat_update(channel="C1", ts=ts, text="approved by <@U1>")
    assert res["ts"] == ts and res["channel"] == "C1"
    assert res["text"] == "approved by <@U1>"
    stored = slack.messages[("C1", ts)]
    assert stored["text"] == "approved by <@U1>" and stored["blocks"] == [SECTION]
    assert "edited" in stored
    await client.chat_update(channel="C1", ts=ts, text="done", blocks=[])
    assert "blocks" not in slack.messages[("C1", ts)]
    err = await api_error(client.chat_update(channel="C1", ts="1.000001", text="x"))
    assert err.response["error"] == "message_not_found"


async def test_ephemeral_views_usergroups_users_and_dms(
    slack: SlackEmulator, client: AsyncWebClient
) -> None:
    slack.add_usergroup("S1", ["U1", "U2"])
    eph = await client.chat_postEphemeral(channel="C1", user="U1", text="not yours")
    assert TS.match(eph["message_ts"])
    assert slack.calls_to("chat.postEphemeral")[0].body["user"] == "U1"

    view = {
        "type": "modal",
        "callback_id": "deny_reason",
        "title": {"type": "plain_text", "text": "Deny"},
        "blocks": [SECTION],
        "private_metadata": "req-1",
    }
    opened = await client.views_open(trigger_id="123.456.abc", view=view)
    assert opened["view"]["id"].startswith("V")
    assert opened["view"]["callback_id"] == "deny_reason"
    assert opened["view"]["private_metadata"] == "req-1"
    assert opened["view"]["state"] == {"values": {}}
    updated = await client.views_update(
        view_id=opened["view"]["id"], view=view | {"private_metadata": "req-2"}
    )
    assert updated["view"]["private_metadata"] == "req-2"
    err = await api_error(client.views_open(trigger_id=None, view=view))
    assert err.response["error"] == "invalid_trigger_id"
    bad = view | {"title": {"type": "plain_text", "text": "x" * 25}}
    err = await api_error(client.views_open(trigger_id="1.2.3", view=bad))
    assert err.response["error"] == "invalid_arguments"

    assert (await client.usergroups_users_list(usergroup="S1"))["users"] == ["U1", "U2"]
    err = await api_error(client.usergroups_users_list(usergroup="S404"))
    assert err.response["error"] == "no_such_subteam"

    user = (await client.users_info(user="U1"))["user"]
    assert user["id"] == "U1" and user["profile"]["display_name"] == user["name"]
    err = await api_error(client.users_info(user="nobody"))
    assert err.response["error"] == "user_not_found"

    dm = await client.conversations_open(users="U1")
    assert dm["channel"]["id"].startswith("D")
    assert (await client.conversations_open(users=["U1"]))["channel"]["id"] == dm["channel"]["id"]
    posted = await client.chat_postMessage(channel="U1", text="direct")
    assert posted["channel"] == dm["channel"]["id"]


async def test_configured_users_channels_and_membership() -> None:
    async with SlackEmulator(
        channels={"C1", "C2"},
        not_in_channels={"C2"},
        users={"U7": {"name": "alice", "real_name": "Alice A", "display_name": "ali"}},
    ) as slack:
        client = AsyncWebClient(token=BOT_TOKEN, base_url=slack.api_url)
        user = (await client.users_info(user="U7"))["user"]
        assert (user["name"], user["real_name"], user["profile"]["display_name"]) == (
            "alice",
            "Alice A",
            "ali",
        )
        assert (await api_error(client.users_info(user="U8"))).response["error"] == (
            "user_not_found"
        )
        err = await api_error(client.chat_postMessage(channel="C404", text="x"))
        assert err.response["error"] == "channel_not_found"
        err = await api_error(client.chat_postMessage(channel="C2", text="x"))
        assert err.response["error"] == "not_in_channel"
        assert (await client.chat_postMessage(channel="C1", text="x"))["ok"] is True
        assert slack.calls_to("chat.postMessage", ok=False)[0].body["channel"] == "C404"


async def test_content_validation_errors(slack: SlackEmulator, client: AsyncWebClient) -> None:
    too_many = [SECTION] * 51
    err = await api_error(client.chat_postMessage(channel="C1", text="x", blocks=too_many))
    assert err.response["error"] == "invalid_blocks"
    assert any("/blocks" in e for e in err.response["errors"])
    long_section = [{"type": "section", "text": {"type": "mrkdwn", "text": "y" * 3001}}]
    err = await api_error(client.chat_postMessage(channel="C1", text="x", blocks=long_section))
    assert err.response["errors"] == [
        "must be less than 3001 characters [json-pointer:/blocks/0/text/text]"
    ]
    button = {"type": "button", "text": {"type": "plain_text", "text": "Go"}, "value": "v" * 2001}
    actions = [{"type": "actions", "elements": [button]}]
    err = await api_error(client.chat_postMessage(channel="C1", text="x", blocks=actions))
    assert "/blocks/0/elements/0/value" in err.response["errors"][0]
    err = await api_error(client.chat_postMessage(channel="C1", text="z" * 40_001))
    assert err.response["error"] == "msg_too_long"
    err = await api_error(client.api_call("chat.postMessage", json={"channel": "C1"}))
    assert err.response["error"] == "no_text"
    err = await api_error(client.api_call("chat.postMessage", json={"text": "x"}))
    assert err.response["error"] == "channel_not_found"
    assert (await client.chat_postMessage(channel="C1", text="x", blocks=[SECTION] * 50))["ok"]
    assert slack.messages_in("C1")[0]["blocks"] == [SECTION] * 50


async def test_auth_errors_and_unknown_method(slack: SlackEmulator) -> None:
    nobody = AsyncWebClient(base_url=slack.api_url)
    assert (await api_error(nobody.auth_test())).response["error"] == "not_authed"
    wrong = AsyncWebClient(token=OTHER_BOT_TOKEN, base_url=slack.api_url)
    assert (await api_error(wrong.auth_test())).response["error"] == "invalid_auth"
    app = AsyncWebClient(token=APP_TOKEN, base_url=slack.api_url)
    err = await api_error(app.chat_postMessage(channel="C1", text="x"))
    assert err.response["error"] == "not_allowed_token_type"
    bot = AsyncWebClient(token=BOT_TOKEN, base_url=slack.api_url)
    err = await api_error(bot.apps_connections_open(app_token=BOT_TOKEN))
    assert err.response["error"] == "not_allowed_token_type"
    err = await api_error(bot.api_call("chat.nonsense"))
    assert (err.response.status_code, err.response["error"]) == (200, "unknown_method")
    assert [c.method for c in slack.calls][-1] == "chat.nonsense"


#: Every Web API method the emulator answers with the bot token, and arguments it accepts.
BOT_METHODS: dict[str, dict[str, Any]] = {
    "auth.test": {},
    "chat.postMessage": {"channel": "C1", "text": "x"},
    "chat.update": {"channel": "C1", "ts": "1.2", "text": "x"},
    "chat.postEphemeral": {"channel": "C1", "user": "U1", "text": "x"},
    "chat.getPermalink": {"channel": "C1", "message_ts": "1.2"},
    "views.open": {"trigger_id": "1.2.abc", "view": {"type": "modal"}},
    "views.update": {"view_id": "V1", "view": {"type": "modal"}},
    "views.publish": {"user_id": "U1", "view": {"type": "home", "blocks": []}},
    "usergroups.users.list": {"usergroup": "S1"},
    "users.info": {"user": "U1"},
    "conversations.open": {"users": "U1"},
    "conversations.info": {"channel": "C1"},
    "conversations.history": {"channel": "C1"},
    "conversations.replies": {"channel": "C1", "ts": "1.2"},
}
AUTH_ERRORS = {"not_authed", "invalid_auth", "not_allowed_token_type", "token_revoked"}


async def raw_call(
    slack: SlackEmulator,
    method: str,
    *,
    bearer: str | None = None,
    form: dict[str, str] | None = None,
    body: dict[str, Any] | None = None,
    query: dict[str, str] | None = None,
) -> dict[str, Any]:
    """POST `method` as any HTTP client could: a bearer header, a form body, a JSON body."""
    headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            slack.api_url + method, headers=headers, data=form, json=body, params=query
        ) as resp,
    ):
        assert resp.status == 200
        return dict(await resp.json())


def masked(token: str) -> str:
    """`token` as the masker used to send it."""
    return f"••••••({'64+' if len(token) > 63 else '32-63'} chars)"


@pytest.mark.parametrize("method", sorted(BOT_METHODS))
async def test_every_bot_method_takes_the_exact_bot_token_and_no_other(
    slack: SlackEmulator, method: str
) -> None:
    """As Slack: the bot token passes (whatever the method then answers), in the header or
    in a form body; another workspace's, a masked one, one cut short, or the app-level
    token do not."""
    slack.add_usergroup("S1", ["U1"])
    args = BOT_METHODS[method]
    answer = await raw_call(slack, method, bearer=BOT_TOKEN, body=args)
    assert answer.get("error") not in AUTH_ERRORS, answer
    form = {k: v if isinstance(v, str) else json.dumps(v) for k, v in args.items()}
    answer = await raw_call(slack, method, form={**form, "token": BOT_TOKEN})
    assert answer.get("error") not in AUTH_ERRORS, answer
    for token, error in [
        (OTHER_BOT_TOKEN, "invalid_auth"),
        (masked(BOT_TOKEN), "invalid_auth"),
        (BOT_TOKEN[:-1], "invalid_auth"),
        (APP_TOKEN, "not_allowed_token_type"),
    ]:
        assert (await raw_call(slack, method, bearer=token, body=args))["error"] == error
    assert (await raw_call(slack, method, body=args))["error"] == "not_authed"
    assert {c.token_from for c in slack.calls} == {"header", "form", None}


async def test_apps_connections_open_takes_only_the_app_token_in_the_header(
    slack: SlackEmulator,
) -> None:
    """Slack's apps.connections.open page: an app-level token with connections:write, in the
    Authorization header ("passing it as a POST parameter will result in an error")."""
    opened = await raw_call(slack, "apps.connections.open", bearer=APP_TOKEN)
    assert opened["ok"] and opened["url"].startswith("ws://")
    for bearer, error in [
        (BOT_TOKEN, "not_allowed_token_type"),
        (OTHER_APP_TOKEN, "invalid_auth"),
        (masked(APP_TOKEN), "invalid_auth"),
    ]:
        answer = await raw_call(slack, "apps.connections.open", bearer=bearer)
        assert answer["error"] == error, bearer
    in_form = await raw_call(slack, "apps.connections.open", form={"token": APP_TOKEN})
    assert in_form["error"] == "invalid_auth"
    assert (await raw_call(slack, "apps.connections.open"))["error"] == "not_authed"
    calls = slack.calls_to("apps.connections.open")
    assert [(c.token, c.token_from) for c in calls][:2] == [
        (APP_TOKEN, "header"),
        (BOT_TOKEN, "header"),
    ]
    assert (calls[-2].token, calls[-2].token_from) == (APP_TOKEN, "form")


async def test_an_app_token_without_connections_write_is_missing_a_scope() -> None:
    async with SlackEmulator(app_scopes=("authorizations:read",)) as slack:
        answer = await raw_call(slack, "apps.connections.open", bearer=APP_TOKEN)
    assert (answer["error"], answer["needed"]) == ("missing_scope", "connections:write")


async def test_a_token_in_a_json_body_or_the_query_string_is_not_read(
    slack: SlackEmulator,
) -> None:
    """Slack reads JSON bodies only with the token in the header, and refuses tokens in the
    query string (apps made since February 2021)."""
    in_json = await raw_call(slack, "auth.test", body={"token": BOT_TOKEN})
    in_query = await raw_call(slack, "auth.test", query={"token": BOT_TOKEN})
    assert in_json["error"] == in_query["error"] == "not_authed"
    assert all(c.token is None for c in slack.calls)


async def test_a_revoked_token_is_refused(slack: SlackEmulator, client: AsyncWebClient) -> None:
    assert (await client.auth_test())["ok"]
    slack.revoke(BOT_TOKEN)
    assert (await api_error(client.auth_test())).response["error"] == "token_revoked"
    slack.revoke(APP_TOKEN)
    err = await api_error(client.apps_connections_open(app_token=APP_TOKEN))
    assert err.response["error"] == "token_revoked"


async def test_fail_next_counts_down(slack: SlackEmulator, client: AsyncWebClient) -> None:
    slack.fail_next("chat.postMessage", "not_in_channel", times=2)
    for _ in range(2):
        err = await api_error(client.chat_postMessage(channel="C1", text="x"))
        assert err.response["error"] == "not_in_channel"
    assert (await client.chat_postMessage(channel="C1", text="x"))["ok"] is True
    assert len(slack.messages) == 1  # failed calls change nothing
    assert [c.ok for c in slack.calls_to("chat.postMessage")] == [False, False, True]


async def test_rate_limit_next_answers_429_with_retry_after(
    slack: SlackEmulator, client: AsyncWebClient
) -> None:
    slack.rate_limit_next("chat.postMessage", retry_after=3)
    err = await api_error(client.chat_postMessage(channel="C1", text="x"))
    assert err.response.status_code == 429
    assert err.response.headers["Retry-After"] == "3"
    assert err.response["error"] == "ratelimited"
    assert slack.calls_to("chat.postMessage")[0].status == 429
    assert not slack.messages

    slack.rate_limit_next("chat.postMessage", retry_after=0)
    client.retry_handlers.append(AsyncRateLimitErrorRetryHandler(max_retry_count=1))
    res = await client.chat_postMessage(channel="C1", text="retried")
    assert res["ok"] is True
    assert [c.status for c in slack.calls_to("chat.postMessage")] == [429, 429, 200]


async def test_server_errors(slack: SlackEmulator, client: AsyncWebClient) -> None:
    slack.server_error_next("chat.update", status=503)
    err = await api_error(client.chat_update(channel="C1", ts="1.1", text="x"))
    assert err.response.status_code == 503
    slack.server_error_next("auth.test", status=500)
    client.retry_handlers.append(AsyncServerErrorRetryHandler(max_retry_count=1))
    assert (await client.auth_test())["ok"] is True
    assert [c.status for c in slack.calls_to("auth.test")] == [500, 200]


async def test_enforce_rate_is_per_channel(slack: SlackEmulator, client: AsyncWebClient) -> None:
    now = [1000.0]
    slack.clock = lambda: now[0]  # time moves only when the test says (a slow machine can't)
    slack.enforce_rate(per_channel_per_second=10.0, burst=2)
    assert (await client.chat_postMessage(channel="C1", text="1"))["ok"]
    assert (await client.chat_postMessage(channel="C1", text="2"))["ok"]
    err = await api_error(client.chat_postMessage(channel="C1", text="3"))
    assert err.response.status_code == 429
    assert err.response.headers["Retry-After"] == "1"  # whole seconds, at least 1, like Slack
    assert (await client.chat_postMessage(channel="C2", text="other"))["ok"]
    now[0] += 0.05  # half a token at 10/s: still limited
    assert (
        await api_error(client.chat_postMessage(channel="C1", text="x"))
    ).response.status_code == 429
    now[0] += 0.06  # one token has refilled
    assert (await client.chat_postMessage(channel="C1", text="3 again"))["ok"]
    assert [m["text"] for m in slack.messages_in("C1")] == ["1", "2", "3 again"]


async def test_enforce_method_rate_is_per_workspace(
    slack: SlackEmulator, client: AsyncWebClient
) -> None:
    now = [1000.0]
    slack.clock = lambda: now[0]
    one = await client.chat_postMessage(channel="C1", text="a")
    two = await client.chat_postMessage(channel="C2", text="b")
    slack.enforce_method_rate("chat.update", per_minute=60, burst=2)
    assert (await client.chat_update(channel="C1", ts=one["ts"], text="a1"))["ok"]
    assert (await client.chat_update(channel="C2", ts=two["ts"], text="b1"))["ok"]
    # A third update, in any channel, is over the workspace's budget: 429 + Retry-After.
    err = await api_error(client.chat_update(channel="C1", ts=one["ts"], text="a2"))
    assert err.response.status_code == 429 and err.response.headers["Retry-After"] == "1"
    assert slack.messages[("C1", one["ts"])]["text"] == "a1"
    assert (await client.chat_postMessage(channel="C1", text="posts are not limited"))["ok"]
    now[0] += 1.0  # one token a second at 60/min
    assert (await client.chat_update(channel="C1", ts=one["ts"], text="a2"))["ok"]


async def test_updates_hold_slacks_50_block_cap(
    slack: SlackEmulator, client: AsyncWebClient
) -> None:
    posted = await client.chat_postMessage(channel="C1", text="x", blocks=[SECTION])
    err = await api_error(
        client.chat_update(channel="C1", ts=posted["ts"], text="x", blocks=[SECTION] * 51)
    )
    assert err.response["error"] == "invalid_blocks"
    assert slack.messages[("C1", posted["ts"])]["blocks"] == [SECTION]


async def test_latency_applies_per_method(slack: SlackEmulator, client: AsyncWebClient) -> None:
    slack.set_latency(0.2, method="auth.test")
    started = time.monotonic()
    await client.auth_test()
    assert time.monotonic() - started >= 0.2
    assert slack.latency == 0.0


async def test_wait_for_wakes_on_call_and_times_out(
    slack: SlackEmulator, client: AsyncWebClient
) -> None:
    async def later() -> None:
        await asyncio.sleep(0.05)
        await client.chat_postMessage(channel="C1", text="late")

    task = asyncio.create_task(later())
    (call,) = await slack.wait_for("chat.postMessage", timeout=2)
    assert call.body["text"] == "late"
    await task
    with pytest.raises(AssertionError, match=r"2 x chat\.postMessage"):
        await slack.wait_for("chat.postMessage", count=2, timeout=0.1)


async def test_response_url_sink(slack: SlackEmulator, client: AsyncWebClient) -> None:
    posted = await client.chat_postMessage(channel="C1", text="pending", blocks=[SECTION])
    url = slack.response_url("click-1", channel="C1", ts=posted["ts"])
    assert url.startswith(slack.base_url)
    hook = AsyncWebhookClient(url)
    res = await hook.send(text="Approved", replace_original=True, blocks=[])
    assert (res.status_code, res.body) == (200, "ok")
    (got,) = await slack.wait_for_response("click-1")
    assert got.body["text"] == "Approved" and got.body["replace_original"] is True
    message = slack.messages[("C1", posted["ts"])]
    assert message["text"] == "Approved" and "blocks" not in message
    await hook.send_dict({"delete_original": True})
    assert ("C1", posted["ts"]) not in slack.messages
    free = AsyncWebhookClient(slack.response_url("other"))
    await free.send(text="just recorded", response_type="ephemeral")
    assert [r.name for r in slack.responses] == ["click-1", "click-1", "other"]


async def test_reset_forgets_calls_state_and_faults(
    slack: SlackEmulator, client: AsyncWebClient
) -> None:
    slack.add_usergroup("S1", ["U1"])
    await client.chat_postMessage(channel="C1", text="x")
    slack.fail_next("auth.test")
    slack.reset()
    assert slack.calls == [] and slack.messages == {} and slack.responses == []
    assert (await client.auth_test())["ok"] is True  # the fault is gone
    assert (await client.usergroups_users_list(usergroup="S1"))["users"] == ["U1"]


async def socket_client(
    slack: SlackEmulator, seen: list[SocketModeRequest], hellos: list[dict[str, Any]]
) -> SocketModeClient:
    web = AsyncWebClient(base_url=slack.api_url)
    sm = SocketModeClient(app_token=APP_TOKEN, web_client=web, auto_reconnect_enabled=True)

    async def on_message(client: Any, message: dict[str, Any], raw: str | None) -> None:
        if message.get("type") == "hello":
            hellos.append(message)

    async def listener(client: Any, req: SocketModeRequest) -> None:
        seen.append(req)
        body = None
        if req.payload.get("type") == "view_submission":
            body = {"response_action": "errors", "errors": {"reason": "Required"}}
        await client.send_socket_mode_response(SocketModeResponse(req.envelope_id, body))

    sm.message_listeners.append(on_message)
    sm.socket_mode_request_listeners.append(listener)
    await sm.connect()  # type: ignore[no-untyped-call]
    return sm


async def test_socket_mode_round_trip(slack: SlackEmulator) -> None:
    seen: list[SocketModeRequest] = []
    hellos: list[dict[str, Any]] = []
    sm = await socket_client(slack, seen, hellos)
    try:
        (opened,) = slack.calls_to("apps.connections.open")
        assert opened.headers["Authorization"] == f"Bearer {APP_TOKEN}"
        assert opened.response is not None
        assert opened.response["url"].startswith(f"ws://127.0.0.1:{slack.port}/socket/")

        click = {"type": "block_actions", "actions": [{"action_id": "approve", "value": "r1"}]}
        ack = await slack.socket_send_interactive(click)
        assert seen[0].type == "interactive"
        assert seen[0].payload == click
        assert seen[0].accepts_response_payload is False
        assert ack == {"envelope_id": seen[0].envelope_id}
        assert hellos[0]["num_connections"] == 1
        assert hellos[0]["connection_info"] == {"app_id": slack.APP_ID}

        submit = {"type": "view_submission", "view": {"callback_id": "deny_reason"}}
        ack = await slack.socket_send_interactive(submit)
        assert seen[1].accepts_response_payload is True
        assert ack["payload"] == {"response_action": "errors", "errors": {"reason": "Required"}}
        assert slack.socket_acks[-1] == ack

        await slack.socket_disconnect()
        await slack.wait_for("apps.connections.open", count=2)
        await slack.wait_until(lambda: slack.socket_connections == 1, what="one socket again")
        again = await slack.socket_send_interactive(click)
        assert again["envelope_id"] == seen[2].envelope_id
        assert len(hellos) == 2
    finally:
        await sm.close()  # type: ignore[no-untyped-call]
    await slack.wait_until(lambda: slack.socket_connections == 0, what="socket closed")


async def test_socket_mode_rejects_unknown_ticket(slack: SlackEmulator) -> None:
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.WSServerHandshakeError) as info:
            await session.ws_connect(f"ws://127.0.0.1:{slack.port}/socket/link/?ticket=forged")
    assert info.value.status == 401


META = {"event_type": "approval_request", "event_payload": {"request_id": "apr_1"}}


async def test_history_window_order_paging_and_metadata(
    slack: SlackEmulator, client: AsyncWebClient
) -> None:
    posted = []
    for i in range(5):
        res = await client.chat_postMessage(channel="C1", text=f"m{i}", metadata=META)
        posted.append(res["ts"])
    await client.chat_postMessage(channel="C2", text="elsewhere")
    whole = await client.conversations_history(channel="C1")
    assert [m["text"] for m in whole["messages"]] == ["m4", "m3", "m2", "m1", "m0"]
    assert all("metadata" not in m for m in whole["messages"]), "only when asked for"
    # oldest / latest are exclusive unless inclusive
    window = await client.conversations_history(channel="C1", oldest=posted[1], latest=posted[3])
    assert [m["text"] for m in window["messages"]] == ["m2"]
    both = await client.conversations_history(
        channel="C1", oldest=posted[1], latest=posted[3], inclusive=True
    )
    assert [m["text"] for m in both["messages"]] == ["m3", "m2", "m1"]
    # pages: has_more and a cursor, newest first
    first = await client.conversations_history(channel="C1", limit=2, include_all_metadata=True)
    assert [m["text"] for m in first["messages"]] == ["m4", "m3"] and first["has_more"]
    assert first["messages"][0]["metadata"] == META
    assert first["messages"][0]["bot_id"] == slack.BOT_ID
    cursor = first["response_metadata"]["next_cursor"]
    rest = await client.conversations_history(channel="C1", limit=10, cursor=cursor)
    assert [m["text"] for m in rest["messages"]] == ["m2", "m1", "m0"] and not rest["has_more"]


async def test_replies_list_a_thread_oldest_first_and_history_leaves_them_out(
    slack: SlackEmulator, client: AsyncWebClient
) -> None:
    root = (await client.chat_postMessage(channel="C1", text="root", metadata=META))["ts"]
    replies = []
    for i in range(4):
        res = await client.chat_postMessage(
            channel="C1", text=f"r{i}", thread_ts=root, metadata=META
        )
        replies.append(res["ts"])
    other = (await client.chat_postMessage(channel="C1", text="other"))["ts"]
    await client.chat_postMessage(channel="C1", text="elsewhere", thread_ts=other)
    history = await client.conversations_history(channel="C1")
    assert [m["text"] for m in history["messages"]] == ["other", "root"], "no replies"
    thread = await client.conversations_replies(channel="C1", ts=root)
    assert [m["text"] for m in thread["messages"]] == ["root", "r0", "r1", "r2", "r3"]
    assert all("metadata" not in m for m in thread["messages"]), "only when asked for"
    assert thread["messages"][1]["thread_ts"] == root
    since = await client.conversations_replies(
        channel="C1", ts=root, oldest=replies[1], inclusive=True, include_all_metadata=True
    )
    assert [m["text"] for m in since["messages"]] == ["root", "r1", "r2", "r3"]
    assert since["messages"][1]["metadata"] == META
    first = await client.conversations_replies(channel="C1", ts=root, limit=2)
    assert [m["text"] for m in first["messages"]] == ["root", "r0"] and first["has_more"]
    cursor = first["response_metadata"]["next_cursor"]
    rest = await client.conversations_replies(channel="C1", ts=root, cursor=cursor)
    assert [m["text"] for m in rest["messages"]] == ["r1", "r2", "r3"] and not rest["has_more"]
    missing = await api_error(client.conversations_replies(channel="C1", ts="1.000001"))
    assert missing.response["error"] == "thread_not_found"


async def test_history_needs_the_scope_of_the_channel_type() -> None:
    async with SlackEmulator(scopes={"chat:write", "channels:history"}) as limited:
        web = AsyncWebClient(token=BOT_TOKEN, base_url=limited.api_url)
        assert (await web.conversations_history(channel="C1"))["ok"]
        error = await api_error(web.conversations_history(channel="G1"))
        assert error.response["error"] == "missing_scope"
        assert error.response["needed"] == "groups:history"
        error = await api_error(web.conversations_replies(channel="G1", ts="1.2"))
        assert error.response["needed"] == "groups:history"


async def test_metadata_is_checked_and_kept_by_updates(
    slack: SlackEmulator, client: AsyncWebClient
) -> None:
    bad = await api_error(
        client.chat_postMessage(channel="C1", text="x", metadata={"event_type": "t"})
    )
    assert bad.response["error"] == "invalid_metadata_schema"
    res = await client.chat_postMessage(channel="C1", text="x", metadata=META)
    await client.chat_update(channel="C1", ts=res["ts"], text="y")
    assert slack.messages[("C1", res["ts"])]["metadata"] == META
    other = {"event_type": "approval_request", "event_payload": {"request_id": "apr_2"}}
    await client.chat_update(channel="C1", ts=res["ts"], text="z", metadata=other)
    assert slack.messages[("C1", res["ts"])]["metadata"] == other


async def test_answer_late_does_the_work_then_answers_after_the_client_gave_up(
    slack: SlackEmulator,
) -> None:
    slack.answer_late_next("chat.postMessage", 1.0)
    impatient = AsyncWebClient(token=BOT_TOKEN, base_url=slack.api_url, timeout=0.3)  # type: ignore[arg-type]
    impatient.retry_handlers.clear()
    with pytest.raises(asyncio.TimeoutError):
        await impatient.chat_postMessage(channel="C1", text="late")
    assert [m["text"] for m in slack.messages_in("C1")] == ["late"], "posted all the same"
    assert slack.arrived("chat.postMessage") == 1


async def test_slow_next_answers_and_works_late_then_normal(
    slack: SlackEmulator, client: AsyncWebClient
) -> None:
    slack.slow_next("chat.postMessage", 0.4)
    task = asyncio.create_task(client.chat_postMessage(channel="C1", text="slow"))
    await slack.wait_until(lambda: slack.arrived("chat.postMessage") == 1, 2, "arrival")
    assert slack.messages_in("C1") == [], "nothing done while slow"
    await task
    assert [m["text"] for m in slack.messages_in("C1")] == ["slow"]
    started = time.monotonic()
    await client.chat_postMessage(channel="C1", text="fast")
    assert time.monotonic() - started < 0.3


async def test_outage_answers_5xx_to_everything_until_it_ends(
    slack: SlackEmulator, client: AsyncWebClient
) -> None:
    slack.start_outage(503)
    for call in (client.chat_postMessage(channel="C1", text="x"), client.auth_test()):
        error = await api_error(call)
        assert error.response.status_code == 503
    assert slack.messages == {}
    slack.end_outage()
    assert (await client.chat_postMessage(channel="C1", text="x"))["ok"]


async def test_views_publish_keeps_one_home_view_per_user() -> None:
    async with SlackEmulator(users={"U7": {"name": "alice"}}) as slack:
        client = AsyncWebClient(token=BOT_TOKEN, base_url=slack.api_url)
        home = {
            "type": "home",
            "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "hi"}}],
        }
        first = (await client.views_publish(user_id="U7", view=home))["view"]
        assert first["type"] == "home" and slack.home_views["U7"]["blocks"] == home["blocks"]
        again = (await client.views_publish(user_id="U7", view=home, hash=first["hash"]))["view"]
        assert again["id"] == first["id"], "one Home view per user, republished in place"
        err = await api_error(client.views_publish(user_id="U7", view=home, hash="stale.1"))
        assert err.response["error"] == "hash_conflict"
        err = await api_error(client.views_publish(user_id="U0NOBODY", view=home))
        assert err.response["error"] == "user_not_found"
        modal = {**home, "type": "modal", "title": {"type": "plain_text", "text": "x"}}
        err = await api_error(client.views_publish(user_id="U7", view=modal))
        assert err.response["error"] == "invalid_arguments"
        too_many = {"type": "home", "blocks": [{"type": "divider"}] * 101}
        err = await api_error(client.views_publish(user_id="U7", view=too_many))
        assert err.response["error"] == "invalid_arguments"
