"""`approval-bot serve`: run the bot (Slack, HTTP API, dispatcher, sweeper) in this process,
on uvloop where installed, with the GC tuned for a long-lived server."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bot.cli.connect import configure_logging

if TYPE_CHECKING:
    from bot.core.settings import Settings


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "serve",
        help="run the bot: Slack, HTTP API, dispatcher, sweeper",
        description="Run the bot in this process until SIGINT or SIGTERM (SIGHUP reloads the\n"
        "policy file). It takes no options: environment variables configure it (and\n"
        "the dotenv file APPROVALS_ENV_FILE names, under them).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.set_defaults(run=run)

    def format_help() -> str:  # the settings (pydantic) load only when the help is asked for
        from bot.core.settings import VARIABLES  # the one list: every variable Settings reads

        p.epilog = serve_epilog(VARIABLES)
        return argparse.ArgumentParser.format_help(p)

    p.format_help = format_help


def serve_epilog(variables: tuple[str, ...]) -> str:
    """`serve --help`'s list of the environment variables, and what a bare start does."""
    import textwrap

    listed = textwrap.fill(", ".join((*variables, "APPROVALS_ENV_FILE")), 76)
    return (
        "environment variables (the README's Configuration section says what each does):\n"
        f"{textwrap.indent(listed, '  ')}\n\n"
        "With none set: the embedded Redis of APPROVALS_DATA_DIR (a Redis on localhost:6379\n"
        "is used only when REDIS_URL names it), no Slack (decide with `approval-bot\n"
        "approve`), and, without APPROVALS_API_TOKENS, it listens on 127.0.0.1 only and\n"
        "prints `export APPROVALS_URL=… APPROVALS_TOKEN=…` (a development token) to paste\n"
        "in the shell the agent runs in."
    )


def event_loop_factory() -> Callable[[], Any] | None:
    """uvloop's event loop when it is installed (a C event loop and transports: the bot's
    CPU per request falls by about a fifth), else asyncio's own (None)."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


#: The cyclic GC's first threshold while serving (CPython's default is 700 allocations).
SERVE_GC_THRESHOLD = 10_000


def tune_gc_for_serving() -> None:
    """Once `serve` has started: what start-up made (about 140,000 objects that live as long
    as the process) goes out of the cyclic GC's sight, and the young generation is collected
    every `SERVE_GC_THRESHOLD` allocations instead of 700 (docs/ARCHITECTURE.md)."""
    import gc

    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(SERVE_GC_THRESHOLD, older, oldest)


def run(args: argparse.Namespace, settings: Settings) -> int:
    try:
        return _serve(settings)
    except KeyboardInterrupt:  # Ctrl-C before the loop took the signals over (the imports)
        return 0


def _serve(settings: Settings) -> int:
    import asyncio

    from approvals._internal.policy_file import PolicyError
    from bot.core.app import StartError
    from bot.core.app import serve as serve_bot
    from bot.ops import embedded_redis

    configure_logging(settings.log_level, settings.log_format)
    try:
        with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
            runner.run(serve_bot(settings, started=tune_gc_for_serving))
    except KeyboardInterrupt:
        pass
    except StartError as e:
        print(f"approval-bot: {e.message}", file=sys.stderr)
        return 2
    except PolicyError as e:
        print(f"approval-bot: invalid policy file:\n{e.message}", file=sys.stderr)
        return 2
    except embedded_redis.NoRedisServer as e:
        print(f"approval-bot: {e}", file=sys.stderr)
        return 2
    return 0
