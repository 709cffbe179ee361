"""`approval-bot hook claude-code|codex`: the command hook. Exit 0 with a decision; a deny when
in doubt.

Every PreToolUse / PermissionRequest event gets a decision on stdout, written as ASCII JSON
(a deny for bad input or configuration, an unreachable bot, a conflict, a timeout, a SIGTERM
or SIGINT before the decision); other events get nothing. When stdout cannot take it, exit 2
with the reason on stderr. Problems are one line on stderr, never a traceback (`say`). Why:
docs/ARCHITECTURE.md, "Hooks answer every call" and "The command hook".
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from types import FrameType
from typing import TYPE_CHECKING, Any, BinaryIO, TextIO

# Light imports only (no pydantic, no asyncio): with a bot URL, a hook call (Claude Code or
# Codex) is answered without them (`forward`); every gated tool call waits for this process.
from approvals.integrations.hook_input import (
    DEFAULT_HOOK_TIMEOUT,
    MAX_HOOK_BODY_BYTES,
    MAX_MARGIN_SECONDS,
    MIN_ASK_SECONDS,
    MIN_HOOK_TIMEOUT_SECONDS,
    UNREACHABLE_REASON,
    HookBody,
    clamp_timeout,
    codex_reason,
    deny,
    read_hook_body,
    time_budget,
)
from bot.agents.call_context import CONTEXT_FIELD, MAX_SECONDS, gather

if TYPE_CHECKING:
    import http.client
    from urllib.parse import SplitResult

    from approvals.client import ApprovalClient

log = logging.getLogger(__name__)

#: Makes the approvals client from the settings (`bot.cli.connect.open_client`).
OpenClient = Callable[[Any], "ApprovalClient"]

DIALECTS = ("claude-code", "codex")


def hook_options(argv: list[str]) -> tuple[str, float, str]:
    """(dialect, timeout, on_timeout) from `hook DIALECT [--timeout S] [--on-timeout M]`,
    read leniently: a timeout is clamped (unreadable: the default), a mode other than `ask`
    or `defer` is `deny`, anything unknown is ignored."""
    args = argv[1:] if argv and argv[0] == "hook" else argv
    dialect = args[0] if args else ""
    timeout, on_timeout = DEFAULT_HOOK_TIMEOUT, "deny"
    rest = args[1:]
    for i, arg in enumerate(rest):
        name, eq, value = arg.partition("=")
        if not eq:
            value = rest[i + 1] if i + 1 < len(rest) else ""
        if name == "--timeout":
            timeout = clamp_timeout(value)
        elif name == "--on-timeout":
            on_timeout = value if value in ("ask", "defer") else "deny"
    return dialect, timeout, on_timeout


def read_stdin(stream: BinaryIO | TextIO) -> HookBody:
    """Read at most the limit (and one byte more, to tell it was passed)."""
    binary = getattr(stream, "buffer", None)
    if binary is not None:
        data: bytes = binary.read(MAX_HOOK_BODY_BYTES + 1)
    else:
        raw = stream.read(MAX_HOOK_BODY_BYTES + 1)
        data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    return read_hook_body(data)


def quiet_logging() -> None:
    """Run as a program, nothing configures logging, so Python would print every warning
    (with its traceback) on stderr: the hook says each problem in one line itself
    (`answer_hook`'s `report`). Where logging is configured (a test, an embedding
    program), its handlers get the records as before."""
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(logging.NullHandler())


def main(
    argv: list[str],
    stdin: BinaryIO | TextIO | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    env: dict[str, str] | None = None,
    *,
    open_client: OpenClient,
    started: float | None = None,
) -> int:
    """Run the hook; returns the exit status: 0, or 2 when stdout cannot take the decision
    (`emit`). Nothing raises out of it. `open_client` makes the client from
    the settings (`bot.cli.connect.open_client`); `started` (monotonic clock): when the agent's
    clock
    for the hook's timeout started (default: now)."""
    started = time.monotonic() if started is None else started
    signals = Signals()
    signals.catch()
    shape: Any = "PreToolUse"
    err: TextIO | None = stderr or sys.stderr
    output: dict[str, Any] | None
    try:
        try:
            quiet_logging()
            dialect, timeout, on_timeout = hook_options(argv)
            body = read_stdin(stdin or sys.stdin)
            shape = body.shape
            output = answer(
                dialect,
                body,
                timeout,
                on_timeout,
                err,  # type: ignore[arg-type]  # None: `say` drops the lines
                env,
                started,
                open_client,
            )
            signals.check()  # a signal whose exception something swallowed still denies
        except BaseException as e:
            output = failure(shape, e, signals, err)
    except BaseException as e:  # a signal while the failure above was being told
        output = failure(shape, e, signals, None)
    signals.disarm()  # from here on, the answer is written whatever arrives
    try:
        return emit(output, stdout or sys.stdout, err)
    finally:
        signals.restore()


