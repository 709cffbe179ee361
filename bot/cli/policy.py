"""`approval-bot policy check FILE`: validate a policy file and say what it holds."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from bot.cli.output import plural

if TYPE_CHECKING:
    from bot.core.settings import Settings


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("policy", help="policy files")
    p.set_defaults(run=run)
    checks = p.add_subparsers(dest="policy_command", required=True, metavar="ACTION")
    c = checks.add_parser("check", help="validate a policy file and print what it holds")
    c.add_argument("file", type=Path)


def run(args: argparse.Namespace, settings: Settings) -> int:
    return check_policy(args.file, settings, sys.stdout)


def check_policy(path: Path, settings: Settings, out: TextIO) -> int:
    """`policy check FILE`: exit 0 and a summary when valid, 1 and every problem when not."""
    from approvals._internal.policy_file import PolicyError, build_policy

    try:
        policy = build_policy(
            path, settings.approvals_default_channel, tuple(settings.approvals_reviewers)
        )
    except PolicyError as e:
        print(e.message, file=sys.stderr)
        return 1
    print(
        f"{path}: ok — {plural(len(policy.routes), 'route')}, {plural(len(policy.rules), 'rule')}",
        file=out,
    )
    for name, route in policy.routes.items():
        reviewers = ", ".join(route.reviewers) or "anyone"
        print(
            f"  route {name}: channel {route.channel}, quorum {route.quorum}, "
            f"on_timeout {route.on_timeout}, reviewers {reviewers}",
            file=out,
        )
    for rule in policy.rules:
        print(f"  rule {rule.name}: {rule.action}", file=out)
    return 0
