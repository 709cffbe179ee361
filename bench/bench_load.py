"""Benchmark: one bot process under load — 2,000 concurrent creates, 2,000 clicks from 50
reviewers with the agents long-polling, 2,000 cancels (its targets).

    .venv/bin/python -m bench.bench_load --embedded [--requests 2000] [--reviewers 50]

Three processes: the bot is `approval-bot serve` (as bench_e2e --bot-process: the
Slack emulator at its network boundary, Slack pacing off); the agents run in a
spawned child process (their CPU is not the bot's); this process runs the
emulator and the reviewers and keeps the books. Stamps are `time.monotonic()`
(CLOCK_MONOTONIC: one clock for every process on the machine). See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import time
import uuid
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any
from urllib.parse import urlencode

import aiohttp

from approvals._internal.store.connection import connect
from approvals._internal.store.keys import Keys
from bench.bench_e2e import (
    API_TOKEN,
    SlackLedger,
    _serve,
    process_cpu_s,
)
from bench.common import (
    LeanHttp,
    add_redis_arguments,
    delete_prefix,
    machine,
    proc_status_kib,
    recv,
    run_against_redis,
    spawn,
    summarize_ms,
    table,
    verdict,
)
from bot.slack import action_ids as ids
from tests.support.e2e import CHANNEL, Reviewer, sign
from tests.support.slack_emulator import SlackEmulator

CREATE_P99_S = 1.0
RESUMED_P99_S = 1.0
CANCELS_S = 2.0
PHASE_TIMEOUT = 120.0


# -- the agents' process -------------------------------------------------------------------------


def agents_main(conn: Connection, base: str, run_id: str, client: str = "lean") -> None:
    """The child: creates, long-polls and cancels as told over `conn`, one command at a time."""
    asyncio.run(_Agents(conn, base, run_id, client).run())


class _Agents:
    def __init__(self, conn: Connection, base: str, run_id: str, client: str) -> None:
        self.conn = conn
        self.base = base
        host, _, port = base.removeprefix("http://").partition(":")
        self.host, self.port = host, int(port)
        self.lean = client == "lean"
        self.run_id = run_id
        self.auth = {"Authorization": f"Bearer {API_TOKEN}"}
        self.resumed: dict[str, tuple[float, str]] = {}
        self.changed = asyncio.Event()
        self.polls: set[asyncio.Task[None]] = set()
        self.errors: list[str] = []
        self.n = 0

    async def run(self) -> None:
        connector = aiohttp.TCPConnector(limit=0)
        timeout = aiohttp.ClientTimeout(total=None)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as self.http:
            while True:
                command = await asyncio.to_thread(self.conn.recv)
                op = command["op"]
                self.errors = []
                cpu = time.process_time()
                if op == "quit":
                    for task in self.polls:
                        task.cancel()
                    return
                if op == "create":
                    answer: Any = await self.create(command["n"])
                elif op == "cancel":
                    answer = await self.cancel(command["ids"])
                elif op == "resumed":
                    answer = await self.wait_resumed(command["ids"], command["within"])
                else:
                    answer = {"error": f"unknown op {op}"}
                answer["cpu_s"] = time.process_time() - cpu  # this process's, for the command
                self.conn.send(answer)

    def connection(self) -> LeanHttp | None:
        """A new connection of one agent (None: through aiohttp's pool, no limit)."""
        return LeanHttp(self.host, self.port, self.auth) if self.lean else None

    async def call(
        self, c: LeanHttp | None, method: str, path: str, body: Any = None
    ) -> tuple[int, Any]:
        if c is not None:
            return await c.request(method, path, body)
        async with self.http.request(
            method, self.base + path, json=body, headers=self.auth
        ) as resp:
            raw = await resp.read()
            return resp.status, json.loads(raw) if raw else None

    async def create(self, n: int) -> dict[str, Any]:
        async def one(k: int) -> list[Any]:
            body = {
                "tool_name": "deploy",
                "arguments": {"env": "prod", "version": f"2.0.{k}"},
                "agent": "load-agent",
                "call_id": f"{self.run_id}-{k}",
            }
            c = self.connection()
            sent = time.monotonic()
            try:
                status, got = await self.call(c, "POST", "/v1/approvals", body)
            except Exception as e:
                self.errors.append(f"create: {e!r}")
                return ["", sent, time.monotonic(), 0]
            answered = time.monotonic()
            request_id = str(got.get("id", "")) if status == 201 else ""
            if request_id:
                # Parked at once on the same connection, as a real agent does.
                task = asyncio.create_task(self.long_poll(c, request_id))
                self.polls.add(task)
                task.add_done_callback(self.polls.discard)
            else:
                self.errors.append(f"create answered {status}: {str(got)[:200]}")
            return [request_id, sent, answered, status]

        first = self.n
        self.n += n
        rows = await asyncio.gather(*(one(k) for k in range(first, first + n)))
        return {"rows": rows, "errors": self.errors[-5:]}

    async def long_poll(self, c: LeanHttp | None, request_id: str) -> None:
        path = f"/v1/approvals/{request_id}?wait=60"
        try:
            while True:
                try:
                    status, got = await self.call(c, "GET", path)
                except Exception as e:
                    self.errors.append(f"long-poll: {e!r}")
                    await asyncio.sleep(0.5)
                    continue
                if status != 200:
                    self.errors.append(f"long-poll answered {status}")
                    await asyncio.sleep(0.5)
                    continue
                if got["status"] != "pending":
                    self.resumed[request_id] = (time.monotonic(), str(got["status"]))
                    self.changed.set()
                    return
        finally:
            if c is not None:
                c.close()

    async def cancel(self, request_ids: Sequence[str]) -> dict[str, Any]:
        async def one(request_id: str) -> list[Any]:
            c = self.connection()  # its long-poll holds the agent's first connection
            sent = time.monotonic()
            try:
                status, _ = await self.call(
                    c, "POST", f"/v1/approvals/{request_id}/cancel", {"reason": "load test"}
                )
            except Exception as e:
                self.errors.append(f"cancel: {e!r}")
                status = 0
            finally:
                if c is not None:
                    c.close()
            return [request_id, sent, time.monotonic(), status]

        rows = await asyncio.gather(*(one(r) for r in request_ids))
        return {"rows": rows, "errors": self.errors[-5:]}

    async def wait_resumed(self, request_ids: Sequence[str], within: float) -> dict[str, Any]:
        end = time.monotonic() + within
        while not all(r in self.resumed for r in request_ids) and time.monotonic() < end:
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), max(0.0, end - time.monotonic()))
        rows = {r: self.resumed[r] for r in request_ids if r in self.resumed}
        return {"rows": rows, "errors": self.errors[-5:]}


