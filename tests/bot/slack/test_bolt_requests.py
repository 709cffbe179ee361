"""bot/slack/bolt_requests.py gives slack-bolt exactly the request bolt's own converter would."""

from __future__ import annotations

import json
import random
from typing import Any
from urllib.parse import quote, quote_plus, unquote

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from slack_bolt.adapter.aiohttp import to_bolt_request as bolt_to_bolt_request
from slack_bolt.request.internals import parse_body as bolt_parse_body

from bot.slack.bolt_requests import parse_body, to_bolt_request, unquote_plus

FORM = "application/x-www-form-urlencoded"

_PAYLOAD = {
    "type": "block_actions",
    "user": {"id": "U0ALICE", "username": "alice", "team_id": "T0TEAM"},
    "team": {"id": "T0TEAM"},
    "channel": {"id": "C0APPROVALS"},
    "actions": [{"action_id": "approve", "value": "abc123@v1", "type": "button"}],
    "message": {
        "ts": "1700000000.000100",
        "blocks": [
            {
                "type": "section",
                "text": {
                    "type": "mrkdwn",
                    "text": '*Agent:* a & <b> "c" 100% + ünïcødé 🔐 \\ back\\slash \n\ttab=1&x',
                },
            }
        ]
        * 5,
    },
    "response_url": "https://hooks.slack.com/actions/T0TEAM/1/abc",
}

BODIES = [
    "",
    json.dumps({"type": "event_callback", "event": {"type": "app_home_opened", "user": "U1"}}),
    "payload=" + quote_plus(json.dumps(_PAYLOAD)),
    "payload=" + quote(json.dumps(_PAYLOAD, ensure_ascii=False)),  # %20, no +
    "payload=" + quote_plus(json.dumps(_PAYLOAD, ensure_ascii=False)) + "&payload=%7B%7D",
    "token=x&team_id=T1&command=%2Fapprovals&text=deny+abc+because+100%25+%26+%3Cnot%3E&user_id=U1",
    "command=/approvals&text=raw ünïcode é&user_id=U1",  # not percent-encoded at all
    "command=%2Fapprovals&text=50%+off+%zz+%4&user_id=U1",  # stray % signs
    "text=a\\x41%41+%5C%5Cx41&flag&=empty&&trailing=",
    "text=payload+in+a+field&user_id=U2",  # "payload" in the body, no payload field
    "text=%E2%82+cut+utf-8+%C3&x=%ff",  # invalid UTF-8: replaced as urllib does
]


def test_parse_body_is_bolts_on_the_corpus() -> None:
    for body in BODIES:
        for content_type in (FORM, "application/json", None):
            if content_type == "application/json" and body and not body.startswith("{"):
                continue
            assert parse_body(body, content_type) == bolt_parse_body(body, content_type), body


def test_unquote_plus_is_urllibs_on_random_text() -> None:
    rng = random.Random(13)
    alphabet = "%\\+aF0x9g é\n&=~"
    for _ in range(20_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 10)))
        assert unquote_plus(text) == unquote(text.replace("+", " ")), repr(text)
    for text in ("%C3%A9%E2%82%AC", "%F0%9F%94%90", "%5C%78%34%31", "\\x41", "%0a%0D%00"):
        assert unquote_plus(text) == unquote(text), repr(text)


async def test_to_bolt_request_matches_bolts_converter() -> None:
    seen: list[tuple[Any, Any]] = []

    async def handler(request: web.Request) -> web.Response:
        ours = await to_bolt_request(request)
        theirs = await bolt_to_bolt_request(request)
        seen.append((ours, theirs))
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/slack/events", handler)
    async with TestClient(TestServer(app)) as client:
        for body in BODIES:
            content_type = "application/json" if body.startswith("{") else FORM
            response = await client.post(
                "/slack/events?retry=1",
                data=body.encode(),
                headers={"Content-Type": content_type, "X-Slack-Signature": "v0=abc"},
            )
            assert response.status == 200
    assert len(seen) == len(BODIES)
    for ours, theirs in seen:
        assert ours.raw_body == theirs.raw_body  # what bolt verifies the signature on
        assert ours.body == theirs.body
        assert dict(ours.context) == dict(theirs.context)
        assert ours.headers == theirs.headers
        assert ours.query == theirs.query
        assert ours.content_type == theirs.content_type
        assert (ours.mode, ours.lazy_only, ours.lazy_function_name) == (
            theirs.mode,
            theirs.lazy_only,
            theirs.lazy_function_name,
        )
