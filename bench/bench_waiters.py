"""Benchmark: decision → waiter wake-up latency, RSS and Redis connections per waiter.

    .venv/bin/python -m bench.bench_waiters [--waiters 1000,10000] [--redis-url URL]

The waiting side (one `Waiter` on its own small client) runs in a child process;
this process creates the requests and decides them, so neither side's CPU skews
the other's timings. Both stamp with `time.time()` (same machine, same clock).
The same run measures 3-second polling and a bare PUBLISH → subscriber hop for
comparison. Prints tables, then one JSON line. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import random
import time
import uuid
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from approvals._internal.store.connection import connect
from approvals._internal.store.keys import Keys
from approvals._internal.store.store import ApprovalStore
from approvals._internal.store.waiting import Waiter
from approvals.models import ApprovalEvent, ApprovalRequest, Decision
from bench.common import (
    GcPauses,
    add_redis_arguments,
    count_clients,
    delete_prefix,
    gc_summary,
    machine,
    pace,
    recv,
    rss_kib,
    run_against_redis,
    server_name,
    spawn,
    summarize_ms,
    table,
    verdict,
)

P99_TARGET_MS = 10.0  # at 1,000 waiters
RSS_TARGET_KIB = 5.0  # per waiter
REVIEWER = "U0BENCH"


class StampingStore(ApprovalStore):
    """A store that notes when `resolve()`'s compare-and-set reply arrived.

    `resolve()` runs the Lua script (which PUBLISHes the id) and then re-reads the
    request with `get()`; entering `get()` is the moment the decider learnt the
    decision was committed. Should `resolve()` stop calling `get()`, the stamp
    falls back to the time `resolve()` returned — then the same moment.
    """

    def __init__(self, redis: Redis, keys: Keys) -> None:
        super().__init__(redis, keys)
        self.stamps: dict[str, float] = {}

    async def get(self, request_id: str) -> ApprovalRequest:
        self.stamps.setdefault(request_id, time.time())
        return await super().get(request_id)

    async def timed_resolve(self, request_id: str, decision: Decision) -> tuple[float, float]:
        """Resolve; return (time just before the call, time the CAS reply arrived)."""
        called = time.time()
        await self.resolve(request_id, decision)
        return called, self.stamps.pop(request_id, None) or time.time()


async def create_pending(store: ApprovalStore, n: int) -> list[str]:
    ids: list[str] = []
    for start in range(0, n, 1000):
        created = await asyncio.gather(
            *(
                store.create(
                    ApprovalRequest(event=ApprovalEvent(tool_name="deploy", arguments={"n": i}))
                )
                for i in range(start, min(n, start + 1000))
            )
        )
        ids.extend(c.request.id for c in created)
    return ids


# -- the waiting side (child process) --------------------------------------------------------


def waiting_side(
    conn: Connection,
    url: str,
    prefix: str,
    ids: list[str],
    warm: list[str],
    name: str,
    options: dict[str, Any],
) -> None:
    logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")
    run = _waiting_side(conn, url, prefix, ids, warm, name, options)
    if options["profile_to"]:
        import cProfile

        cProfile.runctx("asyncio.run(run)", globals(), {"run": run}, options["profile_to"])
    else:
        asyncio.run(run)
    conn.close()


async def _waiting_side(
    conn: Connection,
    url: str,
    prefix: str,
    ids: list[str],
    warm: list[str],
    name: str,
    options: dict[str, Any],
) -> None:
    redis = connect(url, max_connections=options["pool"], client_name=name)
    extra = {} if options["recheck"] is None else {"recheck_interval": options["recheck"]}
    waiter = Waiter(redis, Keys(prefix), **extra)
    await waiter.start()
    try:
        for rid in warm:  # already decided: runs the read / parse / settle path once
            await waiter.wait(rid, timeout=10)
        woken: dict[str, float] = {}
        wrong: list[str] = []

        async def one(rid: str) -> None:
            request = await waiter.wait(rid, timeout=options["timeout"])
            woken[rid] = time.time()
            d = request.decision
            if request.id != rid or d is None or rid not in (d.input, d.reason):
                wrong.append(rid)

        gc.collect()
        rss_before = rss_kib()
        tasks = [asyncio.create_task(one(rid)) for rid in ids]
        while waiter.waiting < len(ids):  # noqa: ASYNC110 - the Waiter has no event for this
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.5)  # the first status read of every id has finished by now
        gc.collect()
        rss_waiting = rss_kib()
        with GcPauses() as pauses:
            conn.send(
                {
                    "rss_before_kib": rss_before,
                    "rss_waiting_kib": rss_waiting,
                    "waiting": waiter.waiting,
                    "recheck_interval": waiter.recheck_interval,
                    "woken_early": len(woken),
                }
            )
            cpu_ready = time.process_time()
            burst_said = asyncio.create_task(asyncio.to_thread(_cpu_when_told, conn))
            results = await asyncio.gather(*tasks, return_exceptions=True)
            await burst_said  # the parent said so before deciding the rest at once
        cpu_end = time.process_time()
        errors = [repr(r) for r in results if isinstance(r, BaseException)]
        conn.send(
            {
                "woken": woken,
                "wrong": len(wrong),
                "errors": errors[:5],
                "error_count": len(errors),
                "subscriptions": waiter.subscriptions,
                "cpu_ready": cpu_ready,
                "cpu_burst": burst_said.result(),
                "cpu_end": cpu_end,
                "gc_pauses": pauses.pauses,
            }
        )
        await asyncio.to_thread(conn.recv)  # the parent counts our connections first
    finally:
        await waiter.stop()
        await redis.aclose()


def _cpu_when_told(conn: Connection) -> float:
    """Block until the parent's next message; this process's CPU time at that moment."""
    conn.recv()
    return time.process_time()


# -- the subscriber for the floor (child process) --------------------------------------------


def subscriber_side(conn: Connection, url: str, channel: str, count: int, name: str) -> None:
    asyncio.run(_subscriber_side(conn, url, channel, count, name))
    conn.close()


async def _subscriber_side(conn: Connection, url: str, channel: str, count: int, name: str) -> None:
    redis = connect(url, max_connections=2, client_name=name)
    pubsub = redis.pubsub()
    await pubsub.subscribe(channel)
    try:
        confirmed = await pubsub.get_message(timeout=5.0)
        assert confirmed and confirmed["type"] == "subscribe", confirmed
        conn.send("ready")
        arrivals: dict[int, float] = {}
        lost = 0
        idle_until = time.monotonic() + 10
        while len(arrivals) < count and time.monotonic() < idle_until:
            try:
                message = await pubsub.get_message(timeout=1.0)  # Waiter._listen's read loop
            except (RedisConnectionError, RedisTimeoutError, OSError):
                lost += 1  # e.g. another client's CLIENT KILL TYPE pubsub; redis-py resubscribes
                await asyncio.sleep(0.1)
                continue
            if message and message["type"] == "message":
                arrivals[int(message["data"])] = time.time()
                idle_until = time.monotonic() + 5
        conn.send({"arrivals": arrivals, "connection_lost": lost})
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]
        await redis.aclose()


# -- the deciding side (this process) ----------------------------------------------------------


async def run_waiters(redis: Redis, url: str, n: int, args: argparse.Namespace) -> dict[str, Any]:
    """N + samples waiters; decide `samples` of them one by one at a fixed rate (so at least
    N others wait throughout), then the other N all at once (the burst)."""
    keys = Keys(f"bench-{uuid.uuid4().hex[:10]}")
    store = StampingStore(redis, keys)
    name = f"bench-waiter-{keys.prefix}"
    load_before = os.getloadavg()[0]
    proc = None
    try:
        ids = await create_pending(store, n + args.samples)
        warm = await create_pending(store, 20)
        for rid in warm:
            await store.resolve(rid, Decision.approve(by=REVIEWER, input=rid))
        options = {
            "pool": args.waiter_pool,
            "recheck": args.recheck_interval,
            "timeout": args.wait_timeout,
            "profile_to": str(Path(args.profile_dir, f"waiter-{n}.pstats"))
            if args.profile_dir
            else None,
        }
        proc, conn = spawn(waiting_side, url, keys.prefix, ids, warm, name, options)
        ready = await recv(conn, 120)
        conns = [await count_clients(redis, name)]

        sampled, rest = ids[: args.samples], ids[args.samples :]
        called: dict[str, float] = {}
        acked: dict[str, float] = {}
        start = time.perf_counter()
        for k, rid in enumerate(sampled):
            await pace(start, k, args.rate)
            called[rid], acked[rid] = await store.timed_resolve(
                rid, Decision.approve(by=REVIEWER, input=rid)
            )
        await asyncio.sleep(0.2)  # let the last timed wake land before the burst
        conns.append(await count_clients(redis, name))

        conn.send("burst")
        burst_start = time.time()
        await asyncio.gather(
            *(
                store.resolve(
                    rid,
                    Decision.approve(by=REVIEWER, input=rid)
                    if i % 2 == 0
                    else Decision.deny(rid, by=REVIEWER),
                )
                for i, rid in enumerate(rest)
            )
        )
        burst_decided = time.time()
        store.stamps.clear()
        done = await recv(conn, args.wait_timeout + 30)
        conns.append(await count_clients(redis, name))
        conn.send("bye")
        await asyncio.to_thread(proc.join, 30)
    finally:
        if proc is not None and proc.is_alive():
            proc.terminate()
        await delete_prefix(redis, keys)

    woken: dict[str, float] = done["woken"]
    timed = [r for r in sampled if r in woken]
    last_woken = max((woken[r] for r in rest if r in woken), default=burst_decided)
    total = n + args.samples
    return {
        "waiters": n,
        "waiting_total": ready["waiting"],
        "timed_phase_s": round(max(woken[r] for r in timed) - min(called.values()), 2),
        "waiter_recheck_interval_s": ready["recheck_interval"],
        "from_call": summarize_ms([woken[r] - called[r] for r in timed]),
        "from_ack": summarize_ms([woken[r] - acked[r] for r in timed]),
        "decider_resolve": summarize_ms([acked[r] - called[r] for r in sampled]),
        "rss_before_kib": ready["rss_before_kib"],
        "rss_waiting_kib": ready["rss_waiting_kib"],
        "rss_per_waiter_kib": round(
            (ready["rss_waiting_kib"] - ready["rss_before_kib"]) / total, 2
        ),
        "redis_connections": conns,
        "waiter_cpu_per_wake_us": {
            "one_by_one": round((done["cpu_burst"] - done["cpu_ready"]) / len(sampled) * 1e6),
            "burst": round((done["cpu_end"] - done["cpu_burst"]) / max(1, len(rest)) * 1e6),
        },
        "burst": {
            "decisions": len(rest),
            "decided_s": round(burst_decided - burst_start, 3),
            "all_woken_s": round(last_woken - burst_start, 3),
        },
        "gc_during_timed_phase": gc_summary(
            done["gc_pauses"], min(called.values()), max(woken[r] for r in timed)
        ),
        "woken": len(woken),
        "woken_early": ready["woken_early"],
        "wrong_decision": done["wrong"],
        "errors": done["error_count"],
        "error_examples": done["errors"],
        "subscriptions": done["subscriptions"],
        "loadavg_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }


async def run_polling(redis: Redis, pollers: int, period: float, seed: int) -> dict[str, Any]:
    """`pollers` agents GET their request every `period` s from a random phase; each request
    is decided at a random moment. Both sides run here: seconds of latency dwarf the skew."""
    keys = Keys(f"bench-{uuid.uuid4().hex[:10]}")
    store = StampingStore(redis, keys)
    reader = ApprovalStore(redis, keys)
    rng = random.Random(seed)
    try:
        ids = await create_pending(store, pollers)
        seen: dict[str, float] = {}
        acked: dict[str, float] = {}
        t0 = time.perf_counter()

        async def poll(rid: str, phase: float) -> None:
            k = 0
            while True:
                await pace(t0 + phase, k, 1 / period)
                if not (await reader.get(rid)).is_pending:
                    seen[rid] = time.time()
                    return
                k += 1

        async def decide(rid: str, at: float) -> None:
            await pace(t0 + at, 0, 1)
            _, acked[rid] = await store.timed_resolve(rid, Decision.approve(by=REVIEWER))

        await asyncio.gather(
            *(poll(rid, rng.uniform(0, period)) for rid in ids),
            *(decide(rid, rng.uniform(0.2, 0.2 + period)) for rid in ids),
        )
        return {
            "pollers": pollers,
            "period_s": period,
            **summarize_ms([seen[r] - acked[r] for r in ids]),
        }
    finally:
        await delete_prefix(redis, keys)


class FloorProbe:
    """Bare PUBLISHes from this process → a redis-py subscriber in another process, one at a
    time, whenever the caller sends one: `run_floor` sends them back to back at a fixed
    rate; `bench_longpoll` sends one between two timed decisions, so the floor is measured
    at the decisions' own pace, on a machine as idle between two of them as the bot is."""

    def __init__(self, redis: Redis, url: str, count: int) -> None:
        self.redis, self.url, self.count = redis, url, count
        self.channel = f"bench-floor-{uuid.uuid4().hex[:10]}"
        self.called: dict[int, float] = {}
        self.acked: dict[int, float] = {}

    async def start(self) -> None:
        name = f"bench-sub-{self.channel}"
        self.proc, self.conn = spawn(subscriber_side, self.url, self.channel, self.count, name)
        try:
            await recv(self.conn, 60)
        except BaseException:
            self.proc.terminate()
            raise

    async def send(self, seq: int) -> None:
        self.called[seq] = time.time()
        await self.redis.publish(self.channel, str(seq))
        self.acked[seq] = time.time()

    async def finish(self) -> dict[str, Any]:
        try:
            got = await recv(self.conn, 30)
            arrivals: dict[int, float] = got["arrivals"]
            await asyncio.to_thread(self.proc.join, 10)
        finally:
            if self.proc.is_alive():
                self.proc.terminate()
        return {
            "messages": len(self.called),
            "received": len(arrivals),
            "connection_lost": got["connection_lost"],
            "from_call": summarize_ms([t - self.called[s] for s, t in arrivals.items()]),
            "from_ack": summarize_ms([t - self.acked[s] for s, t in arrivals.items()]),
        }


