"""Idle connections against a bot with a low file limit: are hooks still answered?

    .venv/bin/python -m bench.bench_idle [--connections 1000] [--nofile 256] [--calls 50]
    .venv/bin/python -m bench.bench_idle --cwd /tmp/old-checkout     # another checkout's bot

`approval-bot serve` runs in its own process on loopback with `RLIMIT_NOFILE` set to
`--nofile` (as under `ulimit -n 256`), on a throwaway Redis (or `--redis-url`), with no
Slack and a policy that allows `Bash` (a hook call is answered at once: what is measured is
whether the bot takes the connection, not how fast a reviewer is). Then:

1. *quiet*: `--calls` hook calls (`POST /hooks/claude-code`, each on a new connection, as
   `approval-bot hook` makes them), one after the other;
2. *held*: `--connections` idle connections are opened (TCP only: they send nothing, hold
   no token; the kernel queues those the bot does not accept), then the same calls;
3. *reopened*: the same idle connections, each opened again `--reopen-after` seconds (0.1)
   after the bot closes it (an attacker who keeps them coming), and the same calls.

The idle connections are held by a process of their own, the calls made from this one (as
an agent's hook is a process of its own). For each phase: how many calls were answered
(HTTP 200 with the hook's JSON), how many failed and how (connection reset, no answer
within `--call-timeout`), p50 / p99 / max of the answered ones, and the bot's open files.
Loopback only; bounded in count and time (each phase at most `--calls` x `--call-timeout`).
One JSON line at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from bench.common import free_port, machine, recv, redis_server, spawn, summarize_ms, table

REPO = Path(__file__).resolve().parents[1]
TOKEN = "bench-idle-token"
POLICY = """\
routes:
  default:
    channel: C0APPROVALS
rules:
  - name: bash-is-fine
    match: {tool: Bash}
    action: allow
"""
HOOK_EVENT = {
    "hook_event_name": "PreToolUse",
    "session_id": "8b0e3c4f-2a6d-4f1e-9c7b-5d3a1e0f6b92",
    "transcript_path": "/home/dev/.claude/projects/-home-dev-app/8b0e3c4f.jsonl",
    "cwd": "/home/dev/app",
    "permission_mode": "default",
    "tool_name": "Bash",
    "tool_input": {"command": "ls -la", "description": "List files"},
    "tool_use_id": "toolu_01BenchIdle",
}


def hook_request(port: int, n: int) -> bytes:
    event = dict(HOOK_EVENT, tool_use_id=f"toolu_01BenchIdle{n:06d}")
    body = json.dumps(event).encode()
    head = (
        f"POST /hooks/claude-code?timeout=30 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


async def hook_call(port: int, n: int, within: float) -> tuple[str, float]:
    """One hook call on a new connection: ('answered', seconds) or (why it failed, seconds)."""
    started = time.perf_counter()
    writer = None
    try:
        async with asyncio.timeout(within):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(hook_request(port, n))
            await writer.drain()
            answer = await reader.read()
    except TimeoutError:
        return "no answer in time", time.perf_counter() - started
    except ConnectionResetError:
        return "connection reset", time.perf_counter() - started
    except OSError as e:
        return f"connect failed ({e.strerror or type(e).__name__})", time.perf_counter() - started
    finally:
        if writer is not None:
            writer.close()
    elapsed = time.perf_counter() - started
    if not answer:
        return "closed without an answer", elapsed
    head, _, body = answer.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        return f"answered {head.split(b' ', 2)[1].decode(errors='replace')}", elapsed
    try:
        decision = json.loads(body)["hookSpecificOutput"]["permissionDecision"]
    except (ValueError, KeyError, TypeError):
        return "answered 200 without a decision", elapsed
    return ("answered" if decision == "allow" else f"answered {decision}"), elapsed


class Idle:
    """`count` idle TCP connections to the bot; with `reopen`, each is opened again
    `reopen_after` seconds after the bot closes it."""

    def __init__(self, port: int, count: int, reopen_after: float) -> None:
        self.port, self.count, self.reopen_after = port, count, reopen_after
        self.reopen = asyncio.Event()
        self.opened = 0
        self.closed_by_bot = 0
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        ready = [asyncio.Event() for _ in range(self.count)]
        self._tasks = [asyncio.create_task(self._hold(e)) for e in ready]
        async with asyncio.timeout(60):
            await asyncio.gather(*(e.wait() for e in ready))

    async def _hold(self, ready: asyncio.Event) -> None:
        while True:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                ready.set()
                await asyncio.sleep(0.05)
                continue
            self.opened += 1
            ready.set()
            try:
                await reader.read()  # b'' once the bot closes it
                self.closed_by_bot += 1
            except OSError:
                self.closed_by_bot += 1
            finally:
                writer.close()
            await self.reopen.wait()
            await asyncio.sleep(self.reopen_after)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def attacker(conn: Connection, port: int, count: int, reopen_after: float) -> None:
    """The idle connections, in a process of their own (the agent making hook calls is
    another process: its event loop does not wait behind the attacker's). Commands on `conn`:
    'reopen', 'stop' (answered with the counts)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, count + 256)), hard))

    async def run() -> None:
        idle = Idle(port, count, reopen_after)
        await idle.start()
        conn.send("held")
        loop = asyncio.get_running_loop()
        while True:
            command = await loop.run_in_executor(None, conn.recv)
            if command == "reopen":
                idle.reopen.set()
                conn.send("reopening")
            else:
                await idle.stop()
                conn.send({"opened": idle.opened, "closed_by_bot": idle.closed_by_bot})
                return

    asyncio.run(run())


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def phase(name: str, port: int, pid: int, calls: int, within: float) -> dict[str, Any]:
    outcomes: Counter[str] = Counter()
    answered: list[float] = []
    started = time.perf_counter()
    for n in range(calls):
        outcome, seconds = await hook_call(port, n, within)
        outcomes[outcome] += 1
        if outcome == "answered":
            answered.append(seconds)
    return {
        "phase": name,
        "answered": len(answered),
        "calls": calls,
        "failures": {k: v for k, v in outcomes.items() if k != "answered"},
        "latency": summarize_ms(answered),
        "bot_open_files": open_files(pid),
        "seconds": round(time.perf_counter() - started, 1),
    }


