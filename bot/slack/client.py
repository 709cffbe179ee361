"""The Slack Web API client of the bot: every call's payload passes `bot.masking.masker.outbound`.

Whatever a surface sends goes out through `MaskingWebClient.api_call` or `post_json`, so no
rendering path can skip the masking; a request message the renderer drew
(`bot.masking.masker.Masked`) is sent as it is. A call's own credentials (`CREDENTIAL_FIELDS`,
headers, `auth`) go out as they came (`outbound_call`). `post_json` is the dispatcher's
lighter way for chat.postMessage and chat.update. Why both: docs/ARCHITECTURE.md, "Slack out:
the Web API client" and "Masking".
"""

from __future__ import annotations

import json
import logging
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse
from slack_sdk.web.internal_utils import _get_url

from bot.masking.masker import Masked, outbound

#: Top-level fields of a Web API call that carry the caller's own credential, never content:
#: Slack reads `token` as the caller's token in every method (slack_sdk sends it as the
#: `Authorization: Bearer` header), and the OAuth methods the app's and the installation's
#: secrets. Only at the top level: a `token` key inside a message or a view is content.
CREDENTIAL_FIELDS = frozenset({"token", "client_id", "client_secret", "code", "refresh_token"})


def sdk_logger() -> logging.Logger:
    """The logger for the bot's Web API clients, its level set to the level in force.

    slack_sdk tests `logger.level <= DEBUG`, not `isEnabledFor`: with its own logger's
    level unset (NOTSET, 0) it formats a debug line of every request and response,
    whole payload included, then drops it. Measured: about 70 µs of CPU per
    chat.postMessage of a request message (of ~500 µs with the emulator answering)."""
    logger = logging.getLogger("slack_sdk.web.bot")
    if logger.level == logging.NOTSET:
        logger.setLevel(logger.getEffectiveLevel())
    return logger


def outbound_call(fields: dict[str, Any]) -> dict[str, Any]:
    """A Web API call's arguments as they go to Slack: every one masked
    (`bot.masking.masker.outbound`) but the credentials (`CREDENTIAL_FIELDS`), sent as
    they are."""
    if CREDENTIAL_FIELDS.isdisjoint(fields):
        return outbound(fields)  # type: ignore[no-any-return]
    content = outbound({k: v for k, v in fields.items() if k not in CREDENTIAL_FIELDS})
    return {k: v if k in CREDENTIAL_FIELDS else content[k] for k, v in fields.items()}


def json_body(fields: dict[str, Any], message: Masked | None = None) -> dict[str, Any]:
    """The body `post_json` sends: `fields` masked but for their credentials (None values
    left out, as slack_sdk's methods leave them out), then `message` as
    `bot.slack.render.request_message` drew it."""
    body = outbound_call({k: v for k, v in fields.items() if v is not None})
    if message is not None:
        body.update(message)
    return body


class MaskingWebClient(AsyncWebClient):
    """`AsyncWebClient` whose request bodies and parameters are masked on the way out, but
    for the credentials in them (`outbound_call`); headers and `auth` pass as they are."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("logger", sdk_logger())
        super().__init__(*args, **kwargs)
        self._urls: dict[str, str] = {}
        self._json_headers: tuple[str | None, dict[str, str]] = (None, {})
        self._json_timeout = aiohttp.ClientTimeout(total=self.timeout)

    async def api_call(
        self,
        api_method: str,
        *,
        http_verb: str = "POST",
        files: dict[str, Any] | None = None,
        data: Any = None,
        params: dict[str, Any] | None = None,
        json: dict[str, Any] | None = None,
        headers: dict[str, Any] | None = None,
        auth: dict[str, Any] | None = None,
    ) -> AsyncSlackResponse:
        return await super().api_call(
            api_method,
            http_verb=http_verb,
            files=files,
            data=outbound_call(data) if isinstance(data, dict) else data,
            params=outbound_call(params) if params else params,
            json=outbound_call(json) if json else json,
            headers=headers,
            auth=auth,
        )

    def _direct(self) -> bool:
        """Whether `post_json` may go straight to the session (nothing slack_sdk would add)."""
        session = self.session
        return (
            session is not None
            and not session.closed
            and not self.retry_handlers
            and not self.default_params
            and self.proxy is None
            and self.logger.level > logging.DEBUG
        )

    async def post_json(
        self, api_method: str, fields: dict[str, Any], message: Masked | None = None
    ) -> AsyncSlackResponse:
        """POST `api_method` (e.g. "chat.postMessage") with `fields` (masked here; None values
        left out, as slack_sdk's methods do) and `message` (a renderer's, sent as it is) as
        one JSON body. Raises `SlackApiError` as slack_sdk does (its `response` an
        `AsyncSlackResponse` with the status, the headers and the body read, `{}` if none)."""
        body = json_body(fields, message)
        if not self._direct() or "token" in body:  # slack_sdk moves a `token` to the header
            return await super().api_call(api_method, json=body)
        url = self._urls.get(api_method)
        if url is None:
            url = self._urls[api_method] = _get_url(self.base_url, api_method)
        token, headers = self._json_headers
        if token != self.token or not headers:
            headers = {**self.headers, "Content-Type": "application/json;charset=utf-8"}
            if self.token:
                headers["Authorization"] = f"Bearer {self.token}"
            self._json_headers = (self.token, headers)
        session = self.session
        assert session is not None  # `_direct` checked
        timeout = self._json_timeout
        if timeout.total != self.timeout:  # per call, as slack_sdk's path (not the session's)
            timeout = self._json_timeout = aiohttp.ClientTimeout(total=self.timeout)
        async with session.post(
            url,
            data=json.dumps(body).encode(),
            headers=headers,
            ssl=self.ssl or True,
            timeout=timeout,
        ) as res:
            try:
                data: Any = await res.json()
            except aiohttp.ContentTypeError:  # an HTML error page from a proxy, say
                data = {}
            except ValueError:  # a body that says JSON and is not
                data = {}
            status, answer_headers = res.status, res.headers
        response = AsyncSlackResponse(
            client=self,
            http_verb="POST",
            api_url=url,
            req_args={"json": body},
            data=data if isinstance(data, dict) else {},
            headers=answer_headers,  # type: ignore[arg-type]
            status_code=status,
        )
        if status == 200 and response.data.get("ok", False):  # type: ignore[union-attr]
            return response
        raise SlackApiError(  # type: ignore[no-untyped-call]
            message=f"The request to the Slack API failed. (url: {url}, status: {status})",
            response=response,
        )
