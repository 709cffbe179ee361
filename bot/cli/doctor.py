"""`approval-bot doctor`: the checks a new operator runs first (`bot.ops.doctor`)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from bot.cli.connect import locate_redis

if TYPE_CHECKING:
    from bot.core.settings import Settings


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("doctor", help="check Redis, Slack, the policy and agent setup")
    p.set_defaults(run=run)
    p.add_argument("--json", action="store_true", help="one JSON object for automation")
    p.add_argument(
        "--request-url",
        help="HTTP mode: the public Slack request URL (https://HOST/slack/events) to try",
    )
    p.add_argument("--project", default=".", help="project whose agent settings to check")


def run(args: argparse.Namespace, settings: Settings) -> int:
    from bot.ops import doctor

    located = locate_redis(settings)
    url = None if located.source == "nothing" else located.url
    return doctor.run(args, settings, url, sys.stdout)
