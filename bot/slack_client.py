"""The Slack Web API client of the bot: every call's payload passes `bot.masking.outbound`.

Whatever a surface sends (a message, an update, a modal, an ephemeral reply, a
DM, an App Home view), it goes out through `api_call`, so no rendering path,
present or future, can skip the masking.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from bot.masking import outbound


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


class MaskingWebClient(AsyncWebClient):
    """`AsyncWebClient` whose request bodies and parameters are masked on the way out."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("logger", sdk_logger())
        super().__init__(*args, **kwargs)

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
            data=outbound(data) if isinstance(data, dict) else data,
            params=outbound(params) if params else params,
            json=outbound(json) if json else json,
            headers=headers,
            auth=auth,
        )
