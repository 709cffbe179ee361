"""Helpers shared by the benchmark scripts: Redis selection, run facts, percentiles, RSS,
client counts, GC pauses, child processes, `approval-bot serve` in its own process, pacing and
a script's `main`.

The scripts run as modules from the repository root: `python -m bench.bench_e2e`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import logging
import math
import multiprocessing as mp
import os
import platform
import socket
import subprocess
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

import aiohttp
import redis as redis_sync
from redis.asyncio import Redis

from bot.ops import embedded_redis
from tests.support import delete_prefix as delete_prefix  # re-exported for the scripts
from tests.support.e2e import CHANNEL, SIGNING_SECRET

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


# -- Redis -------------------------------------------------------------------------------


def answers_ping(url: str) -> bool:
    try:
        client = redis_sync.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=2)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (redis_sync.RedisError, OSError):
        return False


def add_redis_arguments(parser: argparse.ArgumentParser) -> None:
    """`--redis-url` and `--embedded`, the arguments of `redis_server`."""
    parser.add_argument(
        "--redis-url",
        help="Redis to use (default: REDIS_URL or 127.0.0.1:6379 "
        "if it answers, else a throwaway server)",
    )
    parser.add_argument(
        "--embedded",
        action="store_true",
        help="use a private throwaway server (no other clients to disturb the run)",
    )


@contextmanager
def redis_server(explicit_url: str | None = None, *, embedded: bool = False) -> Iterator[str]:
    """The URL to benchmark against.

    An explicit `--redis-url` must answer PING (else `SystemExit`); otherwise
    `REDIS_URL` (or 127.0.0.1:6379) is used when it answers, and failing that (or
    with `embedded`) a throwaway server from `bot.ops.embedded_redis` is started and
    stopped at the end.
    """
    if explicit_url and embedded:
        raise SystemExit("give either --redis-url or --embedded, not both")
    if explicit_url:
        if not answers_ping(explicit_url):
            raise SystemExit(f"--redis-url {explicit_url} does not answer PING")
        yield explicit_url
        return
    # A benchmark is an entry point: like the test fixtures it reads REDIS_URL itself.
    url = os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL
    if not embedded and answers_ping(url):
        yield url
        return
    try:
        server = embedded_redis.start()
    except embedded_redis.NoRedisServer as e:
        raise SystemExit(f"benchmark needs Redis: {e}") from e
    why = "as asked" if embedded else f"{url} did not answer"
    print(f"# started a throwaway server at {server.url} ({why})", flush=True)
    try:
        yield server.url
    finally:
        server.stop()


async def server_name(redis: Redis) -> str:
    """The server and its version (INFO server), e.g. ``valkey 8.0.1`` or ``redis 7.4.2``."""
    info = await redis.info("server")
    if "valkey_version" in info:
        return "valkey " + str(info["valkey_version"])
    return "redis " + str(info.get("redis_version"))


def machine() -> dict[str, Any]:
    """The Python version, CPU count and 1-minute load average, for a result's header."""
    return {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }


async def count_clients(redis: Redis, name: str) -> int:
    """Server-side connections whose CLIENT SETNAME is `name` (CLIENT LIST)."""
    return sum(1 for c in await redis.client_list() if c.get("name") == name)


# -- figures -----------------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (always one of the samples); NaN for no samples."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def summarize_ms(seconds: Sequence[float]) -> dict[str, Any]:
    """p50 / p99 / max (and n, min) of durations given in seconds, in milliseconds."""
    ms = [s * 1000 for s in seconds]
    return {
        "n": len(ms),
        "min_ms": round(min(ms), 3) if ms else None,
        "p50_ms": round(percentile(ms, 50), 3) if ms else None,
        "p99_ms": round(percentile(ms, 99), 3) if ms else None,
        "max_ms": round(max(ms), 3) if ms else None,
    }