async def run_floor(redis: Redis, url: str, count: int, rate: float) -> dict[str, Any]:
    """A bare PUBLISH from here → a redis-py subscriber in another process, `count` of them
    at `rate` per second."""
    probe = FloorProbe(redis, url, count)
    await probe.start()
    try:
        start = time.perf_counter()
        for seq in range(count):
            await pace(start, seq, rate)
            await probe.send(seq)
    except BaseException:
        probe.proc.terminate()
        raise
    return await probe.finish()


# -- report ------------------------------------------------------------------------------------


def judge(runs: list[dict[str, Any]]) -> dict[str, Any]:
    at_1000 = next((r for r in runs if r["waiters"] == 1000), None)
    largest = max(runs, key=lambda r: r["waiters"])
    conns = {r["waiters"]: max(r["redis_connections"]) for r in runs}
    p99 = at_1000["from_call"]["p99_ms"] if at_1000 else None
    return {
        "p99_under_10ms_at_1000": {
            "p99_ms": p99,
            "result": verdict(p99 < P99_TARGET_MS) if p99 is not None else "n/a: no 1000 run",
        },
        "rss_under_5kib_per_waiter": {
            "kib": largest["rss_per_waiter_kib"],
            "at_waiters": largest["waiters"],
            "result": verdict(largest["rss_per_waiter_kib"] < RSS_TARGET_KIB),
        },
        "connections_constant": {
            "by_waiters": conns,
            "result": verdict(len(set(conns.values())) == 1) if len(conns) > 1 else "n/a: one size",
        },
        "all_woke_with_own_decision": all(
            r["woken"] == r["waiting_total"]
            and not (r["wrong_decision"] or r["errors"] or r["woken_early"])
            for r in runs
        ),
    }


