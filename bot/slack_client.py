"""The Slack Web API client of the bot: every call's payload passes `bot.masking.outbound`.

Whatever a surface sends (a message, an update, a modal, an ephemeral reply, a
DM, an App Home view), it goes out through `api_call`, so no rendering path,
present or future, can skip the masking.
"""

from __future__ import annotations

from typing import Any

from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from bot.masking import outbound


class MaskingWebClient(AsyncWebClient):
    """`AsyncWebClient` whose request bodies and parameters are masked on the way out."""

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
