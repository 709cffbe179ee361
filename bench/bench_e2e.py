"""Benchmark: the whole loop through one real bot process — create → posted, click → agent
resumed, and complete cycles per second.

    .venv/bin/python -m bench.bench_e2e [--requests 500] [--concurrency 50] [--redis-url URL]

The real `Bot` (aiohttp + slack-bolt with request signing, real Redis) runs in
this process with the Slack emulator at its network boundary; agents call the
HTTP API with a bearer token and long-poll, a reviewer sends signed Approve
clicks. Slack pacing is off for the measurement. Bot, emulator, agents and
reviewer share one event loop, so CPU is shared and the figures are
conservative. Prints tables, then one JSON line. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
from redis.asyncio import Redis

from approvals._internal.store.connection import (
    DEFAULT_MAX_CONNECTIONS,
    cancel_and_wait,
    connect,
)
from approvals._internal.store.keys import Keys
from bench.common import (
    add_redis_arguments,
    count_clients,
    delete_prefix,
    free_port,
    machine,
    rss_kib,
    run_against_redis,
    serve_env,
    server_name,
    summarize_ms,
    table,
    verdict,
    wait_healthz,
)
from bot.core.app import Bot, BotConfig
from bot.ops.metrics import Metrics
from bot.slack import action_ids as ids
from bot.slack.delivery.dispatcher import DispatcherOptions
from tests.support.e2e import CHANNEL, SIGNING_SECRET, Reviewer, sign
from tests.support.slack_emulator import Call, SlackEmulator

#: The bot under a profiler (`--bot-cprofile`), run as a script by the bot's interpreter.
PROFILED_SERVE = str(Path(__file__).resolve().parent / "profiled_serve.py")
API_TOKEN = "bench-token"
REVIEWER = "U0BENCHREVIEWER"
ACK_LIMIT_MS = 3000.0  # Slack shows the user an error when an interaction is not acked by then
STEP_TIMEOUT = 20.0  # seconds any one step of a cycle may take before the cycle fails


# -- what reached Slack, per request ---------------------------------------------------------


@dataclass
class Track:
    """One request's calls at the emulator: its post, its updates."""

    posted: asyncio.Future[Call]
    updated: asyncio.Future[Call]
    posts: list[float] = field(default_factory=list)  # Call.at of each chat.postMessage
    updates: list[float] = field(default_factory=list)  # Call.at of each chat.update


class SlackLedger:
    """Follows the emulator's recorded calls and files each under its request id.

    A post is recognised by the request id in its buttons' `value`; an update by
    the (channel, ts) the post got back. Arrival times are the emulator's own
    `Call.at` (time.monotonic() when the request reached it).
    """

    def __init__(self, slack: SlackEmulator) -> None:
        self.slack = slack
        self.tracks: dict[str, Track] = {}
        self.by_message: dict[tuple[str, str], str] = {}
        self.other: Counter[str] = Counter()  # calls that are not a post or an update
        self.not_ok: Counter[str] = Counter()
        self.unmatched: Counter[str] = Counter()
        self._offset = 0
        self._task: asyncio.Task[None] | None = None

    def track(self, request_id: str) -> Track:
        t = self.tracks.get(request_id)
        if t is None:
            loop = asyncio.get_running_loop()
            t = self.tracks[request_id] = Track(loop.create_future(), loop.create_future())
        return t

    def start(self) -> None:
        self._task = asyncio.create_task(self._follow(), name="bench-slack-ledger")

    async def stop(self) -> None:
        if self._task is not None:
            # Cancelled until it ends: Python 3.11's wait_for (in the emulator's wait_until)
            # can lose a cancellation, and one lost here hung bench_load at its end.
            await cancel_and_wait([self._task])
        self.catch_up()

    async def _follow(self) -> None:
        while True:
            await self.slack.wait_until(lambda: len(self.slack.calls) > self._offset, 3600)
            self.catch_up()

    def catch_up(self) -> None:
        calls = self.slack.calls
        while self._offset < len(calls):
            call = calls[self._offset]
            self._offset += 1
            if not call.ok:
                self.not_ok[call.method] += 1
            if call.method == "chat.postMessage":
                self._post(call)
            elif call.method == "chat.update":
                self._update(call)
            else:
                self.other[call.method] += 1

    def _post(self, call: Call) -> None:
        request_id = _request_id(call.body)
        if request_id is None or not call.ok or call.response is None:
            self.unmatched[call.method] += 1
            return
        self.by_message[(str(call.response["channel"]), str(call.response["ts"]))] = request_id
        t = self.track(request_id)
        t.posts.append(call.at)
        if not t.posted.done():
            t.posted.set_result(call)

    def _update(self, call: Call) -> None:
        request_id = self.by_message.get((str(call.body.get("channel")), str(call.body.get("ts"))))
        if request_id is None:
            self.unmatched[call.method] += 1
            return
        t = self.track(request_id)
        t.updates.append(call.at)
        if not t.updated.done():
            t.updated.set_result(call)


