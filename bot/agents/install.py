"""`approval-bot setup claude-code|codex`: writes the agent's hook entries, timeouts consistent.

The file, the merge and the timeout rule are `bot.agents.settings_files`; this module
is the command around them: it prints the change as a unified diff
(`--dry-run` prints it and writes nothing), writes it with a backup, says
what to export, and for Codex makes the hook trusted through Codex's own
`app-server` (`bot.agents.codex_app_server`). `--check` is `bot.agents.check`.

Only the standard library is imported here: the CLI imports this module to
build its parser.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any, TextIO

from bot.agents.settings_files import (
    AGENT_DEFAULT_TIMEOUT,
    DEFAULT_MATCHER,
    DEFAULT_TOKEN_VARIABLE,
    EVENTS,
    ON_TIMEOUT_CHOICES,
    Agent,
    HookSpec,
    SetupError,
    format_seconds,
    plan,
    settings_path,
    write_with_backup,
)

# -- the command -------------------------------------------------------------------------------


def add_arguments(sub: Any) -> None:
    """The `setup` sub-command's parser (sub: the CLI's subparsers object)."""
    p = sub.add_parser(
        "setup",
        help="write the agent's hook settings (or --check them)",
        description="Write approval-bot's hook into Claude Code's or Codex's settings, merged "
        "with what is there. The bot waits 10% less than the hook timeout (5 to 30 s less), so "
        "it always answers before the agent gives up on the hook.",
    )
    agents = p.add_subparsers(dest="agent", required=True, metavar="AGENT")
    for agent, title in (("claude-code", "Claude Code"), ("codex", "Codex")):
        a = agents.add_parser(agent, help=f"{title} hook settings")
        scopes = ("project", "local", "user") if agent == "claude-code" else ("user", "project")
        a.add_argument(
            "--scope",
            choices=scopes,
            default=scopes[0],
            help=(
                "project: .claude/settings.json, local: .claude/settings.local.json, "
                "user: ~/.claude/settings.json"
                if agent == "claude-code"
                else "user: $CODEX_HOME/hooks.json, project: .codex/hooks.json (Codex reads it "
                "only in a trusted project)"
            ),
        )
        a.add_argument("--project", type=Path, default=Path("."), help="the project directory")
        a.add_argument("--event", choices=EVENTS, default="PreToolUse")
        if agent == "claude-code":
            a.add_argument(
                "--type",
                dest="hook_type",
                choices=("command", "http"),
                default="command",
                help="command (recommended: fails closed) or http (see the README's limits)",
            )
            a.add_argument("--url", help="http: the bot's base URL (default: APPROVALS_URL)")
            a.add_argument(
                "--token-variable",
                default=DEFAULT_TOKEN_VARIABLE,
                help="http: the environment variable holding the bearer token",
            )
        a.add_argument("--matcher", help=f"tool-name regex (default: {DEFAULT_MATCHER[agent]})")  # type: ignore[index]
        a.add_argument(
            "--timeout",
            type=float,
            default=AGENT_DEFAULT_TIMEOUT,
            help="the hook timeout written for the agent, seconds (default 600, at least 10); "
            "the bot's --timeout is set below it",
        )
        a.add_argument(
            "--on-timeout",
            choices=ON_TIMEOUT_CHOICES,
            default="deny",
            help="when no decision comes in time: deny (default), ask, or defer (Claude Code "
            "PreToolUse under -p; a deny elsewhere) — see `approval-bot hook --help`",
        )
        if agent == "claude-code":
            a.add_argument(
                "--on-failure-block",
                action="store_true",
                help='add "onFailure": "block" (Claude Code 2.1.295 and later: a hook that fails '
                "to start, times out or exits oddly blocks; earlier versions ignore it)",
            )
        a.add_argument(
            "--executable",
            help="how the agent runs approval-bot (default: 'approval-bot' when it is on PATH, "
            "else this one's full path)",
        )
        a.add_argument("--dry-run", action="store_true", help="print the diff, write nothing")
        a.add_argument(
            "--check",
            action="store_true",
            help="read the settings and report fail-open gaps (exit 0: the gate is on; 1: it is "
            "not reliably on; 3: unknown, something could not be checked)",
        )
        if agent == "codex":
            a.add_argument(
                "--codex", help="the codex executable used to trust the hook (default: on PATH)"
            )
            a.add_argument(
                "--no-trust", action="store_true", help="do not mark the hook trusted in Codex"
            )
            a.add_argument(
                "--codex-home", type=Path, help="Codex's home (default: $CODEX_HOME or ~/.codex)"
            )


def default_executable() -> str:
    """`approval-bot` when PATH finds this same program; else the running one's full path."""
    running = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else None
    found = shutil.which("approval-bot")
    if found and (running is None or running.name != "approval-bot"):
        return "approval-bot"
    if found and running is not None and Path(found).resolve() == running:
        return "approval-bot"
    if running is not None and running.name == "approval-bot":
        return str(running)
    return "approval-bot"


