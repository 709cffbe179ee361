"""`approval-bot hook claude-code|codex`: the agents' command hook (`bot.agents.command_hook`).

`bot.cli.main` hands a hook call to the command hook before any parsing or settings (it must
answer fast and always exit 0 with a decision); this parser serves `hook --help` only.
"""

from __future__ import annotations

import argparse

#: What `--on-timeout` does (both `hook --help` and `hook AGENT --help` print it; `setup
#: --help` points here).
ON_TIMEOUT_HELP = """\
when no decision comes before --timeout (--on-timeout):
  deny   (default) the call is denied and the request withdrawn; the agent reads
         "No approval decision within N s; denied by default."
  ask    the agent's own approval flow decides: Claude Code (PreToolUse) asks its
         user in the terminal; elsewhere the hook prints nothing and the agent's
         normal permission rules apply. The request is withdrawn. A weaker gate.
  defer  Claude Code PreToolUse under `claude -p` (2.1.89 and later): the call is
         deferred and the request stays pending in Slack; `claude -p --resume ID`
         runs the same hook again, which answers the decision made meanwhile.
         Where the agent cannot defer (Codex, PermissionRequest, an interactive
         session) it is a deny.
The hook always exits 0 with a decision: bad input, bad configuration and an
unreachable bot are denies (the agents run the call on any other exit status)."""


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "hook",
        help="agent hooks: the hook JSON on stdin, the answer on stdout",
        description="The command hook `approval-bot setup` writes into Claude Code's or "
        "Codex's settings: reads the agent's hook JSON on stdin, asks for approval, prints "
        "the agent's answer on stdout.",
        epilog=ON_TIMEOUT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    hooks = p.add_subparsers(dest="dialect", required=True, metavar="AGENT")
    for name, agent in (("claude-code", "Claude Code"), ("codex", "Codex")):
        h = hooks.add_parser(
            name,
            help=f"{agent} PreToolUse / PermissionRequest command hook",
            epilog=ON_TIMEOUT_HELP,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        h.add_argument(
            "--timeout",
            help=(
                "the hook's timeout in the agent's settings, seconds (answers before it; "
                "default: the one `approval-bot setup` writes; clamped into range, never "
                "refused)"
            ),
        )
        h.add_argument(
            "--on-timeout",
            choices=("deny", "ask", "defer"),
            default="deny",
            help="what happens when no decision comes in time (default deny; see below)",
        )
