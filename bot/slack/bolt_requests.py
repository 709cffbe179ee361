"""Slack's HTTP requests to `/slack/events` as slack-bolt requests, the form body decoded in C.

`SlackSignature.check` runs first, on the raw bytes: a request without Slack's valid
signature is refused before anything parses it. `to_bolt_request` then gives the request
slack-bolt's own aiohttp converter would, decoding well-formed percent-escapes with the
`unicode_escape` codec and anything else through urllib, so the result never differs. Why:
docs/ARCHITECTURE.md, "Slack in: `/slack/events`".
"""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import unquote

from aiohttp import web
from slack_bolt.context.async_context import AsyncBoltContext
from slack_bolt.request.async_internals import build_async_context
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.signature import SignatureVerifier


def unquote_plus(text: str) -> str:
    """`urllib.parse.unquote(text.replace("+", " "))` (UTF-8, errors replaced), in C for the
    usual case: ASCII text whose every `%` starts an escape."""
    plain = text.replace("+", " ")
    if "%" not in plain:
        return plain
    if not plain.isascii():
        return unquote(plain)
    # Backslashes doubled, so the only escapes the codec sees are `\\` and `\xHH`.
    escaped = plain.replace("\\", "\\\\") if "\\" in plain else plain
    try:
        # Exactly two hex digits after each `\x`, else an error: a stray `%`, kept by urllib.
        latin = escaped.replace("%", "\\x").encode("ascii").decode("unicode_escape")
    except UnicodeDecodeError:
        return unquote(plain)
    return latin.encode("latin-1").decode("utf-8", "replace")


def parse_form(body: str) -> dict[str, str]:
    """`dict(urllib.parse.parse_qsl(body, keep_blank_values=True))`: the last of a repeated
    name wins, a field without `=` has the value ''."""
    fields: dict[str, str] = {}
    for piece in body.split("&"):
        if not piece:
            continue
        name, _, value = piece.partition("=")
        fields[unquote_plus(name)] = unquote_plus(value)
    return fields


def parse_body(body: str, content_type: str | None) -> dict[str, Any]:
    """What `slack_bolt.request.internals.parse_body` returns for `body`, step for step."""
    if not body:
        return {}
    if content_type == "application/json" or body.startswith("{"):
        return json.loads(body)  # type: ignore[no-any-return]
    if "payload" in body:
        payload = parse_form(body).get("payload")
        return json.loads(payload) if payload is not None else {}
    return parse_form(body)


#: Longest `X-Slack-Request-Timestamp` read (epoch seconds: 10 digits until 2286).
_MAX_TIMESTAMP_DIGITS = 12


class SlackSignature:
    """Slack's request signature (`v0=` HMAC-SHA256 of `v0:<timestamp>:<body>` with the app's
    signing secret, at most 5 minutes old), checked by slack_sdk's `SignatureVerifier`."""

    def __init__(self, signing_secret: str | None) -> None:
        self._verifier = SignatureVerifier(signing_secret) if signing_secret else None

    def check(self, raw: bytes, timestamp: str | None, signature: str | None) -> str | None:
        """Why the request is not Slack's (a short phrase to log); None when it is."""
        if self._verifier is None:
            return "no signing secret is configured (SLACK_SIGNING_SECRET)"
        if not timestamp or not signature:
            return "no signature"
        if not (timestamp.isascii() and timestamp.isdigit()) or (
            len(timestamp) > _MAX_TIMESTAMP_DIGITS
        ):
            return "a timestamp that is not a number of seconds"
        if abs(time.time() - int(timestamp)) > 60 * 5:
            return "a stale timestamp"
        try:
            body = raw.decode("utf-8")
        except UnicodeDecodeError:
            return "a body that is not UTF-8"
        if not self._verifier.is_valid(body, timestamp, signature):
            return "a wrong signature"
        return None


async def to_bolt_request(request: web.Request, raw: str | None = None) -> AsyncBoltRequest:
    """As `slack_bolt.adapter.aiohttp.to_bolt_request`, with `parse_body` above (`raw`: the
    body as text, if already read). Raises `ValueError` for a body that does not parse."""
    if raw is None:
        raw = await request.text()
    bolt = AsyncBoltRequest(
        body="",  # parsed below; bolt verifies the signature on `raw_body`
        query=request.query_string,
        headers=request.headers,  # type: ignore[arg-type]
    )
    bolt.raw_body = raw
    bolt.body = parse_body(raw, bolt.content_type)
    bolt.context = build_async_context(AsyncBoltContext({}), bolt.body)
    return bolt