# -- this process: the emulator, the reviewers, the books -----------------------------------------


class Agents:
    """This side of the pipe to the agents' process."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    async def ask(self, command: dict[str, Any], within: float = PHASE_TIMEOUT) -> Any:
        self.conn.send(command)
        return await recv(self.conn, within)


async def wait_posted(ledger: SlackLedger, request_ids: Sequence[str]) -> float:
    """Until every request's post reached the emulator; the last post's arrival time."""
    posts = [ledger.track(r).posted for r in request_ids]
    done = await asyncio.wait_for(asyncio.gather(*posts), PHASE_TIMEOUT)
    return max(call.at for call in done)


async def click_all(
    ledger: SlackLedger, base: str, slack: SlackEmulator, request_ids: Sequence[str], n: int
) -> tuple[dict[str, float], list[float], list[str]]:
    """`n` reviewers approve every request, each one click after another; returns when each
    click was sent, each click's HTTP round trip, and errors."""
    queue: asyncio.Queue[str] = asyncio.Queue()
    for r in request_ids:
        queue.put_nowait(r)
    sent: dict[str, float] = {}
    acks: list[float] = []
    errors: list[str] = []

    async def reviewer(k: int, http: aiohttp.ClientSession) -> None:
        who = Reviewer(f"U0LOAD{k:04d}", slack, http)
        while not queue.empty():
            request_id = queue.get_nowait()
            post = ledger.track(request_id).posted.result()
            assert post.response is not None
            payload = who.click_payload(
                post.response["message"], str(post.response["channel"]), ids.APPROVE
            )
            form = urlencode({"payload": json.dumps(payload)})
            headers = sign(form)
            sent[request_id] = time.monotonic()
            try:
                async with http.post(f"{base}/slack/events", data=form, headers=headers) as resp:
                    await resp.read()
                    if resp.status != 200:
                        errors.append(f"click answered {resp.status}")
            except Exception as e:
                errors.append(f"click: {e!r}")
            acks.append(time.monotonic() - sent[request_id])

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as http:
        await asyncio.gather(*(reviewer(k, http) for k in range(n)))
    return sent, acks, errors