def latency_row(who: str, measured_from: str, s: dict[str, Any], target: str) -> list[object]:
    """A row of the wake-up latency table from a `summarize_ms` result."""
    return [who, measured_from, s["p50_ms"], s["p99_ms"], s["max_ms"], target]


def print_report(
    meta: dict[str, Any],
    runs: list[dict[str, Any]],
    polling: dict[str, Any],
    floor: dict[str, Any],
    targets: dict[str, Any],
) -> None:
    print(
        f"\napproval-bot waiter benchmark · {meta['redis']} at {meta['redis_url']} · "
        f"Python {meta['python']} · {meta['cpus']} CPUs · load {meta['loadavg_1m']}"
    )
    print(
        f"Decider: this process. Waiters: a child process, one Waiter on a client with "
        f"max_connections={meta['waiter_pool']}.\nPer size N: {meta['samples']:,} decisions "
        f"one by one at {meta['rate']:g}/s (N others keep waiting), then N at once."
    )
    for r in runs:
        if r["timed_phase_s"] < r["waiter_recheck_interval_s"]:
            print(
                f"  note: at {r['waiters']:,} the timed phase ({r['timed_phase_s']:g} s) is "
                f"shorter than the Waiter's re-read period ({r['waiter_recheck_interval_s']:g}"
                " s): the latency may miss the cost of a periodic re-read"
            )
    print()
    rows: list[list[object]] = []
    for r in runs:
        for label, key in (("resolve() called", "from_call"), ("CAS reply received", "from_ack")):
            s = r[key]
            mark = ""
            if r["waiters"] == 1000 and key == "from_call":
                mark = f"{verdict(s['p99_ms'] < P99_TARGET_MS)} (p99 < {P99_TARGET_MS:g})"
            who = f"Waiter, {r['waiters']:,} waiting" if key == "from_call" else ""
            rows.append(latency_row(who, label, s, mark))
    poller = f"poll every {polling['period_s']:g} s ({polling['pollers']})"
    rows.append(latency_row(poller, "CAS reply received", polling, "comparison"))
    rows.append(
        latency_row("bare PUBLISH → subscriber", "PUBLISH sent", floor["from_call"], "floor")
    )
    rows.append(latency_row("", "PUBLISH reply", floor["from_ack"], ""))
    print("wake-up latency, ms")
    print(table(["who wakes", "measured from", "p50", "p99", "max", "target"], rows))

    rows = []
    for r in runs:
        b, cpu = r["burst"], r["waiter_cpu_per_wake_us"]
        rows.append(
            [
                f"{r['waiters']:,} (+{meta['samples']:,})",
                r["rss_per_waiter_kib"],
                verdict(r["rss_per_waiter_kib"] < RSS_TARGET_KIB),
                "/".join(str(c) for c in r["redis_connections"]),
                f"{cpu['one_by_one']} / {cpu['burst']}",
                f"{b['decisions']:,}: {b['decided_s']:.2f} / {b['all_woken_s']:.2f} s",
                r["decider_resolve"]["p99_ms"],
                f"{r['loadavg_1m'][0]}→{r['loadavg_1m'][1]}",
            ]
        )
    print("\nper size")
    print(
        table(
            [
                "waiters",
                "RSS KiB/waiter",
                "< 5 KiB",
                "Redis conns",
                "waiter CPU µs/wake",
                "burst decided / all woken",
                "decider resolve p99",
                "load",
            ],
            rows,
        )
    )
    print(
        "  Redis conns: CLIENT LIST count of the waiting client at ready / after the timed "
        "decisions / after the burst.\n  waiter CPU µs/wake: one by one / in the burst."
    )
    cuts = {r["waiters"]: r["subscriptions"] - 1 for r in runs if r["subscriptions"] > 1}
    if cuts or floor["connection_lost"] or floor["received"] < floor["messages"]:
        print(
            f"  note: pub/sub connections were cut during the run (waiters: {cuts or 'none'}; "
            f"floor: {floor['connection_lost']} cut, {floor['received']:,}/"
            f"{floor['messages']:,} received) — another client of this server killed them "
            "(e.g. a CLIENT KILL TYPE pubsub); those latencies include the recovery. "
            "A private server (--embedded) has no other clients."
        )

    t = targets
    print("\ntargets")
    print(
        f"  p99 < {P99_TARGET_MS:g} ms at 1,000 waiters (from resolve() called): "
        f"{t['p99_under_10ms_at_1000']['p99_ms']} ms  {t['p99_under_10ms_at_1000']['result']}"
    )
    rss = t["rss_under_5kib_per_waiter"]
    print(
        f"  RSS < {RSS_TARGET_KIB:g} KiB per waiter (at {rss['at_waiters']:,}): "
        f"{rss['kib']} KiB  {rss['result']}"
    )
    c = t["connections_constant"]
    print(
        f"  Redis connections constant in waiters: "
        f"{', '.join(f'{n:,}: {v}' for n, v in c['by_waiters'].items())}  {c['result']}"
    )
    print(
        f"  every waiter woke with its own decision: "
        f"{'yes' if t['all_woke_with_own_decision'] else 'NO'}"
    )
    for r in runs:
        if r["error_examples"]:
            print(f"  errors at {r['waiters']:,}: {r['error_examples']}")
    print(f"  run time {meta['elapsed_s']:.0f} s\n")


