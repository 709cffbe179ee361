"""`approval-bot`: the command line's entry point — the parser built from the command groups,
the settings, and the hook's fast path.

Every command group is a module in `GROUPS` with `add_parser(subparsers)`, which adds its
commands and sets `run` as their default; `main` calls `run(args, settings)`. Configuration
comes from the environment through `bot.core.settings`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from collections.abc import Sequence
from typing import Any

#: Every command group, in `--help` order: `bot.cli.<name>`. Their modules import little at
#: their top (`--help`, `--version` and a parse error need none of the rest), and what a
#: command uses when it runs.
GROUPS = (
    "serve",
    "requests",
    "preview",
    "policy",
    "mcp",
    "hook",
    "agent_setup",
    "webhooks",
    "grants",
    "doctor",
)


class _Version(argparse.Action):
    """`--version`: the installed distribution's version (looked up only when asked)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("approval-bot")
        except PackageNotFoundError:
            found = "unknown (not installed)"
        print(f"approval-bot {found}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="approval-bot", description="Slack approvals for AI agents."
    )
    parser.add_argument("--version", action=_Version, help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in GROUPS:
        importlib.import_module(f"bot.cli.{name}").add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None, *, started: float | None = None) -> int:
    """The `approval-bot` console script; returns the exit status.

    `started` (monotonic clock) is when the caller's clock started, which a hook's
    `--timeout` counts from. By default: run as the program (`argv` None, so the
    arguments are this process's own) it is the process's spawn, as the agent
    measures it; called with `argv` from a longer-lived process (a test, an
    embedding program) it is this call."""
    if started is None:
        from bot.agents.spawn import process_started

        started = process_started() if argv is None else time.monotonic()
    given = list(sys.argv[1:] if argv is None else argv)
    if given[:1] == ["hook"] and not {"-h", "--help"} & set(given):
        # Hooks never fail open: always exit 0 with a decision (bot.agents.command_hook).
        from bot.agents import command_hook
        from bot.cli.connect import open_client

        return command_hook.main(given, started=started, open_client=open_client)
    args = build_parser().parse_args(given)
    args.started = started
    from bot.cli.connect import CliError, load_settings

    try:
        settings = load_settings()
    except CliError as e:
        print(f"approval-bot: {e.message}", file=sys.stderr)
        return e.code
    code: int = args.run(args, settings)
    return code


if __name__ == "__main__":
    sys.exit(main())
