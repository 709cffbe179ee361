"""`approval-bot setup claude-code|codex [--check]`: write the agent's hook settings, or
check that its approval gate is on (`bot.agents.install`, `bot.agents.check`)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bot.core.settings import Settings


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from bot.agents.install import add_arguments

    add_arguments(sub)
    sub.choices["setup"].set_defaults(run=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    if args.check:
        from bot.agents.check import Here, run_check
        from bot.core.environment import environment
        from bot.ops import embedded_redis, redis_location

        def embedded_running() -> str | None:
            directory = redis_location.server_dir(settings.approvals_data_dir)
            return embedded_redis.recorded_url(directory)

        here = Here(environment(), embedded_running)
        return run_check(args, sys.stdout, codex_home=settings.codex_home_or_default, here=here)
    from bot.agents.install import run_setup

    return run_setup(
        args,
        sys.stdout,
        approvals_url=settings.approvals_url,
        codex_home=settings.codex_home_or_default,
    )
