"""The bot's Web API client: its logger's level is set, so slack_sdk formats no debug line
of every payload that nothing would print (it tests `logger.level`, not `isEnabledFor`)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from bot.slack_calls import _without_retries
from bot.slack_client import MaskingWebClient


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
    client = MaskingWebClient(token="xoxb-test")
    assert client.logger is levels and levels.level == logging.WARNING
    assert _without_retries(client).logger is levels, "the dispatcher's copy keeps it"


def test_debug_in_force_keeps_the_debug_lines(levels: logging.Logger) -> None:
    logging.getLogger().setLevel(logging.DEBUG)
    assert MaskingWebClient(token="xoxb-test").logger.level == logging.DEBUG