#: What a hook stopped by SIGTERM or SIGINT before its decision answers.
STOPPED = "the hook was stopped before a decision"


class Stopped(BaseException):
    """SIGTERM or SIGINT arrived before the decision (`Signals`)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.name = signal.Signals(signum).name


class Signals:
    """SIGTERM and SIGINT raise `Stopped` once, so the hook answers a deny in its own words
    instead of dying without one (exit status 143 or 130: "no opinion", the call runs).
    Once disarmed (the answer is being written), a signal is only noted."""

    HANDLED = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.armed = True
        self.caught: int | None = None
        self.previous: dict[int, Any] = {}

    def catch(self) -> None:
        for signum in self.HANDLED:
            try:
                self.previous[signum] = signal.signal(signum, self._handle)
            except (ValueError, OSError):  # not the main thread: nothing to catch
                pass

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.caught = self.caught or signum
        if self.armed:
            self.armed = False
            raise Stopped(signum)

    def check(self) -> None:
        if self.caught is not None:
            self.armed = False
            raise Stopped(self.caught)

    def disarm(self) -> None:
        self.armed = False

    def restore(self) -> None:
        for signum, handler in self.previous.items():
            try:
                signal.signal(signum, handler)
            except (ValueError, OSError, TypeError):
                pass


def failure(
    shape: Any, error: BaseException, signals: Signals, stderr: TextIO | None
) -> dict[str, Any]:
    """The deny for a hook that failed or was stopped (`error`), told on stderr."""
    if isinstance(error, Stopped | KeyboardInterrupt) or signals.caught is not None:
        signals.disarm()
        name = error.name if isinstance(error, Stopped) else "SIGINT"
        say(stderr, f"approval-bot hook: stopped by {name} before a decision; denied")
        return deny(shape, f"Approval hook error: {STOPPED}; denied")
    say(stderr, f"approval-bot hook: failed ({type(error).__name__}); denied")
    return deny(shape, "Approval hook error: internal error; denied")


def say(stream: TextIO | None, line: str) -> None:
    """`line` on `stream` (stderr), never raising: a closed or unwritable stderr, or one whose
    encoding cannot hold a character, loses the line, not the decision."""
    if stream is None:
        return
    try:
        buffer = getattr(stream, "buffer", None)
        if buffer is not None:
            stream.flush()
            buffer.write(f"{line}\n".encode("utf-8", "backslashreplace"))
            buffer.flush()
        else:
            stream.write(f"{line}\n")
            stream.flush()
    except Exception:
        pass


def emit(output: dict[str, Any] | None, stdout: TextIO | None, stderr: TextIO | None) -> int:
    """Write `output` (None or {}: nothing) on stdout as one line of ASCII JSON; the exit
    status. 0 once written. When stdout cannot take it (closed, its reader gone), a decision
    is still made: exit 2, a blocking error both agents read as a deny, with the reason on
    stderr (an approval that cannot be delivered is denied too). Never raises."""
    if not output:
        _flush_quietly(stdout)
        return 0
    try:
        data = (json.dumps(output, ensure_ascii=True) + "\n").encode("ascii")
        if stdout is None:
            raise ValueError("no stdout")
        buffer = getattr(stdout, "buffer", None)
        if buffer is not None:
            stdout.flush()
            buffer.write(data)
            buffer.flush()
        else:
            stdout.write(data.decode("ascii"))
            stdout.flush()
        return 0
    except Exception as e:
        _discard(stdout)
        reason = _reason_of(output)
        say(
            stderr,
            f"approval-bot hook: could not write the decision on stdout ({type(e).__name__}); "
            f"denied: {reason}",
        )
        return 2


def _reason_of(output: dict[str, Any]) -> str:
    """The reason a deny gives (`deny`'s shapes, both agents); else why it is denied here."""
    specific = output.get("hookSpecificOutput")
    if isinstance(specific, dict):
        if specific.get("permissionDecision") == "deny":
            return str(specific.get("permissionDecisionReason") or "denied")
        decision = specific.get("decision")
        if isinstance(decision, dict) and decision.get("behavior") == "deny":
            return str(decision.get("message") or "denied")
    return "Approval hook error: the decision could not be delivered; denied"


def _flush_quietly(stream: TextIO | None) -> None:
    try:
        if stream is not None:
            stream.flush()
    except Exception:
        _discard(stream)


def _discard(stream: TextIO | None) -> None:
    """Point a stream that failed at /dev/null, so that Python's own flush of it at exit
    cannot fail again (it would print a traceback and exit 120)."""
    try:
        if stream is not None:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, stream.fileno())
            os.close(devnull)
    except Exception:
        pass


