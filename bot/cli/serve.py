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
    p = sub.add_parser("serve", help="run the bot: Slack, HTTP API, dispatcher, sweeper")
    p.set_defaults(run=run)


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