async def main_async(args: argparse.Namespace, url: str) -> dict[str, Any]:
    began = time.perf_counter()
    redis = connect(url, max_connections=64, client_name="bench-decider")
    try:
        server = await server_name(redis)
        print(f"# floor: {args.floor_messages:,} PUBLISH → subscriber", flush=True)
        floor = await run_floor(redis, url, args.floor_messages, args.floor_rate)
        print(f"# polling: {args.pollers} pollers every {args.poll_period:g} s", flush=True)
        polling = await run_polling(redis, args.pollers, args.poll_period, args.seed)
        runs = []
        for n in args.waiters:
            print(f"# waiters: {n:,} (+{args.samples:,} decided one by one)", flush=True)
            runs.append(await run_waiters(redis, url, n, args))
    finally:
        await redis.aclose()
    meta = {
        "redis": server,
        "redis_url": url,
        **machine(),
        "samples": args.samples,
        "rate": args.rate,
        "waiter_pool": args.waiter_pool,
        "recheck_interval": args.recheck_interval,
        "elapsed_s": round(time.perf_counter() - began, 1),
    }
    targets = judge(runs)
    print_report(meta, runs, polling, floor, targets)
    return {
        "bench": "waiters",
        **meta,
        "targets": targets,
        "runs": runs,
        "polling": polling,
        "floor": floor,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Waiter wake-up latency, memory and connections.")
    p.add_argument(
        "--waiters",
        default="1000,10000",
        type=lambda s: [int(x) for x in s.split(",") if x.strip()],
        help="comma-separated numbers of concurrent waiters (default 1000,10000)",
    )
    add_redis_arguments(p)
    p.add_argument(
        "--samples",
        type=int,
        default=1000,
        help="decisions timed one by one per size (default 1000)",
    )
    p.add_argument(
        "--rate",
        type=float,
        default=90.0,
        help="pace of the timed decisions per second (default 90: 1,000 take 11 s, "
        "so the timed phase spans one of the Waiter's periodic re-reads)",
    )
    p.add_argument(
        "--waiter-pool",
        type=int,
        default=2,
        help="max_connections of the waiting side's client (default 2)",
    )
    p.add_argument(
        "--recheck-interval",
        type=float,
        default=None,
        help="Waiter(recheck_interval=...) on the waiting side (default: its own)",
    )
    p.add_argument("--wait-timeout", type=float, default=120.0)
    p.add_argument("--pollers", type=int, default=200)
    p.add_argument("--poll-period", type=float, default=3.0)
    p.add_argument("--floor-messages", type=int, default=2000)
    p.add_argument("--floor-rate", type=float, default=1000.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--profile-dir", help="write cProfile stats of the waiting side to DIR/waiter-N.pstats"
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    result = run_against_redis(args, main_async)
    print(json.dumps(result, separators=(",", ":")))


if __name__ == "__main__":
    main()