def answer(
    dialect: str,
    body: HookBody,
    timeout: float,
    on_timeout: str,
    stderr: TextIO,
    env: dict[str, str] | None,
    started: float,
    open_client: OpenClient,
) -> dict[str, Any] | None:
    if body.ungated:
        return None  # not ours to decide: print nothing
    if dialect not in DIALECTS:
        message = f"unknown agent {dialect!r}; use one of {', '.join(DIALECTS)}"
        say(stderr, f"approval-bot hook: {message}")
        return deny(body.shape, f"Approval hook error: {message}")
    if body.problem is not None or body.payload is None:
        say(stderr, f"approval-bot hook: {body.problem}")
        return deny(body.shape, f"Approval hook error: {body.problem}")
    body = with_context(dialect, body, timeout, started, stderr)
    from bot.core.environment import SettingsError, environment, http_client_settings

    try:
        # A bot URL and token are all the hook needs: then it loads no other setting (nor
        # pydantic-settings) and calls over http.client (no aiohttp): every gated tool call
        # waits for this process.
        light = http_client_settings(environment(env))
        if light is not None:
            return forward(*light, dialect, body, timeout, on_timeout, stderr, started)
        from bot.core.settings import load_settings

        settings = load_settings(env)
        if unconfigured(settings):
            print(f"approval-bot hook: {NOT_CONFIGURED}; denied", file=stderr)
            return deny(body.shape, f"Approval hook is not configured: {NOT_CONFIGURED}.")
        make_client = lambda: open_client(settings)  # noqa: E731
    except SettingsError as e:
        problems = "; ".join(e.problems)
        say(stderr, f"approval-bot hook: configuration error: {problems}")
        return deny(body.shape, f"Approval hook is misconfigured: {problems}")
    import asyncio

    payload = body.payload or {}  # never empty here: checked above
    return asyncio.run(_review(dialect, payload, timeout, on_timeout, stderr, started, make_client))


def with_context(
    dialect: str, body: HookBody, timeout: float, started: float, stderr: TextIO
) -> HookBody:
    """`body` with the call's context (`bot.agents.call_context`: the agent's reason from its
    transcript, the user's request, the files the call changes as they stand) in its
    `approval_context`, taking at most a tenth of the time left (and `MAX_SECONDS`). Whatever
    goes wrong, `body` as it came: the call is reviewed without a reason."""
    payload = body.payload
    if payload is None or CONTEXT_FIELD in payload:
        return body
    left = time_budget(timeout) - max(0.0, time.monotonic() - started)
    seconds = min(MAX_SECONDS, left * 0.1)
    if seconds < 0.01:
        return body
    context, problem = gather(dialect, payload, seconds=seconds)
    if problem:
        print(f"approval-bot hook: no reason sent: {problem}", file=stderr)
    if context is None:
        return body
    return replace(body, payload={**payload, CONTEXT_FIELD: context})


