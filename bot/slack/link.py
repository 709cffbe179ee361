"""The bot's link to Slack: `auth.test` at start and the Socket Mode connection, in the background.

`SlackLink.start()` returns at once; a task checks the bot token (`auth.test`:
logs the team and the bot user) and, in Socket Mode, opens the socket. Each
failed attempt is one readable log line and a growing pause (1 s doubling to
30 s); a refused token (`invalid_auth` and kin) is one error line and stops
the attempts. `state` is what `/healthz` reports: `connecting`, `ok` or
`error: …`. `stop()` cancels whatever is in progress, so a signal ends the bot
in any phase.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError

log = logging.getLogger(__name__)

#: Slack's answers that no retry will change: the token itself is refused, or is of the
#: wrong kind, or (the app-level token) lacks connections:write.
REFUSED = frozenset(
    {
        "invalid_auth",
        "not_authed",
        "account_inactive",
        "token_revoked",
        "token_expired",
        "not_allowed_token_type",
        "missing_scope",
    }
)
#: What to add to a refusal's line, by Slack's error.
HINTS = {
    "token_expired": "; a rotating token (xoxe.xoxb-…) lasts 12 hours and approval-bot does "
    "not refresh it: set a fresh one and restart",
}


class Refused(Exception):
    """Slack refused a token: retrying will not help."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def plain(error: BaseException) -> str:
    """A failure in plain words: no reprs, no tracebacks."""
    if isinstance(error, SlackApiError):
        return f"Slack answered {error.response.get('error') or error.response.status_code}"
    if isinstance(error, aiohttp.ClientConnectorError):
        cause, number = error.os_error, error.os_error.errno
        if number and number > 0 and not isinstance(cause, socket.gaierror):
            reason = os.strerror(number)  # asyncio's own text repeats the address as a tuple
        else:
            reason = cause.strerror or "no connection"
        return f"cannot connect to {error.host}:{error.port} ({reason})"
    if isinstance(error, TimeoutError):
        return "no answer in time"
    if isinstance(error, aiohttp.ClientResponseError):
        return f"HTTP {error.status} {error.message}".strip()
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:200]}" if text else type(error).__name__


class _OneLine(logging.Filter):
    """slack_sdk's own Socket Mode log lines: none while `SlackLink` is connecting (it says
    what failed itself), one line each afterwards (reconnects), never a traceback."""

    def __init__(self) -> None:
        super().__init__()
        self.quiet = False

    def filter(self, record: logging.LogRecord) -> bool:
        if self.quiet and record.levelno < logging.CRITICAL:
            return False
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


def socket_mode_logger(name: str = f"{__name__}.socket") -> logging.Logger:
    """A logger for the Socket Mode client (`bot.slack.link.socket`), one line per entry."""
    logger = logging.getLogger(name)
    if not any(isinstance(f, _OneLine) for f in logger.filters):
        logger.addFilter(_OneLine())
    return logger


def _quiet(logger: Any, quiet: bool) -> None:
    for f in getattr(logger, "filters", ()):
        if isinstance(f, _OneLine):
            f.quiet = quiet


class SlackLink:
    """Checks the token and (with a Socket Mode handler) connects, retrying in the background."""

    def __init__(
        self,
        client: Any,
        socket_handler: Any = None,
        *,
        attempt_timeout: float = 10.0,
        first_pause: float = 1.0,
        max_pause: float = 30.0,
    ) -> None:
        self.client = client
        self.socket_handler = socket_handler
        self.attempt_timeout = attempt_timeout
        self.first_pause = first_pause
        self.max_pause = max_pause
        self.state = "connecting"
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="slack-link")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self.socket_handler is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.socket_handler.close_async(), 2)

    async def _run(self) -> None:
        try:
            await self._retry("auth.test", self._auth_test)
            if self.socket_handler is not None:
                await self._retry("Socket Mode connection", self._connect_socket)
                log.info("slack socket mode connected")
        except Refused as e:
            self.state = f"error: {e.message}"
            log.error("slack: %s", e.message)
            return
        self.state = "ok"

    async def _retry(self, what: str, attempt: Any) -> None:
        pause, tries = self.first_pause, 1
        while True:
            try:
                await asyncio.wait_for(attempt(), self.attempt_timeout)
                return
            except (Refused, asyncio.CancelledError):
                raise
            except Exception as e:
                log.warning(
                    "slack %s failed (attempt %d): %s; retrying in %g s",
                    what,
                    tries,
                    plain(e),
                    pause,
                )
            await asyncio.sleep(pause)
            pause, tries = min(pause * 2, self.max_pause), tries + 1

    async def _auth_test(self) -> None:
        try:
            answer = await self.client.auth_test()
        except SlackApiError as e:
            error = e.response.get("error")
            if error in REFUSED:
                raise Refused(
                    f"Slack refused the bot token ({error}): check SLACK_BOT_TOKEN (the Bot "
                    f"User OAuth Token, xoxb-…, of the installed app){HINTS.get(error, '')}"
                ) from e
            raise
        log.info(
            "slack ok: team %s (%s), bot user %s (%s)",
            answer.get("team"),
            answer.get("team_id"),
            answer.get("user"),
            answer.get("user_id"),
        )

    async def _connect_socket(self) -> None:
        sm = self.socket_handler.client
        _quiet(sm.logger, True)
        try:
            try:
                sm.wss_uri = await sm.issue_new_wss_url()
            except SlackApiError as e:
                if e.response.get("error") in REFUSED:
                    raise Refused(
                        f"Slack refused the app-level token ({e.response.get('error')}): "
                        "check SLACK_APP_TOKEN (xapp-…, with the connections:write scope)"
                    ) from e
                raise
            await sm.connect()
        except BaseException:
            sm.wss_uri = None  # a fresh URL next time
            raise
        finally:
            _quiet(sm.logger, False)