def phase_file(out: str, k: int) -> str:
    """The file `bench/profiled_serve.py` writes for its k-th profiled phase."""
    if k == 1:
        return out
    if out.endswith(".pstats"):
        return f"{out.removesuffix('.pstats')}.{k}.pstats"
    return f"{out}.{k}"


def wait_written(path: str, since: float, within: float = 10.0) -> None:
    """Until `path` was written at or after `since` (epoch s), at most `within` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        with contextlib.suppress(FileNotFoundError):
            if os.stat(path).st_mtime >= since:
                return
        time.sleep(0.01)
    print(f"# the bot did not write its profile {path} within {within:g} s", flush=True)


async def bot_connections(admin: Any) -> int:
    """The bot's store connections to Redis: CLIENT LIST entries named `approval-bot:…` (its
    Waiter's are `approval-bot-waiter:…`). Read between phases, never inside a timed one."""
    return sum(
        1 for c in await admin.client_list() if str(c.get("name", "")).startswith("approval-bot:")
    )


def _rss_mib(pid: int) -> float:
    """VmRSS of process `pid`, MiB."""
    return round(proc_status_kib("VmRSS", pid) / 1024, 1)


def _wall(rows: Sequence[Sequence[Any]]) -> float:
    return max(r[2] for r in rows) - min(r[1] for r in rows) if rows else 0.0


