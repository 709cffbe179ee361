"""`approval-bot mcp` and `approval-bot mcp-proxy`: start-up, configuration, exit status.

Both speak MCP on stdin/stdout, so nothing else may write there: logs go to
stderr. They reach the bot like the hooks do (`APPROVALS_URL` +
`APPROVALS_TOKEN`, else Redis through `REDIS_URL`), via the CLI's `open_client`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bot.cli.connect import configure_logging, open_client
from bot.cli.durations import positive_duration

# Imported when a command runs: the MCP SDK loads only for these commands.
if TYPE_CHECKING:
    from approvals.client import ApprovalClient
    from bot.core.settings import Settings
    from bot.mcp.reviewer_wait import WaitOptions


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("mcp", help="the approvals MCP server over stdio (permission_prompt, …)")
    p.set_defaults(run=run)
    p.add_argument("--agent", default="mcp", help="the agent name reviewers see")
    p.add_argument("--session-id", help="a session id for every request")
    p.add_argument("--route", help="the policy route to ask on (rules still win)")
    p.add_argument(
        "--progress-interval",
        type=positive_duration,
        default=10.0,
        help="seconds between MCP progress notifications while waiting",
    )

    p = sub.add_parser("mcp-proxy", help="gate an upstream MCP server's tools: -- COMMAND [ARGS…]")
    p.set_defaults(run=run)
    p.add_argument("--name", help="the name in mcp__NAME__tool (default: from COMMAND)")
    p.add_argument("--route", help="the policy route to ask on")
    p.add_argument("--agent", default=None, help="the agent name reviewers see")
    p.add_argument("--upstream-url", help="a Streamable HTTP upstream instead of a command")
    p.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help="serve the client over Streamable HTTP at /mcp instead of stdio",
    )
    p.add_argument(
        "--listen-token-env",
        metavar="VAR",
        help="with --listen: the environment variable holding the bearer token clients send",
    )
    p.add_argument(
        "--upstream-bearer-env",
        metavar="VAR",
        help="the environment variable holding the HTTP upstream's bearer token",
    )
    p.add_argument(
        "--pass-env",
        metavar="VAR[,VAR…]",
        action="append",
        default=[],
        help="pass this variable of the environment to the upstream command (repeatable); it "
        "gets only PATH, HOME, the locale and the like otherwise (docs/agents/mcp-proxy.md)",
    )
    p.add_argument(
        "--mark-gated",
        action="store_true",
        help="say in tools/list descriptions which tools need approval",
    )
    p.add_argument(
        "--progress-interval",
        type=positive_duration,
        default=10.0,
        help="seconds between MCP progress notifications while waiting",
    )
    p.add_argument("upstream", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS…]")


def run(args: argparse.Namespace, settings: Settings) -> int:
    configure_logging("WARNING", settings.log_format)
    return run_mcp(args, settings, open_client)


def run_mcp(
    args: argparse.Namespace, settings: Any, open_client: Callable[[Any], ApprovalClient]
) -> int:
    """Run `mcp` or `mcp-proxy` until the MCP client goes away; returns the exit status."""
    import asyncio

    from bot.mcp.reviewer_wait import WaitOptions

    wait = WaitOptions(progress_interval=args.progress_interval)
    try:
        if args.command == "mcp":
            return asyncio.run(_serve(args, settings, open_client, wait))
        return asyncio.run(_proxy(args, settings, open_client, wait))
    except KeyboardInterrupt:
        return 130
    except UsageError as e:
        print(f"approval-bot {args.command}: {e}", file=sys.stderr)
        return 2


class UsageError(Exception):
    """Bad arguments or configuration: exit status 2 with the message."""


async def _serve(
    args: argparse.Namespace,
    settings: Any,
    open_client: Callable[[Any], ApprovalClient],
    wait: WaitOptions,
) -> int:
    from bot.mcp.server import ServerOptions, run_stdio

    options = ServerOptions(
        agent=args.agent, session_id=args.session_id, route=args.route, wait=wait
    )
    async with open_client(settings) as client:
        await run_stdio(client, options)
    return 0


async def _proxy(
    args: argparse.Namespace,
    settings: Any,
    open_client: Callable[[Any], ApprovalClient],
    wait: WaitOptions,
) -> int:
    from bot.mcp.proxy import ProxyOptions, run_proxy
    from bot.mcp.upstream import Upstream

    command = list(args.upstream or [])
    if command and command[0] == "--":
        command = command[1:]
    if bool(command) == bool(args.upstream_url):
        raise UsageError(
            "give the upstream server as `-- COMMAND [ARGS…]` or as --upstream-url URL"
        )
    upstream = Upstream(
        command=command,
        url=args.upstream_url,
        bearer_env=args.upstream_bearer_env,
        pass_env=_pass_env(args.pass_env),
    )
    options = ProxyOptions(
        name=args.name or upstream.default_name(),
        route=args.route,
        agent=args.agent,
        mark_gated=args.mark_gated,
        wait=wait,
    )
    listen = _listen(args) if args.listen else None
    async with open_client(settings) as client:
        return await run_proxy(upstream, client, options, listen)


def _pass_env(given: list[str]) -> tuple[str, ...]:
    """`--pass-env` names: valid variable names, never the approval or Slack credentials."""
    from bot.mcp.upstream import ENV_NAME, is_private

    names = [n.strip() for value in given for n in value.split(",") if n.strip()]
    for name in names:
        if not ENV_NAME.fullmatch(name):
            raise UsageError(f"--pass-env wants variable names, not {name!r}")
        if is_private(name):
            raise UsageError(
                f"--pass-env {name}: APPROVALS_*, SLACK_* and REDIS_URL are never passed to "
                "the upstream (with them it could decide its own calls)"
            )
    return tuple(dict.fromkeys(names))


def _listen(args: argparse.Namespace) -> Any:
    """`--listen HOST:PORT` with its token from `--listen-token-env`: never an open port."""
    from bot.mcp.proxy import Listen

    host, _, port = args.listen.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--listen wants HOST:PORT, e.g. 127.0.0.1:8765, not {args.listen!r}")
    name = args.listen_token_env
    token = os.environ.get(name, "").strip() if name else ""
    if not token:
        raise UsageError(
            "--listen needs a bearer token: --listen-token-env VAR, with the token in $VAR"
        )
    return Listen(host.strip("[]"), int(port), token)