def proc_status_kib(field: str, pid: int | str = "self") -> int:
    """A KiB figure of `/proc/<pid>/status` (`VmRSS`, `VmHWM`, …); this process by default."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/{pid}/status (Linux only)")


def rss_kib() -> int:
    """This process's resident set size in KiB (VmRSS in /proc/self/status)."""
    return proc_status_kib("VmRSS")


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain text table, columns right-aligned except the first."""
    cells = [[str(h) for h in headers], *[[_cell(v) for v in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )

    out = [line(cells[0]), "  ".join("-" * w for w in widths)]
    out.extend(line(r) for r in cells[1:])
    return "\n".join(out)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


class GcPauses:
    """Records every cyclic-GC pause in this process while installed: (generation, start
    wall-clock time, duration s). Long gen-2 pauses show up as latency outliers."""

    def __init__(self) -> None:
        self.pauses: list[tuple[int, float, float]] = []
        self._began = 0.0

    def __enter__(self) -> GcPauses:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            elapsed = time.perf_counter() - self._began
            self.pauses.append((info["generation"], time.time() - elapsed, elapsed))


def gc_summary(
    pauses: Sequence[tuple[int, float, float]], start: float, end: float
) -> dict[str, dict[str, float]]:
    """Per generation: collections and the longest pause (ms) that began in [start, end]."""
    out: dict[str, dict[str, float]] = {}
    for gen in (0, 1, 2):
        durations = [d for g, t, d in pauses if g == gen and start <= t <= end]
        out[f"gen{gen}"] = {
            "count": len(durations),
            "max_ms": round(max(durations, default=0.0) * 1000, 2),
        }
    return out


# -- processes and pacing ----------------------------------------------------------------


def spawn(target: Callable[..., None], *args: Any) -> tuple[BaseProcess, Connection]:
    """Run `target(conn, *args)` in a fresh interpreter (spawn, not fork: its memory holds
    nothing of ours); returns the process and our end of the pipe."""
    ctx = mp.get_context("spawn")
    ours, theirs = ctx.Pipe()
    proc = ctx.Process(target=target, args=(theirs, *args), daemon=True)
    proc.start()
    theirs.close()
    return proc, ours


async def recv(conn: Connection, within: float) -> Any:
    """The next object from a child, without blocking the event loop."""
    if not await asyncio.to_thread(conn.poll, within):
        raise TimeoutError(f"child process sent nothing within {within:g} s")
    return conn.recv()


async def pace(start: float, k: float, rate: float) -> None:
    """Sleep until slot `k` of a fixed-rate schedule that began at `start` (perf_counter):
    a slow call does not push the later ones back (no coordinated omission)."""
    delay = start + k / rate - time.perf_counter()
    if delay > 0:
        await asyncio.sleep(delay)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- approval-bot serve in its own process -----------------------------------------------


def serve_env(url: str, prefix: str, port: int, slack: Any, api_token: str) -> dict[str, str]:
    """The environment of `approval-bot serve` against the Slack emulator `slack`: this
    process's, less the Socket Mode token, policy file and admin tokens, and Slack pacing off
    (the one difference from production)."""
    env = dict(os.environ)
    for name in ("SLACK_APP_TOKEN", "APPROVALS_POLICY_FILE", "APPROVALS_ADMIN_TOKENS"):
        env.pop(name, None)
    env.update(
        REDIS_URL=url,
        APPROVALS_PREFIX=prefix,
        PORT=str(port),
        SLACK_BOT_TOKEN=slack.token,
        SLACK_SIGNING_SECRET=SIGNING_SECRET,
        SLACK_API_URL=slack.api_url,
        APPROVALS_API_TOKENS=api_token,
        APPROVALS_DEFAULT_CHANNEL=CHANNEL,
        APPROVALS_SLACK_PACING="false",
        LOG_LEVEL="WARNING",
    )
    return env


async def wait_healthz(proc: subprocess.Popen[bytes], base: str) -> None:
    """Until `base`/healthz answers 200; `RuntimeError` if `proc` exits or 30 s pass first."""
    async with aiohttp.ClientSession() as http:
        for _ in range(300):
            if proc.poll() is not None:
                raise RuntimeError(f"approval-bot serve exited with {proc.returncode}")
            with contextlib.suppress(aiohttp.ClientError):
                async with http.get(f"{base}/healthz") as resp:
                    if resp.status == 200:
                        return
            await asyncio.sleep(0.1)
    raise RuntimeError("approval-bot serve did not answer /healthz within 30 s")


# -- a script's main ---------------------------------------------------------------------


def run_against_redis(
    args: argparse.Namespace,
    main_async: Callable[[argparse.Namespace, str], Coroutine[Any, Any, dict[str, Any]]],
    level: int = logging.WARNING,
) -> dict[str, Any]:
    """Log at `level`, pick the Redis of `--redis-url`/`--embedded` (`redis_server`) and run
    `main_async(args, url)` on it; the server, if a throwaway one, is stopped before return."""
    logging.basicConfig(level=level, format="%(name)s %(levelname)s %(message)s")
    with redis_server(args.redis_url, embedded=args.embedded) as url:
        return asyncio.run(main_async(args, url))


class LeanHttp:
    """One HTTP/1.1 connection with keep-alive, for load generators: a request is one write
    and its answer is read by Content-Length (what aiohttp's `json_response` sends) — tens of
    µs of CPU where aiohttp's client spends several hundred, so on a 2-core machine the
    agents take less of the CPU the bot under test needs. An answer with `Connection: close`
    closes it; the next request opens a new one. Chunked answers are refused (ValueError):
    the bot's API sends none."""

    __slots__ = ("head", "host", "port", "reader", "writer")

    def __init__(self, host: str, port: int, headers: dict[str, str]) -> None:
        self.host, self.port = host, port
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self.head = f"Host: {host}:{port}\r\n{extra}"
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        form: tuple[str, dict[str, str]] | None = None,
    ) -> tuple[int, Any]:
        """(status, decoded JSON body or None). `body` goes as JSON; `form` instead is
        (a url-encoded body, its headers). A kept-alive connection found closed by the
        server before any answer is retried once on a new one."""
        head = f"{method} {path} HTTP/1.1\r\n{self.head}"
        if form is not None:
            data = form[0].encode()
            head += "".join(f"{k}: {v}\r\n" for k, v in form[1].items())
            head += f"Content-Length: {len(data)}\r\n"
        else:
            data = b"" if body is None else json.dumps(body).encode()
            if body is not None:
                head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
        packet = head.encode() + b"\r\n" + data
        for attempt in (0, 1):
            reused = self.writer is not None
            if self.writer is None:
                self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
            assert self.reader is not None and self.writer is not None
            try:
                self.writer.write(packet)
                status_line = await self.reader.readuntil(b"\r\n")
            except (ConnectionError, asyncio.IncompleteReadError):
                self.close()
                if reused and attempt == 0:
                    continue
                raise
            return await self._answer(status_line)
        raise AssertionError("unreachable")

    async def _answer(self, status_line: bytes) -> tuple[int, Any]:
        assert self.reader is not None
        status = int(status_line.split(b" ", 2)[1])
        raw = await self.reader.readuntil(b"\r\n\r\n")
        length, close = 0, False
        for line in raw.split(b"\r\n"):
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"connection":
                close = value.strip().lower() == b"close"
            elif name == b"transfer-encoding":
                self.close()
                raise ValueError(f"unexpected Transfer-Encoding: {value.strip().decode()}")
        payload = await self.reader.readexactly(length) if length else b""
        if close:
            self.close()
        return status, json.loads(payload) if payload else None

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None
