"""How commands reach the bot: its Redis (`open_store`) or its HTTP API (`open_client`), the
settings they read, and a command's errors as one line and an exit status (`run_async`)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

# Imports stay light: every command group module imports this one to build the parser.
if TYPE_CHECKING:
    from approvals._internal.policy import Policy
    from approvals._internal.store.store import ApprovalStore
    from approvals.client import ApprovalClient
    from bot.core.settings import Settings
    from bot.ops import redis_location

log = logging.getLogger(__name__)

_REDIS_NEEDED = (
    "pending, show, approve, deny and audit need the bot's Redis: start `approval-bot serve` "
    "(with the same APPROVALS_DATA_DIR), or set REDIS_URL (and APPROVALS_PREFIX, if the bot "
    "has one) to the Redis the bot uses"
)


class CliError(Exception):
    """Ends the command with `message` on stderr and exit status `code`."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.message, self.code = message, code


def load_settings() -> Settings:
    """Every setting, validated; a `CliError` (exit 2) naming each problem."""
    from bot.core.settings import SettingsError
    from bot.core.settings import load_settings as load

    try:
        return load()
    except SettingsError as e:
        raise CliError(f"configuration error:\n{e}") from e
    except Exception as e:  # e.g. an unreadable APPROVALS_ENV_FILE; never exit 1 (see below)
        raise CliError(f"cannot read the configuration ({type(e).__name__})") from e


def configure_logging(level: str, fmt: str = "text") -> None:
    """The one place logging is configured (`bot.core.logs`: escaped lines or JSON lines)."""
    from bot.core import logs

    logs.configure(level, fmt)
    if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
        # slack_sdk narrates each retry at INFO; bot.slack.link says what failed, once.
        logging.getLogger("slack_sdk").setLevel(logging.WARNING)


def policy_for(settings: Settings) -> Policy:
    from approvals._internal.policy_file import build_policy

    return build_policy(
        settings.approvals_policy_file,
        settings.approvals_default_channel,
        tuple(settings.approvals_reviewers),
    )


def locate_redis(settings: Settings) -> redis_location.Located:
    """REDIS_URL; else the embedded server that `approval-bot serve` runs with its data in
    APPROVALS_DATA_DIR (from any directory). Never a Redis REDIS_URL does not name."""
    from bot.ops import redis_location

    return redis_location.for_cli(settings.redis_url, settings.approvals_data_dir)


def redis_url(settings: Settings) -> str:
    """The Redis URL to use; a `CliError` saying what was tried when none answers."""
    located = locate_redis(settings)
    if located.source == "nothing":
        raise CliError(f"{located.cannot_reach()}. {_REDIS_NEEDED}")
    return located.url


async def open_store(settings: Settings) -> ApprovalStore:
    from approvals._internal.store.connection import connect
    from approvals._internal.store.keys import Keys
    from approvals._internal.store.store import ApprovalStore

    located = locate_redis(settings)
    if located.source == "nothing":
        raise CliError(f"{located.cannot_reach()}. {_REDIS_NEEDED}")
    redis = connect(located.url, client_name="approval-bot-cli")
    try:
        await redis.ping()
    except Exception as e:
        await redis.aclose()
        raise CliError(f"{located.cannot_reach()}. {_REDIS_NEEDED}") from e
    return ApprovalStore(redis, Keys(settings.approvals_prefix))


def open_client(settings: Settings) -> ApprovalClient:
    """The bot's HTTP API when APPROVALS_URL is set, else its Redis (`choose_transport`)."""
    from approvals._internal.transports import TransportFactory, choose_transport
    from approvals.client import ApprovalClient
    from approvals.errors import InvalidRequest

    def redis_setup() -> TransportFactory:  # only when no APPROVALS_URL: Redis loads here
        from approvals._internal.store.connection import connect
        from approvals._internal.store.keys import Keys
        from approvals._internal.transports import RedisTransport

        policy = policy_for(settings)
        return lambda: RedisTransport(
            connect(redis_url(settings), client_name="approval-bot-cli"),
            Keys(settings.approvals_prefix),
            policy=policy,
        )

    token = settings.approvals_token.get_secret_value() if settings.approvals_token else None
    try:
        factory = choose_transport(settings.approvals_url, token, redis_setup)
    except InvalidRequest as e:
        raise CliError(e.message) from e
    return ApprovalClient(factory())


def on_store(
    settings: Settings, command: Callable[[ApprovalStore], Awaitable[int]]
) -> Callable[[], Coroutine[Any, Any, int]]:
    """`command` run on the bot's Redis, the client closed after it (for `run_async`)."""

    async def run() -> int:
        store = await open_store(settings)
        try:
            return await command(store)
        finally:
            await store.redis.aclose()

    return run


def run_async(settings: Settings, command: Callable[[], Coroutine[Any, Any, int]]) -> int:
    """Run a command on the bot's Redis or through the client: errors as one line."""
    import asyncio

    from approvals.errors import (
        AlreadyDecided,
        ApprovalError,
        NotAllowed,
        NotFound,
        StoreUnavailable,
    )

    configure_logging("WARNING", settings.log_format)
    try:
        return asyncio.run(command())
    except CliError as e:
        print(f"approval-bot: {e.message}", file=sys.stderr)
        return e.code
    except (NotFound, AlreadyDecided, NotAllowed) as e:
        print(f"approval-bot: {e.message}", file=sys.stderr)
        return 1
    except StoreUnavailable as e:
        if settings.approvals_url:
            print(f"approval-bot: cannot reach the approval bot: {e.message}", file=sys.stderr)
        else:
            print(f"approval-bot: {locate_redis(settings).cannot_reach()}", file=sys.stderr)
        return 2
    except ApprovalError as e:
        print(f"approval-bot: {e.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # exit 2, never 1: agents treat 1 as "go ahead" for hooks
        log.exception("unexpected error")
        print(f"approval-bot: unexpected error: {e!r}", file=sys.stderr)
        return 2