#: What to set when the hook finds no bot at all (one line, on stderr and in the deny).
NOT_CONFIGURED = (
    "no approval bot to ask: set APPROVALS_URL and APPROVALS_TOKEN (the export line "
    "`approval-bot serve` prints) where the agent runs, or REDIS_URL"
)


def unconfigured(settings: Any) -> bool:
    """No bot URL, no REDIS_URL and no embedded server running in the data directory: the
    hook has nobody to ask (and never looks for a Redis that REDIS_URL does not name)."""
    if settings.approvals_url or settings.redis_url:
        return False
    from bot.ops import embedded_redis, redis_location

    directory = redis_location.server_dir(settings.approvals_data_dir)
    return embedded_redis.recorded_url(directory) is None


def http_connection(parts: SplitResult, timeout: float) -> http.client.HTTPConnection:
    """An http.client connection to the bot at `parts` (a split `APPROVALS_URL`)."""
    import http.client

    if parts.scheme == "https":
        return http.client.HTTPSConnection(parts.netloc, timeout=timeout)
    return http.client.HTTPConnection(parts.netloc, timeout=timeout)


def bot_timeout(budget: float) -> float:
    """The `timeout` to give the bot's hook endpoint so that it answers a little before this
    process's own `budget` runs out: the endpoint waits `time_budget(timeout)`, so this is its
    inverse, applied to the budget less a slack for the answer's way back (and a loaded
    machine's scheduling). Never below the endpoint's least, 1 s."""
    target = max(budget - min(1.0, max(0.2, budget * 0.2)), 0.05)
    wanted = target + MAX_MARGIN_SECONDS if target >= 4 * MAX_MARGIN_SECONDS else target / 0.8
    return max(wanted, MIN_HOOK_TIMEOUT_SECONDS)


#: The header in which the bot's hook endpoint names a problem (`bot.http.agent_hooks`).
PROBLEM_HEADER = "X-Approval-Problem"