async def main_async(args: argparse.Namespace, url: str) -> dict[str, Any]:
    run_id = uuid.uuid4().hex[:10]
    keys = Keys(f"bench-{run_id}")
    admin = connect(url, max_connections=2, client_name=f"bench-load-{run_id}")
    n = args.requests
    result: dict[str, Any] = {"bench": "load", **machine(), "requests": n}
    try:
        async with SlackEmulator(channels={CHANNEL}) as slack:
            proc, port = await _serve(url, keys, run_id, slack, args.bot_exe, args.bot_cprofile)
            base = f"http://127.0.0.1:{port}"
            ledger = SlackLedger(slack)
            ledger.start()
            child, conn = spawn(agents_main, base, run_id, args.agents_client)
            agents = Agents(conn)
            cpu: dict[str, float] = {}

            written = 0

            def bot_cpu(profile: int = 0) -> float:
                """The bot's CPU seconds so far; profiling on (1) or off (-1) with
                --bot-cprofile (phases: OUT create, OUT.2 post, OUT.3 click, OUT.4 cancel)."""
                nonlocal written
                if profile and args.bot_cprofile:
                    sent = time.time()
                    proc.send_signal(signal.SIGUSR1 if profile > 0 else signal.SIGUSR2)
                    if profile < 0:
                        # Wait for the phase's file before the next phase's SIGUSR1: Python
                        # runs pending handlers in signal-number order, so a SIGUSR1 sent
                        # right after would run first and the phase would come out empty.
                        written += 1
                        wait_written(phase_file(args.bot_cprofile, written), sent)
                return sum(process_cpu_s(proc.pid))

            try:
                # warm-up: a few cycles through every path
                warm = await agents.ask({"op": "create", "n": 20})
                warm_ids = [r[0] for r in warm["rows"] if r[0]]
                await wait_posted(ledger, warm_ids)
                await click_all(ledger, base, slack, warm_ids, 5)
                await agents.ask({"op": "resumed", "ids": warm_ids, "within": 30})

                conns = {"before creates": await bot_connections(admin)}
                rss = {"before creates": _rss_mib(proc.pid)}
                print(f"# {n:,} concurrent creates", flush=True)
                began = bot_cpu(1)
                created = await agents.ask({"op": "create", "n": n})
                cpu["create"] = bot_cpu(-1) - began
                rows = created["rows"]
                request_ids = [r[0] for r in rows if r[0]]
                create_lat = [r[2] - r[1] for r in rows]
                first_sent = min(r[1] for r in rows)
                began = bot_cpu(1)
                last_post = await wait_posted(ledger, request_ids)
                cpu["post"] = bot_cpu(-1) - began
                conns["after creates"] = await bot_connections(admin)
                rss["after creates"] = _rss_mib(proc.pid)
                result["create"] = {
                    "created": len(request_ids),
                    "errors": created["errors"],
                    "response": summarize_ms(create_lat),
                    "wall_s": round(_wall(rows), 3),
                    "all_posted_s": round(last_post - first_sent, 3),
                }

                print(f"# {n:,} clicks from {args.reviewers} reviewers", flush=True)
                began = bot_cpu(1)
                sent, acks, click_errors = await click_all(
                    ledger, base, slack, request_ids, args.reviewers
                )
                resumed = await agents.ask({"op": "resumed", "ids": request_ids, "within": 60})
                cpu["click"] = bot_cpu(-1) - began
                got = resumed["rows"]
                to_resumed = [got[r][0] - sent[r] for r in request_ids if r in got]
                result["click"] = {
                    "clicks": len(sent),
                    "resumed": len(got),
                    "approved": sum(1 for r in got.values() if r[1] == "approved"),
                    "errors": click_errors[:5] + resumed["errors"],
                    "click_to_resumed": summarize_ms(to_resumed),
                    "click_response": summarize_ms(acks),
                    "wall_s": round(max(v[0] for v in got.values()) - min(sent.values()), 3)
                    if got
                    else None,
                }

                print(f"# {n:,} more creates, then {n:,} cancels", flush=True)
                more = await agents.ask({"op": "create", "n": n})
                more_ids = [r[0] for r in more["rows"] if r[0]]
                await wait_posted(ledger, more_ids)
                await asyncio.sleep(0.5)  # every long-poll parked again
                began = bot_cpu(1)
                cancelled = await agents.ask({"op": "cancel", "ids": more_ids})
                cpu["cancel"] = bot_cpu(-1) - began
                crows = cancelled["rows"]
                conns["after cancels"] = await bot_connections(admin)
                woken = await agents.ask({"op": "resumed", "ids": more_ids, "within": 60})
                first = min(r[1] for r in crows)
                wrows = woken["rows"]
                result["cancel"] = {
                    "cancelled": sum(1 for r in crows if r[3] == 200),
                    "errors": cancelled["errors"],
                    "wall_s": round(_wall(crows), 3),
                    "response": summarize_ms([r[2] - r[1] for r in crows]),
                    "agents_resumed": sum(1 for v in wrows.values() if v[1] == "cancelled"),
                    "all_agents_resumed_s": round(max(v[0] for v in wrows.values()) - first, 3)
                    if wrows
                    else None,
                    "second_create_response": summarize_ms([r[2] - r[1] for r in more["rows"]]),
                }
                # The load generator's own CPU: when it is near the bot's, the client shares
                # the blame for the response times (two cores, four busy processes).
                result["agents_cpu_ms_per_op"] = {
                    "create + park the long-poll": round(1000 * created["cpu_s"] / n, 3),
                    "cancel": round(1000 * cancelled["cpu_s"] / n, 3),
                }
                result["bot_cpu_ms_per_op"] = {
                    "create (HTTP)": round(1000 * cpu["create"] / n, 3),
                    "post (dispatcher, after the creates)": round(1000 * cpu["post"] / n, 3),
                    "click → resumed → update": round(1000 * cpu["click"] / n, 3),
                    "cancel (HTTP)": round(1000 * cpu["cancel"] / n, 3),
                }
                result["bot_redis_connections"] = conns
                result["bot_rss_mib"] = rss
                conn.send({"op": "quit"})
            finally:
                child.join(10)
                if child.is_alive():
                    child.kill()
                await ledger.stop()
                proc.terminate()
                with contextlib.suppress(Exception):
                    proc.wait(timeout=15)
        await delete_prefix(admin, keys)
    finally:
        await admin.aclose()
    return result