def run_setup(
    args: argparse.Namespace, out: TextIO, *, approvals_url: str | None, codex_home: Path
) -> int:
    """`approval-bot setup …`; exit 0 done, 1 check findings, 2 could not."""
    agent: Agent = args.agent
    project = Path(args.project).resolve()
    home = Path.home()
    codex_home = Path(args.codex_home) if getattr(args, "codex_home", None) else codex_home
    try:
        spec = HookSpec(
            agent=agent,
            event=args.event,
            hook_type=getattr(args, "hook_type", "command"),
            matcher=args.matcher,
            timeout=args.timeout,
            on_timeout=args.on_timeout,
            executable=args.executable or default_executable(),
            url=getattr(args, "url", None) or approvals_url,
            token_variable=getattr(args, "token_variable", DEFAULT_TOKEN_VARIABLE),
            on_failure_block=getattr(args, "on_failure_block", False),
        )
        path = settings_path(agent, args.scope, project, home, codex_home)
        change = plan(path, spec)
    except SetupError as e:
        print(f"approval-bot: {e}", file=sys.stderr)
        return 2
    if change.changed:
        print(change.diff(), file=out, end="")
    else:
        print(f"{path}: already up to date", file=out)
    if args.dry_run:
        print("(dry run: nothing written)", file=out)
        return 0
    if change.changed:
        backup = write_with_backup(path, change.old, change.new)
        print(f"wrote {path}" + (f" (backup: {backup})" if backup else ""), file=out)
    for line in _notes(spec, args.scope, project):
        print(line, file=out)
    if agent == "codex" and not args.no_trust:
        from bot.agents.codex_app_server import trust_our_hooks

        wanted = [(spec.handler()["command"], spec.matcher or DEFAULT_MATCHER[agent])]
        return trust_our_hooks(path, project, wanted, args.codex, out, codex_home)
    return 0


def _notes(spec: HookSpec, scope: str, project: Path) -> list[str]:
    wait = format_seconds(spec.wait)
    lines = [
        f"hook timeout {format_seconds(spec.timeout)} s; the bot answers within {wait} s "
        f"(keep the command's --timeout below the hook timeout if you edit either)."
    ]
    if spec.hook_type == "http":
        lines.append(
            f"http hook: export {spec.token_variable} where the agent runs. Claude Code runs the "
            "tool when this hook cannot reach the bot; use --type command where that matters."
        )
    else:
        lines.append(
            "the hook reaches the bot through APPROVALS_URL + APPROVALS_TOKEN (or REDIS_URL): "
            "export them where the agent runs."
        )
    if spec.agent == "claude-code" and spec.event == "PermissionRequest":
        lines.append(
            "PermissionRequest hooks never run under `claude -p`; use PreToolUse for headless runs."
        )
    if spec.agent == "codex" and scope == "project":
        lines.append(
            f"Codex reads {project}/.codex/hooks.json only when it trusts the project: "
            f'[projects."{project}"] trust_level = "trusted" in $CODEX_HOME/config.toml '
            "(Codex asks when you first open the project)."
        )
    return lines
