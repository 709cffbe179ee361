"""`approval-bot`: the command line — serve, pending/show/approve/deny/audit, request, hooks.

Configuration comes from the environment through `bot.settings`.
`pending`, `show`, `approve`, `deny` and `audit` work on the bot's Redis
(`REDIS_URL`, `APPROVALS_PREFIX`); `request` and `hook` use the bot's HTTP
API when `APPROVALS_URL` (+ `APPROVALS_TOKEN`) is set, else Redis. A CLI
decision goes through the same compare-and-set as a Slack click, is audited
with `via=cli`, and queues the Slack message update.

Exit status: 0 done (or approved), 1 refused (unknown id, already decided,
denied), 2 usage, configuration or connection problem (and timeouts).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TextIO

# Imports stay light here: `--help`, `--version` and a parse error need none of the
# rest, and every hook call pays for what loads before it can answer. Commands import
# what they use.
from bot.durations import duration, positive_duration

if TYPE_CHECKING:
    from approvals.client import ApprovalClient
    from approvals.store.store import ApprovalStore
    from bot import redis_location
    from bot.settings import Settings

log = logging.getLogger(__name__)

_REDIS_NEEDED = (
    "pending, show, approve, deny and audit need the bot's Redis: start `approval-bot serve`, "
    "or set REDIS_URL (and APPROVALS_PREFIX) to the bot's"
)


# -- arguments -------------------------------------------------------------------------------


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


def since(text: str) -> datetime:
    """`--since`: an ISO time (UTC unless it says otherwise) or a duration back from now."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return datetime.now(UTC) - timedelta(seconds=duration(text))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def build_parser() -> argparse.ArgumentParser:
    from bot import grant_commands, webhook_commands
    from bot.setup import add_arguments as add_setup_arguments

    parser = argparse.ArgumentParser(
        prog="approval-bot", description="Slack approvals for AI agents."
    )
    parser.add_argument("--version", action=_Version, help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("serve", help="run the bot: Slack, HTTP API, dispatcher, sweeper")

    p = sub.add_parser("pending", help="list pending approval requests")
    p.add_argument("--json", action="store_true", help="one approval object per line")
    p.add_argument("--limit", type=int, default=100)

    p = sub.add_parser("show", help="show one approval request")
    p.add_argument("id")
    p.add_argument("--json", action="store_true", help="the raw approval object (unmasked)")

    p = sub.add_parser("approve", help="approve a pending request (break-glass)")
    p.add_argument("id")
    answer = p.add_mutually_exclusive_group()
    answer.add_argument("--input", help="the typed answer, for kind 'input'")
    answer.add_argument("--selection", help="the chosen option, for kind 'choice'")
    p.add_argument("--for-session", action="store_true", help="also approve for the session")
    p.add_argument(
        "--scope",
        choices=("call", "prefix", "tool"),
        default="call",
        help="with --for-session: this exact call (default), the command's prefix, the tool",
    )
    p.add_argument("--as", dest="as_name", metavar="NAME", help="who decides (default: $USER)")

    p = sub.add_parser("deny", help="deny a pending request")
    p.add_argument("id")
    p.add_argument("--reason", required=True, help="shown to the agent and in Slack")
    p.add_argument("--as", dest="as_name", metavar="NAME", help="who decides (default: $USER)")

    p = sub.add_parser("audit", help="export the audit log")
    p.add_argument("--since", type=since, help="ISO time, or a duration back: 30m, 1h, 7d")
    p.add_argument("--id", dest="request_id", help="only this request")
    p.add_argument("--json", action="store_true", help="JSON lines")

    p = sub.add_parser("request", help="ask for an approval from a shell script")
    p.add_argument("--tool", required=True)
    p.add_argument("--args", default="{}", help="the arguments, a JSON object")
    p.add_argument("--kind", choices=("approval", "choice", "input"), default="approval")
    p.add_argument("--options", help="comma-separated options, for --kind choice")
    p.add_argument("--prompt")
    p.add_argument("--sensitivity", choices=("low", "pii", "secret"), default="low")
    p.add_argument("--deadline", type=positive_duration, help="the reviewers' deadline, e.g. 30m")
    p.add_argument("--call-id", help="retrying with the same id finds the same request")
    p.add_argument("--session-id")
    p.add_argument("--agent", default="cli")
    p.add_argument("--route", help="a policy route to ask on (the policy's rules still win)")
    p.add_argument(
        "--allow-for-session",
        action="store_true",
        help="let the reviewer also approve later calls of this session (needs --session-id)",
    )
    p.add_argument(
        "--wait",
        type=duration,
        help="seconds to wait (default: until decided); Ctrl-C withdraws the request",
    )
    p.add_argument("--json", action="store_true", help="print the approval object")

    p = sub.add_parser("policy", help="policy files: check one, explain a shell command")
    from bot.policy_command import add_arguments

    add_arguments(p.add_subparsers(dest="policy_command", required=True, metavar="ACTION"))

    p = sub.add_parser("mcp", help="the approvals MCP server over stdio (permission_prompt, …)")
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
    add_setup_arguments(sub)
    webhook_commands.add_parser(sub)
    grant_commands.add_parser(sub)
    p = sub.add_parser("doctor", help="check Redis, Slack, the policy and agent setup")
    p.add_argument("--json", action="store_true", help="one JSON object for automation")
    p.add_argument(
        "--request-url",
        help="HTTP mode: the public Slack request URL (https://HOST/slack/events) to try",
    )
    p.add_argument("--project", default=".", help="project whose agent settings to check")
    return parser


# -- plumbing ----------------------------------------------------------------------------------


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
    """Once `serve` has started: what start-up made (modules, the app, its clients: about
    140,000 objects) goes out of the cyclic GC's sight — it lives as long as the process,
    and every full collection under load walked it again — and the young generation is
    collected every `SERVE_GC_THRESHOLD` allocations instead of 700 (each request makes
    hundreds). Measured with bench/bench_load.py (500 of each): the bot spent about 2 s in
    the GC (pauses up to 0.4 s) against about 0.4 s so. The older generations keep their
    defaults, so cyclic garbage is still collected."""
    import gc

    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(SERVE_GC_THRESHOLD, older, oldest)


def configure_logging(level: str, fmt: str = "text") -> None:
    """The one place logging is configured (`bot.logs`: escaped lines or JSON lines)."""
    from bot import logs

    logs.configure(level, fmt)
    if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
        # slack_sdk narrates each retry at INFO; bot.slack_link says what failed, once.
        logging.getLogger("slack_sdk").setLevel(logging.WARNING)


def locate_redis(settings: Settings) -> redis_location.Located:
    """REDIS_URL; else localhost:6379 if it answers; else the embedded server that
    `approval-bot serve` runs with its data in APPROVALS_DATA_DIR (from any directory)."""
    from bot import redis_location

    return redis_location.for_cli(settings.redis_url, settings.approvals_data_dir)


def redis_url(settings: Settings) -> str:
    """The Redis URL to use; a `CliError` saying what was tried when none answers."""
    from bot.commands import CliError

    located = locate_redis(settings)
    if located.source == "nothing":
        raise CliError(f"{located.cannot_reach()}. {_REDIS_NEEDED}")
    return located.url


async def open_store(settings: Settings) -> ApprovalStore:
    from approvals.store.connection import connect
    from approvals.store.keys import Keys
    from approvals.store.store import ApprovalStore
    from bot.commands import CliError

    located = locate_redis(settings)
    if located.source == "nothing":
        raise CliError(f"{located.cannot_reach()}. {_REDIS_NEEDED}")
    redis = connect(located.url, client_name="approval-bot-cli")
    try:
        await redis.ping()
    except Exception as e:
        await redis.aclose()
        raise CliError(f"{located.cannot_reach()}. {_REDIS_NEEDED}") from e
    return ApprovalStore(redis, Keys(settings.approvals_prefix))


def open_client(settings: Settings) -> ApprovalClient:
    """The bot's HTTP API when APPROVALS_URL is set, else its Redis (`choose_transport`)."""
    from approvals.client import ApprovalClient
    from approvals.errors import InvalidRequest
    from approvals.transports import TransportFactory, choose_transport

    def redis_setup() -> TransportFactory:  # only when no APPROVALS_URL: Redis loads here
        from approvals.store.connection import connect
        from approvals.store.keys import Keys
        from approvals.transports import RedisTransport
        from bot.commands import policy_for

        policy = policy_for(settings)
        return lambda: RedisTransport(
            connect(redis_url(settings), client_name="approval-bot-cli"),
            Keys(settings.approvals_prefix),
            policy=policy,
        )

    token = settings.approvals_token.get_secret_value() if settings.approvals_token else None
    try:
        factory = choose_transport(settings.approvals_url, token, redis_setup)
    except InvalidRequest as e:
        from bot.commands import CliError

        raise CliError(e.message) from e
    return ApprovalClient(factory())


# -- entry point ---------------------------------------------------------------------------------


async def run(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    from bot import grant_commands, webhook_commands
    from bot.commands import cmd_audit, cmd_decide, cmd_pending, cmd_request, cmd_show

    if args.command == "request":
        async with open_client(settings) as client:
            return await cmd_request(args, client, out)
    store = await open_store(settings)
    try:
        commands: dict[str, Callable[[], Awaitable[int]]] = {
            "pending": lambda: cmd_pending(args, store, out),
            "show": lambda: cmd_show(args, store, out),
            "approve": lambda: cmd_decide(args, store, out, settings),
            "deny": lambda: cmd_decide(args, store, out, settings),
            "audit": lambda: cmd_audit(args, store, out),
            "webhooks": lambda: webhook_commands.cmd_webhooks(args, store, out),
            "grants": lambda: grant_commands.cmd_grants(args, store, out),
        }
        return await commands[args.command]()
    finally:
        await store.redis.aclose()


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def serve(settings: Settings) -> int:
    try:
        return _serve(settings)
    except KeyboardInterrupt:  # Ctrl-C before the loop took the signals over (the imports)
        return 0


def _serve(settings: Settings) -> int:
    import asyncio

    from approvals.policy_file import PolicyError
    from bot import embedded_redis
    from bot.app import StartError
    from bot.app import serve as serve_bot

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


def main(argv: Sequence[str] | None = None, *, started: float | None = None) -> int:
    """The `approval-bot` console script; returns the exit status.

    `started` (monotonic clock) is when the caller's clock started, which a hook's
    `--timeout` counts from. By default: run as the program (`argv` None, so the
    arguments are this process's own) it is the process's spawn, as the agent
    measures it; called with `argv` from a longer-lived process (a test, an
    embedding program) it is this call."""
    if started is None:
        from bot.spawn import process_started

        started = process_started() if argv is None else time.monotonic()
    given = list(sys.argv[1:] if argv is None else argv)
    if given[:1] == ["hook"] and not {"-h", "--help"} & set(given):
        # Hooks never fail open: always exit 0 with a decision (bot.hook_command).
        from bot import hook_command

        return hook_command.main(given, started=started, open_client=open_client)
    args = build_parser().parse_args(argv)
    args.started = started
    from bot.settings import SettingsError, load_settings

    try:
        settings = load_settings()
    except SettingsError as e:
        print(f"approval-bot: configuration error:\n{e}", file=sys.stderr)
        return 2
    except Exception as e:  # e.g. an unreadable APPROVALS_ENV_FILE; never exit 1 (see below)
        print(f"approval-bot: cannot read the configuration ({type(e).__name__})", file=sys.stderr)
        return 2
    if args.command == "serve":
        return serve(settings)
    if args.command == "policy":
        from bot import policy_command

        return policy_command.run(args, settings, sys.stdout)
    if args.command == "doctor":
        from bot import doctor

        located = locate_redis(settings)
        url = None if located.source == "nothing" else located.url
        return doctor.run(args, settings, url, sys.stdout)
    if args.command == "setup" and args.check:
        from bot.setup_check import run_check

        return run_check(args, sys.stdout, codex_home=settings.codex_home_or_default)
    if args.command == "setup":
        from bot.setup import run_setup

        return run_setup(
            args,
            sys.stdout,
            approvals_url=settings.approvals_url,
            codex_home=settings.codex_home_or_default,
        )
    if args.command in ("mcp", "mcp-proxy"):
        from bot.mcp.commands import run_mcp  # lazy: the MCP SDK loads only for these

        configure_logging("WARNING", settings.log_format)
        return run_mcp(args, settings, open_client)
    return run_command(args, settings)


def run_command(args: argparse.Namespace, settings: Settings) -> int:
    """The commands on the bot's Redis or through the client: errors as one line."""
    import asyncio

    from approvals.errors import (
        AlreadyDecided,
        ApprovalError,
        NotAllowed,
        NotFound,
        StoreUnavailable,
    )
    from bot.commands import CliError

    configure_logging("WARNING", settings.log_format)
    try:
        return asyncio.run(run(args, settings, sys.stdout))
    except CliError as e:
        print(f"approval-bot: {e.message}", file=sys.stderr)
        return e.code
    except (NotFound, AlreadyDecided, NotAllowed) as e:
        print(f"approval-bot: {e.message}", file=sys.stderr)
        return 1
    except StoreUnavailable as e:
        if settings.approvals_url:
            print(f"approval-bot: cannot reach the approval bot: {e.message}", file=sys.stderr)
        else:
            print(f"approval-bot: {locate_redis(settings).cannot_reach()}", file=sys.stderr)
        return 2
    except ApprovalError as e:
        print(f"approval-bot: {e.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # exit 2, never 1: agents treat 1 as "go ahead" for hooks
        log.exception("unexpected error")
        print(f"approval-bot: unexpected error: {e!r}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
