"""`approval-bot hook claude-code|codex`: the agents' command hook (`bot.agents.command_hook`).

`bot.cli.main` hands a hook call to the command hook before any parsing or settings (it must
answer fast and always exit 0 with a decision); this parser serves `hook --help` only.
"""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("hook", help="agent hooks: the hook JSON on stdin, the answer on stdout")
    hooks = p.add_subparsers(dest="dialect", required=True, metavar="AGENT")
    for name, agent in (("claude-code", "Claude Code"), ("codex", "Codex")):
        h = hooks.add_parser(name, help=f"{agent} PreToolUse / PermissionRequest command hook")
        h.add_argument(
            "--timeout",
            help=(
                "the hook's timeout in the agent's settings, seconds (answers before it; "
                "default: the one `approval-bot setup` writes; clamped into range, never "
                "refused)"
            ),
        )
        h.add_argument("--on-timeout", choices=("deny", "ask", "defer"), default="deny")