def checks(r: dict[str, Any]) -> dict[str, str]:
    n = r["requests"]
    c, k, x = r["create"], r["click"], r["cancel"]
    return {
        "creates": verdict(
            c["created"] == n and (c["response"]["p99_ms"] or 1e9) <= 1000 * CREATE_P99_S
        ),
        "clicks": verdict(
            k["approved"] == n and (k["click_to_resumed"]["p99_ms"] or 1e9) <= 1000 * RESUMED_P99_S
        ),
        "cancels": verdict(x["cancelled"] == n and x["wall_s"] <= CANCELS_S),
    }


def print_report(r: dict[str, Any]) -> None:
    n = r["requests"]
    print(
        f"\napproval-bot load benchmark · Python {r['python']} · {r['cpus']} CPUs · "
        f"load {r['loadavg_1m']}\nThe bot is `approval-bot serve` in its own process (Slack "
        "pacing off); the agents run in another process, the Slack emulator and the reviewers "
        "in this one."
    )
    c, k, x, ch = r["create"], r["click"], r["cancel"], r["checks"]
    rows = [
        [
            f"{n:,} concurrent creates: response",
            c["response"]["p50_ms"],
            c["response"]["p99_ms"],
            c["response"]["max_ms"],
            f"p99 ≤ {CREATE_P99_S * 1000:g} ms  {ch['creates']}",
        ],
        [
            f"{n:,} clicks, {r['reviewers']} reviewers: click → agent resumed",
            k["click_to_resumed"]["p50_ms"],
            k["click_to_resumed"]["p99_ms"],
            k["click_to_resumed"]["max_ms"],
            f"p99 ≤ {RESUMED_P99_S * 1000:g} ms  {ch['clicks']}",
        ],
        [
            "  click HTTP response",
            k["click_response"]["p50_ms"],
            k["click_response"]["p99_ms"],
            k["click_response"]["max_ms"],
            "",
        ],
        [
            f"{n:,} cancels: response",
            x["response"]["p50_ms"],
            x["response"]["p99_ms"],
            x["response"]["max_ms"],
            f"all within {CANCELS_S:g} s: {x['wall_s']} s  {ch['cancels']}",
        ],
    ]
    print("\nlatency, ms")
    print(table(["scenario", "p50", "p99", "max", "target"], rows))
    print(
        f"  creates: {c['created']:,} created in {c['wall_s']} s; all posted "
        f"{c['all_posted_s']} s after the first was sent"
    )
    print(
        f"  clicks: {k['approved']:,}/{n:,} agents resumed approved; last "
        f"{k['wall_s']} s after the first click"
    )
    print(
        f"  cancels: {x['cancelled']:,} answered 200 in {x['wall_s']} s; "
        f"{x['agents_resumed']:,} agents resumed cancelled, the last "
        f"{x['all_agents_resumed_s']} s after the first cancel"
    )
    print(
        "  bot CPU ms per operation: "
        + ", ".join(f"{k} {v}" for k, v in r["bot_cpu_ms_per_op"].items())
    )
    print(
        "  agents' CPU ms per operation: "
        + ", ".join(f"{k} {v}" for k, v in r["agents_cpu_ms_per_op"].items())
    )
    print(
        "  the bot's Redis connections (store pool): "
        + ", ".join(f"{k} {v}" for k, v in r["bot_redis_connections"].items())
    )
    for phase in ("create", "click", "cancel"):
        for e in r[phase]["errors"]:
            print(f"  {phase} error: {e}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="One bot process under load (its targets).")
    p.add_argument("--requests", type=int, default=2000, help="creates, clicks and cancels (2000)")
    p.add_argument("--reviewers", type=int, default=50, help="reviewers clicking (default 50)")
    p.add_argument("--bot-exe", help="the approval-bot executable (default: this venv's)")
    p.add_argument(
        "--bot-cprofile",
        help="profile the bot's CPU per phase (bench/profiled_serve.py): FILE (creates), "
        "FILE.2 (posts), FILE.3 (clicks), FILE.4 (cancels)",
    )
    p.add_argument(
        "--agents-client",
        choices=("lean", "aiohttp"),
        default="lean",
        help="the agents' HTTP client: lean (bench.common.LeanHttp, default) or aiohttp's",
    )
    add_redis_arguments(p)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    result = run_against_redis(args, main_async)
    result["reviewers"] = args.reviewers
    result["checks"] = checks(result)
    print_report(result)
    print(json.dumps(result, separators=(",", ":")))


if __name__ == "__main__":
    main()