async def wait_listening(proc: subprocess.Popen[bytes], port: int) -> None:
    for _ in range(300):
        if proc.poll() is not None:
            raise RuntimeError(f"approval-bot serve exited with {proc.returncode}")
        outcome, _ = await hook_call(port, 0, 2.0)
        if outcome == "answered":
            return
        await asyncio.sleep(0.1)
    raise RuntimeError("approval-bot serve did not answer a hook call within 30 s")


async def main_async(args: argparse.Namespace, url: str) -> dict[str, Any]:
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="bench-idle-") as tmp:
        policy = Path(tmp) / "policy.yaml"
        policy.write_text(POLICY)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "APPROVALS_"))}
        env.update(
            REDIS_URL=url,
            APPROVALS_PREFIX=f"bench-idle-{os.getpid()}",
            PORT=str(port),
            APPROVALS_API_TOKENS=TOKEN,
            APPROVALS_POLICY_FILE=str(policy),
            APPROVALS_DATA_DIR=tmp,
            LOG_LEVEL="ERROR",
        )
        nofile = args.nofile

        def low_limit() -> None:  # in the child, before exec: as `ulimit -n`
            hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, hard))

        proc = subprocess.Popen(  # noqa: ASYNC220
            [sys.executable, "-m", "bot.cli.main", "serve"],
            env=env,
            cwd=args.cwd or str(REPO),
            preexec_fn=low_limit,
            stderr=subprocess.DEVNULL if args.quiet_bot else None,
        )
        counts: dict[str, int] = {}
        child = None
        try:
            await wait_listening(proc, port)
            phases = [await phase("quiet", port, proc.pid, args.calls, args.call_timeout)]
            child, commands = spawn(attacker, port, args.connections, args.reopen_after)
            assert await recv(commands, 90) == "held"
            await asyncio.sleep(1.0)  # let the bot take what it takes
            phases.append(await phase("held", port, proc.pid, args.calls, args.call_timeout))
            commands.send("reopen")
            assert await recv(commands, 30) == "reopening"
            await asyncio.sleep(1.0)
            phases.append(await phase("reopened", port, proc.pid, args.calls, args.call_timeout))
            commands.send("stop")
            counts = await recv(commands, 60)
        finally:
            if child is not None:
                child.terminate()
                child.join(10)
            proc.terminate()
            try:
                await asyncio.to_thread(proc.wait, 20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return {
        "bench": "idle",
        "machine": machine(),
        "bot": args.cwd or str(REPO),
        "nofile": args.nofile,
        "idle_connections": args.connections,
        "reopen_after": args.reopen_after,
        "idle_opened": counts.get("opened"),
        "idle_closed_by_bot": counts.get("closed_by_bot"),
        "phases": phases,
    }


def print_report(result: dict[str, Any]) -> None:
    print(
        f"# approval-bot serve with RLIMIT_NOFILE {result['nofile']}, "
        f"{result['idle_connections']} idle connections ({result['bot']})"
    )
    rows = []
    for p in result["phases"]:
        lat = p["latency"]
        failures = ", ".join(f"{k}: {v}" for k, v in p["failures"].items()) or "-"
        rows.append(
            [
                p["phase"],
                f"{p['answered']}/{p['calls']}",
                lat["p50_ms"],
                lat["p99_ms"],
                lat["max_ms"],
                p["bot_open_files"],
                failures,
            ]
        )
    print(table(["phase", "answered", "p50 ms", "p99 ms", "max ms", "bot fds", "failed"], rows))
    print(
        f"idle connections opened {result['idle_opened'] or 0:,}, "
        f"closed by the bot {result['idle_closed_by_bot'] or 0:,}"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--connections", type=int, default=1000, help="idle connections (1000)")
    p.add_argument("--nofile", type=int, default=256, help="the bot's RLIMIT_NOFILE (256)")
    p.add_argument("--calls", type=int, default=50, help="hook calls per phase (50)")
    p.add_argument("--call-timeout", type=float, default=5.0, help="seconds per call (5)")
    p.add_argument(
        "--reopen-after",
        type=float,
        default=0.1,
        help="reopened phase: seconds before an idle connection the bot closed is opened again",
    )
    p.add_argument("--cwd", help="run the bot of another checkout (its directory)")
    p.add_argument("--redis-url", help="Redis to use (default: a throwaway server)")
    p.add_argument("--quiet-bot", action="store_true", help="drop the bot's stderr")
    args = p.parse_args(argv)
    if not 0 < args.connections <= 5000 or not 0 < args.calls <= 500:
        p.error("--connections is 1 to 5000, --calls 1 to 500")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, args.connections + args.calls + 256))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    if want < args.connections + 64:
        raise SystemExit(f"RLIMIT_NOFILE hard limit {hard} is too low for {args.connections}")
    with redis_server(args.redis_url, embedded=args.redis_url is None) as url:
        result = asyncio.run(main_async(args, url))
    print_report(result)
    print(json.dumps(result, separators=(",", ":")))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
