"""The default `require_approval` handler: a y/N prompt on the terminal (no TTY → deny).

Internal to approval-bot (not a stable API); agents import from `approvals`.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import weakref
from collections.abc import Callable

from approvals.models import MAX_TEXT, Decision, GateRequest

NO_HANDLER_MESSAGE = (
    "no approval handler configured: pass handler= to require_approval or set "
    "APPROVALS_URL/REDIS_URL for ApprovalClient; refusing to auto-approve"
)


class TerminalApprover:
    """The default handler: y/N on the terminal, one prompt at a time; no TTY → deny.

    Prompts are serialised by a thread lock and, for async callers, a per-loop
    `asyncio.Lock` (the blocking read then runs in a worker thread).
    """

    def __init__(
        self,
        *,
        is_tty: Callable[[], bool] | None = None,
        input_fn: Callable[[str], str] | None = None,
    ) -> None:
        self._is_tty = is_tty or _stdin_is_tty
        self._input = input_fn or input
        self._lock = threading.Lock()
        self._async_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )

    def __call__(self, request: GateRequest) -> Decision:
        if not self._is_tty():
            return Decision.deny(NO_HANDLER_MESSAGE, via="default")
        return self._ask_locked(request)

    async def review_async(self, request: GateRequest) -> Decision:
        if not self._is_tty():
            return Decision.deny(NO_HANDLER_MESSAGE, via="default")
        loop = asyncio.get_running_loop()
        lock = self._async_locks.setdefault(loop, asyncio.Lock())
        async with lock:
            return await asyncio.to_thread(self._ask_locked, request)

    def _ask_locked(self, request: GateRequest) -> Decision:
        with self._lock:
            return self._ask(request)

    def _ask(self, request: GateRequest) -> Decision:
        config = request.config
        try:
            answer = self._input(f"{request.prompt} [y/N] ").strip().lower()
            if answer not in ("y", "yes"):
                return Decision.deny("declined at the terminal", via="terminal")
            if config.kind == "input":
                text = self._input("Input: ")[:MAX_TEXT]
                return Decision.approve(input=text, via="terminal")
            if config.kind == "choice":
                options = config.options or ()
                menu = "  ".join(f"{i}) {o}" for i, o in enumerate(options, 1))
                picked = self._input(f"Choose one of {menu}: ").strip()
                if picked.isdigit() and 1 <= int(picked) <= len(options):
                    picked = options[int(picked) - 1]
                if picked not in options:
                    return Decision.deny(f"no valid option chosen ({picked!r})", via="terminal")
                return Decision.approve(selection=picked, via="terminal")
        except EOFError:
            return Decision.deny("no answer at the terminal (end of input)", via="terminal")
        return Decision.approve(via="terminal")


def _stdin_is_tty() -> bool:
    return sys.stdin is not None and sys.stdin.isatty()


#: The handler used when `require_approval` is given none.
default_handler = TerminalApprover()