def forward(
    url: str,
    token: str,
    dialect: str,
    body: HookBody,
    timeout: float,
    on_timeout: str,
    stderr: TextIO,
    started: float,
) -> dict[str, Any] | None:
    """A hook call through the bot's own hook endpoint (`POST /hooks/claude-code` or
    `/hooks/codex`, `bot.http.agent_hooks`): the bot reviews it exactly as Claude Code's `http`
    hook — submit, wait, withdraw on timeout, every failure a deny — and this process only
    passes the JSON on, with the hook's time left (counted from this process's spawn).
    Nothing here needs pydantic or asyncio. When the bot cannot be reached, answers other
    than 200 with a JSON object, or does not answer within the budget, the call is denied
    here (in `dialect`'s words)."""
    import http.client
    from urllib.parse import urlencode, urlsplit

    from approvals.errors import plain

    shape = body.shape
    elapsed = max(0.0, time.monotonic() - started)
    budget = max(time_budget(timeout) - elapsed, 0.05)  # answer before the agent gives up

    def refuse(reason: str) -> dict[str, Any]:
        return deny(shape, codex_reason(reason) if dialect == "codex" else reason)

    def report(line: str) -> None:
        say(stderr, f"approval-bot hook: {line}")

    if time_budget(timeout) - elapsed < MIN_ASK_SECONDS:
        # As `answer_hook`: too little left to ask anyone, so nothing is sent (the bot would
        # post a request for at least its least timeout, 1 s, that nobody waits on).
        report(
            f"no time left to ask a reviewer ({budget:.2f} s of the hook's budget); {on_timeout}"
        )
        why = "No time left to ask a reviewer (the hook's timeout was all but spent)"
        if on_timeout == "ask":
            if dialect != "claude-code" or shape != "PreToolUse":
                return None  # no decision: the agent's own approval flow takes over
            return {
                "hookSpecificOutput": {
                    "hookEventName": "PreToolUse",
                    "permissionDecision": "ask",
                    "permissionDecisionReason": f"{why}; please decide here.",
                }
            }
        return refuse(f"{why}; denied by default.")
    parts = urlsplit(url)
    query = urlencode({"timeout": f"{bot_timeout(budget):.3f}", "on_timeout": on_timeout})
    payload = json.dumps(body.payload).encode()  # ASCII: lone surrogates were replaced
    connection = http_connection(parts, budget)

    try:
        connection.request(
            "POST",
            f"{parts.path}/hooks/{dialect}?{query}",
            body=payload,
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        response = connection.getresponse()
        status, text = response.status, response.read()
        problem = response.getheader(PROBLEM_HEADER)
    except TimeoutError:
        # Rounded down: "within 4.0 s" after waiting 3.96 s would claim more than was waited.
        waited = f"{math.floor(budget * 10) / 10:.1f}"
        report(f"no answer from the approval bot at {url} within {waited} s; denied")
        return refuse(f"No approval decision within {waited} s; denied by default.")
    except (OSError, http.client.HTTPException) as e:
        where = f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"
        report(f"approval bot at {url} is unreachable: {plain(e, where)}; denied")
        return refuse(f"Approval service error: {UNREACHABLE_REASON}")
    finally:
        connection.close()
    try:
        output = json.loads(text) if status == 200 else None
    except ValueError:
        output = None
    if not isinstance(output, dict):
        report(f"the approval bot at {url} answered HTTP {status} without a decision; denied")
        return refuse(f"Approval service error: unexpected answer (HTTP {status})")
    if problem:
        report(problem)
    return output or None  # {}: an event the bot does not gate


async def _review(
    dialect: str,
    payload: dict[str, Any],
    timeout: float,  # noqa: ASYNC109 - the agent's hook timeout, a budget run_review keeps to
    on_timeout: str,
    stderr: TextIO,
    started: float,
    make_client: Callable[[], ApprovalClient],
) -> dict[str, Any] | None:
    from approvals.errors import AlreadyDecided
    from approvals.integrations.coding_agents import (
        answer_hook,
        failure_reason,
        for_dialect,
        hook_metadata,
        output_for_failure,
        time_budget,
    )
    from approvals.models import ApprovalConfig, ApprovalEvent, ApprovalRequest

    named = payload.get("hook_event_name")
    shape: Any = "PermissionRequest" if named == "PermissionRequest" else "PreToolUse"
    try:
        client = make_client()
    except Exception as e:
        reason = getattr(e, "message", None) or failure_reason(e)
        say(stderr, f"approval-bot hook: {reason}")
        return for_dialect(dialect, output_for_failure(shape, str(reason)))  # type: ignore[arg-type]
    try:
        metadata = hook_metadata(payload)
    except Exception:
        metadata = {}  # answer_hook denies input that does not validate
    # Counted from this process's spawn (`started`): the agent's clock for the hook's timeout.
    budget = time_budget(timeout) - max(0.0, time.monotonic() - started)
    end = time.monotonic() + budget
    deferring = on_timeout == "defer"

    async def submit(event: ApprovalEvent) -> ApprovalRequest:
        # Reviewers see the real deadline: when this hook stops waiting — so a request a failed
        # withdrawal leaves behind expires as the hook gives up — or with defer the route's
        # (the agent comes back for the answer later).
        left = max(end - time.monotonic(), 0.05)
        config = ApprovalConfig() if deferring else ApprovalConfig(deadline_seconds=left)
        return (await client.submit(event, config, metadata=metadata)).to_request()

    async def wait(request_id: str, limit: float) -> ApprovalRequest:
        return (await client.wait(request_id, limit)).to_request()

    async def cancel(request_id: str, reason: str) -> ApprovalRequest:
        try:
            cancelled = await client.cancel(request_id, reason=reason)
        except AlreadyDecided:
            cancelled = await client.get(request_id)
        return cancelled.to_request()

    async def cancel_call(call_id: str, reason: str) -> ApprovalRequest | None:
        found = await client.cancel_call(call_id, reason=reason)
        return None if found is None else found.to_request()

    def report(line: str) -> None:
        say(stderr, f"approval-bot hook: {line}")

    try:
        return await answer_hook(
            dialect,  # type: ignore[arg-type]
            payload,
            submit,
            wait,
            timeout=max(budget, 0.05),
            on_timeout=on_timeout,  # type: ignore[arg-type]
            cancel=cancel,
            cancel_call=cancel_call,
            report=report,
        )
    finally:
        try:
            await client.aclose()
        except Exception as e:
            log.warning("closing the client failed error=%s", type(e).__name__)