def _request_id(body: dict[str, Any]) -> str | None:
    """The request id a posted message carries in its buttons' `value`."""
    blocks = body.get("blocks")
    if isinstance(blocks, str):
        with contextlib.suppress(ValueError):
            blocks = json.loads(blocks)
    for block in blocks if isinstance(blocks, list) else []:
        if block.get("type") != "actions":
            continue
        for element in block.get("elements", []):
            if element.get("action_id") in ids.BUTTON_ACTIONS and element.get("value"):
                return str(element["value"])
    return None


def counters(metrics: Metrics) -> dict[str, float]:
    """The bot's counters that moved (one-process mode): `name{label="…"}` → value."""
    out: dict[str, float] = {}
    for family in metrics.registry.collect():
        for sample in family.samples:
            if sample.name.endswith("_total") and sample.value:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                out[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return out


# -- one cycle: agent creates and long-polls, reviewer clicks Approve ------------------------------


@dataclass
class Cycle:
    """Stamps of one cycle, all time.monotonic()."""

    request_id: str = ""
    create_sent: float = 0.0
    create_answered: float = 0.0
    posted: float = 0.0  # chat.postMessage arrived at the emulator
    click_sent: float = 0.0
    click_answered: float = 0.0
    resumed: float = 0.0  # the agent's long-poll returned the approved object
    updated: float = 0.0  # chat.update arrived at the emulator
    polls: int = 0
    waiting_at_click: int = 0  # the bot Waiter's count of waiting callers when the click went


@dataclass
class Rig:
    """The running bot, the emulator, the HTTP sessions and the ledger."""

    bot: Bot | None  # None with --bot-process: the bot is `approval-bot serve` in `process`
    slack: SlackEmulator
    ledger: SlackLedger
    agents: aiohttp.ClientSession
    reviewer: Reviewer
    base: str
    run_id: str
    cycles: int = 0
    errors: list[str] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None
    consumer: str = ""


async def cycle(rig: Rig, n: int) -> Cycle:
    c = Cycle()
    auth = {"Authorization": f"Bearer {API_TOKEN}"}
    body = {
        "tool_name": "deploy",
        "arguments": {"env": "prod", "version": f"1.2.{n}"},
        "agent": "bench-agent",
        "call_id": f"{rig.run_id}-{n}",
    }
    c.create_sent = time.monotonic()
    async with rig.agents.post(f"{rig.base}/v1/approvals", json=body, headers=auth) as resp:
        created = await resp.json()
        if resp.status != 201:
            raise RuntimeError(f"create answered {resp.status}: {created}")
    c.create_answered = time.monotonic()
    c.request_id = str(created["id"])
    track = rig.ledger.track(c.request_id)

    async def long_poll() -> dict[str, Any]:
        url = f"{rig.base}/v1/approvals/{c.request_id}?wait=30"
        while True:
            c.polls += 1
            async with rig.agents.get(url, headers=auth) as resp:
                got: dict[str, Any] = await resp.json()
                if resp.status != 200:
                    raise RuntimeError(f"long-poll answered {resp.status}: {got}")
            if got["status"] != "pending":
                c.resumed = time.monotonic()
                return got

    polling = asyncio.create_task(long_poll())
    try:
        post = await asyncio.wait_for(asyncio.shield(track.posted), STEP_TIMEOUT)
        c.posted = post.at
        assert post.response is not None
        message, channel = post.response["message"], str(post.response["channel"])
        payload = rig.reviewer.click_payload(message, channel, ids.APPROVE)
        form = urlencode({"payload": json.dumps(payload)})
        headers = sign(form)
        c.waiting_at_click = rig.bot.ctx.waiter.waiting if rig.bot and rig.bot.ctx else 0
        c.click_sent = time.monotonic()
        async with rig.reviewer.session.post(
            f"{rig.base}/slack/events", data=form, headers=headers
        ) as resp:
            await resp.read()
            if resp.status != 200:
                raise RuntimeError(f"click answered {resp.status}")
        c.click_answered = time.monotonic()
        decided = await asyncio.wait_for(polling, STEP_TIMEOUT)
        if decided["status"] != "approved" or decided["id"] != c.request_id:
            raise RuntimeError(f"agent resumed with {decided['status']} for {decided['id']}")
        update = await asyncio.wait_for(asyncio.shield(track.updated), STEP_TIMEOUT)
        c.updated = update.at
    finally:
        if not polling.done():
            polling.cancel()
    return c


async def run_cycles(rig: Rig, count: int, concurrency: int) -> tuple[list[Cycle], float]:
    """`count` cycles, at most `concurrency` in flight; returns them and the wall time."""
    gate = asyncio.Semaphore(concurrency)

    async def one() -> Cycle | None:
        async with gate:
            n = rig.cycles
            rig.cycles += 1
            try:
                return await cycle(rig, n)
            except Exception as e:
                rig.errors.append(f"cycle {n}: {e!r}")
                return None

    began = time.monotonic()
    done = await asyncio.gather(*(one() for _ in range(count)))
    return [c for c in done if c is not None], time.monotonic() - began


def latencies(cycles: Sequence[Cycle]) -> dict[str, dict[str, Any]]:
    return {
        "create_to_posted": summarize_ms([c.posted - c.create_sent for c in cycles]),
        "click_to_resumed": summarize_ms([c.resumed - c.click_sent for c in cycles]),
        "click_ack": summarize_ms([c.click_answered - c.click_sent for c in cycles]),
        "click_to_updated": summarize_ms([c.updated - c.click_sent for c in cycles]),
        "create_response": summarize_ms([c.create_answered - c.create_sent for c in cycles]),
    }


# -- resources ------------------------------------------------------------------------------------


def bot_client_names(consumer: str) -> dict[str, str]:
    return {
        "bot": f"approval-bot:{consumer}",
        "waiter": f"approval-bot-waiter:{consumer}",
    }


async def connections(redis: Redis, names: dict[str, str]) -> dict[str, int]:
    """CLIENT LIST entries per client name."""
    return {k: await count_clients(redis, v) for k, v in names.items()}


async def sample_connections(
    redis: Redis, names: dict[str, str], peak: dict[str, int], every: float = 0.25
) -> None:
    """Keep the highest connection counts seen in `peak` until cancelled."""
    while True:
        for k, v in (await connections(redis, names)).items():
            peak[k] = max(peak.get(k, 0), v)
        await asyncio.sleep(every)


#: Commands this script itself sends while measuring (the sampler, INFO): not the bot's.
OWN_COMMANDS = frozenset({"client|list", "client", "info", "ping"})


async def command_stats(redis: Redis) -> dict[str, int]:
    """Calls per command since the server started (INFO commandstats), server-wide."""
    stats = await redis.info("commandstats")
    return {
        name.removeprefix("cmdstat_"): int(v["calls"])
        for name, v in stats.items()
        if isinstance(v, dict) and "calls" in v
    }


def commands_per_cycle(
    before: dict[str, int], after: dict[str, int], cycles: int
) -> dict[str, float]:
    delta = {k: after[k] - before.get(k, 0) for k in after if k not in OWN_COMMANDS}
    per = {k: round(v / max(1, cycles), 2) for k, v in delta.items() if v > 0}
    return dict(sorted(per.items(), key=lambda kv: -kv[1]))


def settled_rss() -> int:
    gc.collect()
    return rss_kib()


def rss_peak_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


# -- the run --------------------------------------------------------------------------------------


def _py_spy(pid: int, path: str | None) -> subprocess.Popen[bytes] | None:
    """py-spy sampling `pid` into `path` (collapsed stacks) until sent SIGINT; None without
    a path. py-spy is not a dependency: `pip install py-spy` into the venv to use it."""
    if not path:
        return None
    exe = shutil.which("py-spy", path=os.path.dirname(sys.executable)) or shutil.which("py-spy")
    if exe is None:
        raise SystemExit("--bot-profile needs py-spy: .venv/bin/pip install py-spy")
    return subprocess.Popen(
        [exe, "record", "--pid", str(pid), "--rate", "250", "--format", "raw", "-o", path],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def process_cpu_s(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of a process so far (/proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


async def _serve(
    url: str,
    keys: Keys,
    run_id: str,
    slack: SlackEmulator,
    exe: str | None = None,
    cprofile: str | None = None,
) -> tuple[Any, int]:
    """`approval-bot serve` in its own process against the emulator, Slack pacing off (the
    one difference from production, as in-process), once /healthz answers."""
    port = free_port()
    env = serve_env(url, keys.prefix, port, slack, API_TOKEN)
    exe = exe or os.path.join(os.path.dirname(sys.executable), "approval-bot")
    command = [exe, "serve"]
    if cprofile:  # the same bot under cProfile, switched on for the load phase by SIGUSR1
        wrapper = PROFILED_SERVE
        command = [os.path.join(os.path.dirname(exe), "python"), wrapper, cprofile]
    proc = subprocess.Popen(command, env=env)  # noqa: ASYNC220 - once, before timing
    try:
        await wait_healthz(proc, f"http://127.0.0.1:{port}")
    except BaseException:
        proc.terminate()  # a no-op when it has exited
        raise
    return proc, port


@contextlib.asynccontextmanager
async def running_rig(
    url: str,
    keys: Keys,
    run_id: str,
    *,
    bot_process: bool = False,
    bot_exe: str | None = None,
    bot_cprofile: str | None = None,
) -> AsyncIterator[Rig]:
    async with SlackEmulator(channels={CHANNEL}) as slack:
        if bot_process:
            proc, port = await _serve(url, keys, run_id, slack, bot_exe, bot_cprofile)
            ledger = SlackLedger(slack)
            ledger.start()
            try:
                unlimited = aiohttp.TCPConnector(limit=0)
                async with (
                    aiohttp.ClientSession(connector=unlimited) as agents,
                    aiohttp.ClientSession() as clicks,
                ):
                    yield Rig(
                        bot=None,
                        slack=slack,
                        ledger=ledger,
                        agents=agents,
                        reviewer=Reviewer(REVIEWER, slack, clicks),
                        base=f"http://127.0.0.1:{port}",
                        run_id=run_id,
                        process=proc,
                    )
            finally:
                await ledger.stop()
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            return
        config = BotConfig(
            redis_url=url,
            prefix=keys.prefix,
            host="127.0.0.1",
            port=0,
            slack_bot_token=slack.token,
            slack_signing_secret=SIGNING_SECRET,
            slack_api_url=slack.api_url,
            api_tokens=(API_TOKEN,),
            default_channel=CHANNEL,
            consumer=f"bench-{run_id}",
            dispatcher=DispatcherOptions(pacing=False),  # everything else: production defaults
        )
        bot = Bot(config)
        await bot.start()
        ledger = SlackLedger(slack)
        ledger.start()
        try:
            unlimited = aiohttp.TCPConnector(limit=0)
            async with (
                aiohttp.ClientSession(connector=unlimited) as agents,
                aiohttp.ClientSession() as clicks,
            ):
                yield Rig(
                    bot=bot,
                    slack=slack,
                    ledger=ledger,
                    agents=agents,
                    reviewer=Reviewer(REVIEWER, slack, clicks),
                    base=f"http://127.0.0.1:{bot.port}",
                    run_id=run_id,
                )
        finally:
            await ledger.stop()
            await bot.stop()


async def _serve_consumer(admin: Redis) -> str:
    """The consumer name of the bot process, from its Redis client name."""
    for _ in range(50):
        for client in await admin.client_list():
            name = str(client.get("name", ""))
            if name.startswith("approval-bot:"):
                return name.removeprefix("approval-bot:")
        await asyncio.sleep(0.1)
    return "?"


def exactly_once(rig: Rig, request_ids: Sequence[str]) -> dict[str, Any]:
    """Posts and updates per request at the emulator; anything but one of each is wrong."""
    posts: Counter[int] = Counter()
    updates: Counter[int] = Counter()
    wrong: list[str] = []
    for r in request_ids:
        t = rig.ledger.tracks.get(r)
        p, u = (t.posts, t.updates) if t else ([], [])
        posts[len(p)] += 1
        updates[len(u)] += 1
        if len(p) != 1 or len(u) != 1:
            first = p[0] if p else 0.0
            when = ", ".join(f"+{(x - first) * 1000:.1f}" for x in u)
            wrong.append(f"{r}: {len(p)} posts, {len(u)} updates (at ms after the post: {when})")
    return {
        "requests": len(request_ids),
        "one_post": posts.get(1, 0),
        "one_update": updates.get(1, 0),
        "posts_per_request": {str(k): v for k, v in sorted(posts.items())},
        "updates_per_request": {str(k): v for k, v in sorted(updates.items())},
        "wrong": wrong,
    }


async def main_async(args: argparse.Namespace, url: str) -> dict[str, Any]:
    began = time.monotonic()
    run_id = uuid.uuid4().hex[:10]
    keys = Keys(f"bench-{run_id}")
    admin = connect(url, max_connections=4, client_name=f"bench-e2e-{run_id}")
    try:
        server = await server_name(admin)
        async with running_rig(
            url,
            keys,
            run_id,
            bot_process=args.bot_process,
            bot_exe=args.bot_exe,
            bot_cprofile=args.bot_cprofile,
        ) as rig:
            consumer = rig.bot.config.consumer if rig.bot else await _serve_consumer(admin)
            names = bot_client_names(consumer)
            rss_started = settled_rss()
            conns_started = await connections(admin, names)
            print(f"# warm-up: {args.warmup} cycles", flush=True)
            await run_cycles(rig, args.warmup, min(args.warmup, args.concurrency) or 1)
            print(f"# latency: {args.latency_cycles} cycles one at a time", flush=True)
            single, single_s = await run_cycles(rig, args.latency_cycles, 1)
            rss_before = settled_rss()
            conns_before = await connections(admin, names)
            print(f"# throughput: {args.requests} cycles, {args.concurrency} in flight", flush=True)
            peak: dict[str, int] = dict(conns_before)
            sampler = asyncio.create_task(sample_connections(admin, names, peak))
            profiler = None
            stats_before = await command_stats(admin)
            cpu_began = time.process_time()
            bot_cpu_began = process_cpu_s(rig.process.pid) if rig.process else (0.0, 0.0)
            spy = _py_spy(rig.process.pid, args.bot_profile) if rig.process else None
            if rig.process and args.bot_cprofile:
                rig.process.send_signal(signal.SIGUSR1)
            if args.profile:
                import cProfile

                profiler = cProfile.Profile()
                profiler.enable()
            try:
                loaded, loaded_s = await run_cycles(rig, args.requests, args.concurrency)
            finally:
                cpu_s = time.process_time() - cpu_began
                bot_cpu_s = bot_sys_s = None
                if rig.process:
                    user, system = process_cpu_s(rig.process.pid)
                    bot_sys_s = system - bot_cpu_began[1]
                    bot_cpu_s = user - bot_cpu_began[0] + bot_sys_s
                if spy is not None:
                    spy.send_signal(signal.SIGINT)
                    spy.wait(30)
                if rig.process and args.bot_cprofile:
                    rig.process.send_signal(signal.SIGUSR2)
                if profiler is not None:
                    profiler.disable()
                    profiler.dump_stats(args.profile)
                sampler.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sampler
            stats_after = await command_stats(admin)
            await asyncio.sleep(args.settle)  # a late duplicate post or update would land now
            rig.ledger.catch_up()
            rss_after = settled_rss()
            conns_after = await connections(admin, names)
            timed = [c.request_id for c in (*single, *loaded)]
            counts = exactly_once(rig, timed)
            failed = len(rig.errors)
            metrics = counters(rig.bot.ctx.metrics) if rig.bot and rig.bot.ctx is not None else {}
            ledger = rig.ledger
            extra = {
                "other_slack_calls": dict(ledger.other),
                "slack_calls_not_ok": dict(ledger.not_ok),
                "unmatched_slack_calls": dict(ledger.unmatched),
                "repolls": sum(c.polls - 1 for c in (*single, *loaded)),
            }
            errors = list(rig.errors)
        await delete_prefix(admin, keys)
    finally:
        await admin.aclose()
    cycles_total = args.warmup + args.latency_cycles + args.requests
    return {
        "bench": "e2e",
        "redis": server,
        "redis_url": url,
        **machine(),
        "slack_pacing": False,
        "one_process": not args.bot_process,
        "warmup_cycles": args.warmup,
        "single": {
            "cycles": len(single),
            "wall_s": round(single_s, 3),
            "cycles_per_s": round(len(single) / single_s, 1) if single_s else None,
            "agent_waiting_at_click": sum(1 for c in single if c.waiting_at_click >= 1),
            **latencies(single),
        },
        "loaded": {
            "cycles": len(loaded),
            "concurrency": args.concurrency,
            "wall_s": round(loaded_s, 3),
            "cycles_per_s": round(len(loaded) / loaded_s, 1) if loaded_s else None,
            "cpu_busy_pct": round(100 * cpu_s / loaded_s, 1) if loaded_s else None,
            "cpu_ms_per_cycle": round(1000 * cpu_s / max(1, len(loaded)), 2),
            "bot_process": bool(args.bot_process),
            "bot_cpu_ms_per_cycle": (
                round(1000 * bot_cpu_s / max(1, len(loaded)), 2) if bot_cpu_s is not None else None
            ),
            "bot_system_ms_per_cycle": (
                round(1000 * bot_sys_s / max(1, len(loaded)), 2) if bot_sys_s is not None else None
            ),
            "redis_commands_per_cycle": commands_per_cycle(stats_before, stats_after, len(loaded)),
            **latencies(loaded),
        },
        "exactly_once": counts,
        "failed_cycles": failed,
        "errors": errors[:5],
        **extra,
        "bot_metrics": metrics,
        "rss_kib": {
            "bot_started": rss_started,
            "before": rss_before,
            "after": rss_after,
            "peak": rss_peak_kib(),
            "per_cycle": round((rss_after - rss_before) / max(1, args.requests), 2),
        },
        "redis_connections": {
            "names": names,
            "bot_pool_max": DEFAULT_MAX_CONNECTIONS,
            "started": conns_started,
            "before": conns_before,
            "peak": peak,
            "after": conns_after,
        },
        "cycles_total": cycles_total,
        "elapsed_s": round(time.monotonic() - began, 1),
    }


# -- report ---------------------------------------------------------------------------------------


def checks(r: dict[str, Any]) -> dict[str, Any]:
    once = r["exactly_once"]
    expected = r["single"]["cycles"] + r["loaded"]["cycles"]
    ack_p99 = max(r["single"]["click_ack"]["p99_ms"] or 0, r["loaded"]["click_ack"]["p99_ms"] or 0)
    return {
        "click_ack_p99_under_3s": {"p99_ms": ack_p99, "result": verdict(ack_p99 < ACK_LIMIT_MS)},
        "one_post_per_request": verdict(once["one_post"] == once["requests"] == expected),
        "one_update_per_request": verdict(once["one_update"] == once["requests"] == expected),
        "no_failed_cycles": verdict(r["failed_cycles"] == 0),
    }


def print_report(r: dict[str, Any]) -> None:
    s, ld = r["single"], r["loaded"]
    print(
        f"\napproval-bot end-to-end benchmark · {r['redis']} at {r['redis_url']} · "
        f"Python {r['python']} · {r['cpus']} CPUs · load {r['loadavg_1m']}"
    )
    print(
        "One process, one event loop: the real Bot (aiohttp + slack-bolt, signed requests, "
        "real Redis), the Slack emulator,\nthe agents (HTTP API, bearer token, long-poll "
        "?wait=30) and the reviewer (signed block_actions clicks) share the CPU:\n"
        "the figures are conservative. Slack pacing is OFF for the measurement "
        "(DispatcherOptions(pacing=False));\nreal Slack allows about 1 post/s per channel."
    )
    rows: list[list[object]] = []
    paths = (
        ("create → posted", "create_to_posted", "POST /v1/approvals → chat.postMessage at Slack"),
        ("click → agent resumed", "click_to_resumed", "click POST sent → long-poll returned"),
        ("click HTTP response", "click_ack", "bolt ack"),
        ("click → message updated", "click_to_updated", "click POST sent → chat.update at Slack"),
        ("create HTTP response", "create_response", "201 from POST /v1/approvals"),
    )
    for label, key, meaning in paths:
        for phase, res in (("1 in flight", s), (f"{ld['concurrency']} in flight", ld)):
            f = res[key]
            rows.append(
                [
                    label if phase == "1 in flight" else "",
                    phase,
                    f["p50_ms"],
                    f["p99_ms"],
                    f["max_ms"],
                    meaning if phase == "1 in flight" else "",
                ]
            )
    print(f"\nlatency, ms ({s['cycles']:,} cycles one at a time; {ld['cycles']:,} under load)")
    print(table(["path", "in flight", "p50", "p99", "max", "measured"], rows))

    once = r["exactly_once"]
    print("\nthroughput (complete cycles: create → posted → click → resumed → updated)")
    print(
        table(
            ["phase", "cycles", "wall s", "cycles/s", "CPU busy", "CPU ms/cycle"],
            [
                ["1 in flight", s["cycles"], s["wall_s"], s["cycles_per_s"], None, None],
                [
                    f"{ld['concurrency']} in flight",
                    ld["cycles"],
                    ld["wall_s"],
                    ld["cycles_per_s"],
                    f"{ld['cpu_busy_pct']}%",
                    ld["cpu_ms_per_cycle"],
                ],
            ],
        )
    )
    if ld.get("bot_process"):
        print(
            "  CPU: this process's CPU time over the load phase (emulator + agents + reviewer; "
            "the bot runs as `approval-bot serve` in its own process); 100% = one core."
        )
        print(
            f"  bot process CPU ms/cycle (/proc/<pid>/stat): {ld['bot_cpu_ms_per_cycle']} "
            f"(of which system {ld['bot_system_ms_per_cycle']})"
        )
    else:
        print(
            "  CPU: this process's CPU time over the load phase (bot + emulator + agents + "
            "reviewer); 100% = one core, all an event loop can use. --bot-process runs the "
            "bot in its own process and reports its CPU separately."
        )
    cmds = ld["redis_commands_per_cycle"]
    print(
        f"  Redis commands per cycle under load ({sum(cmds.values()):.1f}; server-wide, "
        "exact only on a private server, --embedded): "
        + ", ".join(f"{k} {v:g}" for k, v in cmds.items())
    )
    rss, conns = r["rss_kib"], r["redis_connections"]
    print("\nresources (this process: bot + emulator + agents)")
    print(
        table(
            ["figure", "bot started", "before load", "peak under load", "after"],
            [
                ["RSS KiB", rss["bot_started"], rss["before"], rss["peak"], rss["after"]],
                [
                    f"Redis conns {conns['names']['bot']}",
                    conns["started"]["bot"],
                    conns["before"]["bot"],
                    conns["peak"]["bot"],
                    conns["after"]["bot"],
                ],
                [
                    f"Redis conns {conns['names']['waiter']}",
                    conns["started"]["waiter"],
                    conns["before"]["waiter"],
                    conns["peak"]["waiter"],
                    conns["after"]["waiter"],
                ],
            ],
        )
    )
    print(
        f"  RSS: peak is VmHWM (whole run). Growth over the load phase, {rss['per_cycle']} "
        "KiB/cycle, is mostly the emulator's\n  record of every call and message (kept for "
        "the counts below), not the bot.\n  Redis conns: CLIENT LIST entries with that name, "
        "peak sampled every 0.25 s; the bot's client pools at most "
        f"{conns['bot_pool_max']}\n  (callers past that wait for a connection), the "
        "Waiter's at most 2."
    )

    c = r["checks"]
    print("\nchecks")
    print(
        f"  click ack p99 < {ACK_LIMIT_MS:g} ms (Slack's limit): "
        f"{c['click_ack_p99_under_3s']['p99_ms']} ms  {c['click_ack_p99_under_3s']['result']}"
    )
    print(
        f"  exactly one chat.postMessage per request: {once['one_post']:,}/{once['requests']:,}"
        f"  {c['one_post_per_request']}   (posts per request: {once['posts_per_request']})"
    )
    print(
        f"  exactly one chat.update per request: {once['one_update']:,}/{once['requests']:,}"
        f"  {c['one_update_per_request']}   (updates per request: {once['updates_per_request']})"
    )
    for line in once["wrong"][:20]:
        print(f"    FAIL {line}")
    if len(once["wrong"]) > 20:
        print(f"    FAIL … and {len(once['wrong']) - 20} more")
    print(f"  failed cycles: {r['failed_cycles']}  {c['no_failed_cycles']}")
    for e in r["errors"]:
        print(f"    FAIL {e}")
    if r["other_slack_calls"] or r["slack_calls_not_ok"] or r["unmatched_slack_calls"]:
        print(
            f"  other Slack calls: {r['other_slack_calls']}; not ok: {r['slack_calls_not_ok']}; "
            f"unmatched: {r['unmatched_slack_calls']}"
        )
    if not ld.get("bot_process"):  # the Waiter's count is only visible in process
        print(
            f"  the agent's long-poll was already waiting when the click went (1 in flight): "
            f"{s['agent_waiting_at_click']:,}/{s['cycles']:,}"
        )
    if r["repolls"]:
        print(f"  note: {r['repolls']} long-polls came back pending and were repeated")
    print(f"  run time {r['elapsed_s']:.0f} s ({r['cycles_total']:,} cycles incl. warm-up)\n")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="End-to-end cycles through one real bot process.")
    p.add_argument("--requests", type=int, default=500, help="cycles under load (default 500)")
    p.add_argument("--concurrency", type=int, default=50, help="cycles in flight (default 50)")
    p.add_argument(
        "--latency-cycles",
        type=int,
        default=200,
        help="cycles run one at a time for the unloaded latencies (default 200)",
    )
    p.add_argument("--warmup", type=int, default=20, help="untimed cycles first (default 20)")
    add_redis_arguments(p)
    p.add_argument(
        "--settle",
        type=float,
        default=1.0,
        help="seconds to wait after the last cycle before counting Slack calls (default 1)",
    )
    p.add_argument("--profile", help="write a cProfile of the load phase to this file")
    p.add_argument(
        "--bot-process",
        action="store_true",
        help="run the bot as `approval-bot serve` in its own process (against the emulator, "
        "Slack pacing off) and report its CPU ms per cycle separately",
    )
    p.add_argument(
        "--bot-exe",
        help="with --bot-process: the approval-bot executable to run (default: this venv's); "
        "another checkout's, e.g. /work/wt/base/.venv/bin/approval-bot, compares two versions "
        "in one window",
    )
    p.add_argument(
        "--bot-profile",
        help="with --bot-process: sample the bot process with py-spy over the load phase into "
        "this file (collapsed stacks; summarise with python -m bench.stacks FILE)",
    )
    p.add_argument(
        "--bot-cprofile",
        help="with --bot-process: profile the bot's CPU time over the load phase "
        "and write it to this file: FILE.pstats for cProfile (python -m pstats), else a CPU-time "
        "sampler's collapsed stacks (python -m bench.stacks FILE)",
    )
    args = p.parse_args(argv)
    if (args.bot_exe or args.bot_profile or args.bot_cprofile) and not args.bot_process:
        p.error("--bot-exe, --bot-profile and --bot-cprofile need --bot-process")
    if args.bot_process and args.profile:
        p.error("--profile profiles this process: run it without --bot-process")
    if args.requests < 1 or args.concurrency < 1 or args.latency_cycles < 1 or args.warmup < 0:
        p.error("--requests, --concurrency and --latency-cycles must be ≥ 1, --warmup ≥ 0")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    result = run_against_redis(args, main_async)
    result["checks"] = checks(result)
    print_report(result)
    print(json.dumps(result, separators=(",", ":")))


if __name__ == "__main__":
    main()
