"""`/slack/events` checks Slack's signature before it reads anything else of a request: an
unsigned or badly signed request of any shape is a 401 with no traceback and one short log
line (never its body), and only a signed one is parsed and handed to bolt. Through the real
bot and aiohttp app, signed for real; an ack's payload goes back to Slack masked."""

from __future__ import annotations

import io
import json
import logging
import time
from typing import Any
from urllib.parse import urlencode

import aiohttp
import pytest

from bot.core.app import Bot
from bot.slack import action_ids as ids
from tests.support.e2e import BotFactory, sign
from tests.support.slack_emulator import SlackEmulator


def events_url(bot: Bot) -> str:
    return f"http://127.0.0.1:{bot.port}/slack/events"


PAYLOAD = {
    "type": "block_actions",
    "user": {"id": "U0MALLORY", "username": "mallory", "team_id": "T0EMULATED"},
    "team": {"id": "T0EMULATED"},
    "actions": [{"action_id": ids.APPROVE, "value": "apr_x@v1", "type": "button"}],
}


def form(payload: Any) -> str:
    return urlencode({"payload": payload if isinstance(payload, str) else json.dumps(payload)})


@pytest.mark.parametrize(
    ("body", "headers"),
    [
        (form(PAYLOAD), {"X-Slack-Request-Timestamp": "soon", "X-Slack-Signature": "v0=00"}),
        (form(PAYLOAD), {"X-Slack-Request-Timestamp": "1e9", "X-Slack-Signature": "v0=00"}),
        (form(PAYLOAD), {"X-Slack-Request-Timestamp": "٣٣٣", "X-Slack-Signature": "v0=00"}),
        (form("{not json"), {}),  # unsigned, a payload that is not JSON
        (form("{not json"), {"X-Slack-Request-Timestamp": str(int(time.time()))}),
        ("payload=%7B%22type%22%3A", {"X-Slack-Signature": "v0=" + "0" * 64}),
        ('{"type": "url_verification", "challenge": "x"', {}),  # JSON cut short
        (b"payload=\xff\xfe\xfd", {}),  # not UTF-8
    ],
    ids=[
        "word-timestamp",
        "float-timestamp",
        "arabic-digits-timestamp",
        "unsigned-bad-payload",
        "no-signature",
        "bad-signature-cut-payload",
        "unsigned-cut-json",
        "not-utf8",
    ],
)
async def test_an_unsigned_request_of_any_shape_is_401_without_a_traceback(
    make_bot: BotFactory,
    http: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
    body: str | bytes,
    headers: dict[str, str],
) -> None:
    bot = await make_bot()
    caplog.set_level(logging.DEBUG)
    content = {"Content-Type": "application/x-www-form-urlencoded", **headers}
    async with http.post(events_url(bot), data=body, headers=content) as resp:
        assert resp.status == 401, await resp.text()
        text = await resp.text()
    assert "Traceback" not in text
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_an_unsigned_request_logs_one_short_line_not_its_body(
    make_bot: BotFactory, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    bot = await make_bot()
    caplog.set_level(logging.DEBUG)
    big = form({**PAYLOAD, "padding": "A" * (3 * 1024 * 1024)}).encode()
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    for _ in range(5):
        async with http.post(events_url(bot), data=io.BytesIO(big), headers=headers) as resp:
            assert resp.status == 401
    logged = "".join(r.getMessage() for r in caplog.records)
    assert "AAAAAAAA" not in logged, "the body was logged"
    refused = [r for r in caplog.records if "signature" in r.getMessage()]
    assert len(refused) == 5, [r.getMessage() for r in caplog.records]
    assert len(logged) < 5 * 400


async def test_a_signed_request_that_does_not_parse_is_400(
    make_bot: BotFactory, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    """Only Slack can sign, and Slack sends JSON: still, a signed body that does not parse is
    a 400, never a 500 with a traceback."""
    bot = await make_bot()
    caplog.set_level(logging.INFO)
    body = form("{not json")
    async with http.post(events_url(bot), data=body, headers=sign(body)) as resp:
        assert resp.status == 400, await resp.text()
    assert not [r for r in caplog.records if r.exc_info]


async def test_a_signed_click_still_goes_through(
    make_bot: BotFactory, http: aiohttp.ClientSession, slack: SlackEmulator
) -> None:
    bot = await make_bot()
    body = urlencode({"payload": json.dumps({**PAYLOAD, "type": "block_actions"})})
    async with http.post(events_url(bot), data=body, headers=sign(body)) as resp:
        assert resp.status == 200
    stale = sign(body, timestamp=int(time.time()) - 600)
    async with http.post(events_url(bot), data=body, headers=stale) as resp:
        assert resp.status == 401
    wrong = sign(body, secret="0" * 32)
    async with http.post(events_url(bot), data=body, headers=wrong) as resp:
        assert resp.status == 401


async def test_an_acks_payload_goes_back_to_slack_masked(
    make_bot: BotFactory, http: aiohttp.ClientSession
) -> None:
    """What a listener puts in its `ack()` (modal errors, a view, a slash command's answer)
    is a way to Slack too: masked on the way out like every other payload."""
    bot = await make_bot()
    assert bot.bolt is not None
    github = "ghp_" + "R8f2Kq9ZxT4mWb7Lc1Nv5Hs3Jd6Gp0Ye2Ua8"
    stripe = "sk_live_" + "51H7qPzK2eZvKYlo2C8xF4nJ6mT0wR9sQ3vB1aD"

    async def answer_with_errors(ack: Any) -> None:
        await ack(
            response_action="errors",
            errors={"edit_block": f"'{github}' is not valid under the schema; nor is {stripe}"},
        )

    bot.bolt.view("test_echo_modal")(answer_with_errors)
    payload = {
        "type": "view_submission",
        "team": {"id": "T0EMULATED"},
        "user": {"id": "U0ALICE", "username": "alice", "team_id": "T0EMULATED"},
        "view": {
            "id": "V0TESTVIEW",
            "type": "modal",
            "callback_id": "test_echo_modal",
            "private_metadata": "",
            "state": {"values": {}},
        },
    }
    body = form(payload)
    async with http.post(events_url(bot), data=body, headers=sign(body)) as resp:
        assert resp.status == 200
        text = await resp.text()
    answered = json.loads(text)
    assert answered["response_action"] == "errors"
    assert github not in text and stripe not in text, text
    assert "edit_block" in answered["errors"]
