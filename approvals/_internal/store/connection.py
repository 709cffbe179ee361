"""Creating the one Redis client a process uses (bounded blocking pool, sane timeouts).

Internal to approval-bot (not a stable API); agents import from `approvals`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Iterable
from typing import Any, cast
from urllib.parse import parse_qs, unquote, urlsplit

import hiredis
from redis.asyncio import BlockingConnectionPool, ConnectionPool, Redis
from redis.asyncio.sentinel import SentinelConnectionPool

#: Connections one client may open; callers past it wait (up to `pool_timeout`). Measured
#: (bench/bench_load.py, 2,000 concurrent creates on one event loop): a connection comes
#: back only when the task that used it runs again, so on a saturated loop each serves a
#: few commands a second; at 32, creates waited past the 3 s command timeout (503). The
#: pool opens connections only as they are needed.
DEFAULT_MAX_CONNECTIONS = 256
#: How long one store operation may wait for Redis before it fails as `StoreUnavailable` (a
#: frozen Redis or a silent partition then gives a quick 503 / deny instead of a hang). It is
#: an asyncio timeout around each `ApprovalStore` call, not redis-py's `socket_timeout`:
#: measured with redis-py 8.1, a finite `socket_timeout` makes a cancelled command carry on
#: (task cancellation is lost), so shutdown hangs; and it would cut blocking reads.
DEFAULT_COMMAND_TIMEOUT = 3.0


def connect(
    url: str,
    *,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    pool_timeout: float = 20.0,
    client_name: str | None = "approval-bot",
    socket_timeout: float | None = None,
) -> Redis:
    """A client on a bounded *blocking* pool.

    redis-py's default pool raises `MaxConnectionsError` when exhausted; this
    one makes callers wait instead. `socket_timeout` is off by default: blocking
    commands (XREADGROUP BLOCK, pub/sub reads) are bounded by their own timeouts,
    and store operations by `DEFAULT_COMMAND_TIMEOUT`; connects still time out.
    """
    options: dict[str, Any] = {
        "max_connections": max_connections,
        "timeout": pool_timeout,
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": 5.0,
        "socket_keepalive": True,
        "health_check_interval": 30,
        "client_name": client_name,
        "decode_responses": True,
        "driver_info": driver_info(),
    }
    scheme = urlsplit(url).scheme
    if scheme in SENTINEL_SCHEMES:
        return _sentinel_master(url, options)
    if scheme in CLUSTER_SCHEMES:
        return _cluster(url, options)
    pool = QuickBlockingPool.from_url(url, **options)
    return Redis.from_pool(pool)  # closing the client closes the pool


@functools.cache
def driver_info() -> Any:
    """What each connection tells Redis in CLIENT SETINFO (redis-py and its version), made
    once: left to redis-py, every new connection reads the package's metadata file again
    (`importlib.metadata.version`: measured 392 → 8 µs of CPU per connection), which a
    burst that grows the pool to its bound pays hundreds of times."""
    from redis.driver_info import DriverInfo

    return DriverInfo()


class CPacking:
    """A connection mixin: commands packed by hiredis's C `pack_command` (redis-py's asyncio
    connections pack in Python even with hiredis installed; its sync ones use hiredis).
    Measured (redis-py 8.1, hiredis 3.5): 29 → 4.4 µs of CPU for the create script's 35
    arguments. Same bytes for what the store sends (str, bytes, int, float; the property test
    compares the two); anything hiredis does not take (another encoding than UTF-8/strict, a
    memoryview, a type neither packs) goes redis-py's way, which packs it or raises its own
    `DataError`."""

    def pack_command(self, *args: Any) -> list[bytes]:
        encoder = self.encoder  # type: ignore[attr-defined]
        if encoder.encoding == "utf-8" and encoder.encoding_errors == "strict" and args:
            head = args[0]
            if isinstance(head, str):
                args = (*head.encode().split(), *args[1:])
            elif isinstance(head, bytes) and b" " in head:
                args = (*head.split(), *args[1:])
            try:
                return [hiredis.pack_command(args)]
            except Exception:  # redis-py's packer below packs it or says why
                pass
        return super().pack_command(*args)  # type: ignore[misc,no-any-return]


_C_PACKED: dict[type, type] = {}


def c_packing(connection_class: type) -> type:
    """`connection_class` (redis-py's TCP, TLS or Unix socket connection) with `CPacking`
    (one class per base, made once)."""
    if issubclass(connection_class, CPacking):
        return connection_class
    packed = _C_PACKED.get(connection_class)
    if packed is None:
        name = f"CPacked{connection_class.__name__}"
        packed = _C_PACKED[connection_class] = type(name, (CPacking, connection_class), {})
    return packed


class QuickBlockingPool(BlockingConnectionPool):
    """redis-py's bounded blocking pool, minus most of its cost per command when a connection
    is free and nobody is waiting for one (measured, redis-py 8.1: 50 → 34 µs of CPU per
    HGET). redis-py's `get_connection` takes an asyncio condition, a timeout and the pool's
    observability counters around every command, and `release` the lock, an event and the
    counters again; here a caller that finds a free connection (or room for a new one) with
    no caller queued before it takes it at once, still checked by `ensure_connection`, and
    hands it back at once. Anyone else — a full pool, callers already waiting, redis-py's
    maintenance mode — goes redis-py's way and waits in order, up to `timeout`; a
    connection coming back wakes the first waiter.
    (The bot does not turn on redis-py's OpenTelemetry observability, whose pool-wait
    figures this path does not record.)"""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.connection_class = c_packing(self.connection_class)
        # Without a credential provider nothing listens for a connection's release (redis-py
        # re-authenticates there for a streaming one): it is handed back without the pool's
        # lock, the event and the observability counters. Measured (HGETALL, 10 at a time,
        # best of 20 runs on a 2-core VM): 55 → 47 µs of CPU per command.
        self._plain = self.connection_kwargs.get("credential_provider") is None

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs or not self._free_now():
            return await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]
        connection = self.get_available_connection()  # type: ignore[no-untyped-call]
        try:
            await self.ensure_connection(connection)
        except BaseException:
            await self.release(connection)
            raise
        return connection

    async def release(self, connection: Any) -> None:
        if self._plain:
            if connection.should_reconnect():
                await connection.disconnect()
            self._in_use_connections.remove(connection)
            self._available_connections.append(connection)
        else:
            await ConnectionPool.release(self, connection)
        if self._condition._waiters:
            async with self._condition:
                self._condition.notify()

    def _free_now(self) -> bool:
        return bool(
            not getattr(self, "_in_maintenance", False)
            and not self._condition._waiters
            and self.can_get_connection()
        )


#: `redis+sentinel://[[user]:password@]host:port[,host:port…]/MASTER[/DB][?options]`
#: (`rediss+sentinel://` for TLS to the sentinels and the master alike). Options:
#: `sentinel_username`, `sentinel_password` (when the sentinels have their own ACL user),
#: `ssl_ca_certs`, `ssl_certfile`, `ssl_keyfile`, `ssl_cert_reqs`.
SENTINEL_SCHEMES = frozenset({"redis+sentinel", "rediss+sentinel"})
_SSL_OPTIONS = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs")


#: `redis+cluster://[user:password@]host:port[,host:port…]` (`rediss+cluster://` for TLS):
#: a Redis Cluster through redis-py's `RedisCluster` (slots learnt from the nodes given).
#: Give `APPROVALS_PREFIX` a hash tag (`{approvals}`) so every key, and so every Lua
#: script, is in one slot. Pub/sub (the waiter) goes to one node: PUBLISH reaches all.
CLUSTER_SCHEMES = frozenset({"redis+cluster", "rediss+cluster"})


def _cluster(url: str, options: dict[str, Any]) -> Redis:
    from redis.asyncio.cluster import ClusterNode, RedisCluster

    parts = urlsplit(url)
    nodes = []
    for item in parts.netloc.rsplit("@", 1)[-1].split(","):
        host, _, port = item.strip().rpartition(":")
        nodes.append(ClusterNode(host.strip("[]") or "localhost", int(port or 6379)))
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    tls = parts.scheme.startswith("rediss")
    tls_options: dict[str, Any] = {k: query[k] for k in _SSL_OPTIONS if k in query} if tls else {}
    cluster = RedisCluster(
        startup_nodes=nodes,
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password else None,
        ssl=tls,
        **tls_options,
        max_connections=options["max_connections"],
        socket_timeout=options["socket_timeout"],
        socket_connect_timeout=options["socket_connect_timeout"],
        socket_keepalive=options["socket_keepalive"],
        health_check_interval=options["health_check_interval"],
        client_name=options["client_name"],
        driver_info=options["driver_info"],
        decode_responses=True,
    )
    # Not a `Redis`, but the same commands (scripts, streams, transactions on one slot,
    # pub/sub): the store uses it as one.
    return cast(Redis, cluster)


class _BlockingSentinelPool(SentinelConnectionPool, BlockingConnectionPool):
    """The master's address from the sentinels (asked again on every new connection and
    after a failover), with the blocking pool's bound: callers past it wait."""


def _sentinel_master(url: str, options: dict[str, Any]) -> Redis:
    """A client on the master that the sentinels in `url` name (redis-py's Sentinel
    support: a failover closes connections to the old master; new ones go to the new)."""
    from redis.asyncio.sentinel import Sentinel

    parts = urlsplit(url)
    where = parts.netloc.rsplit("@", 1)[-1]
    hosts: list[tuple[str, int]] = []
    for item in where.split(","):
        host, _, port = item.strip().rpartition(":")
        hosts.append((host.strip("[]") or "localhost", int(port or 26379)))
    path = [p for p in parts.path.split("/") if p]
    if not path:
        raise ValueError("a redis+sentinel:// URL names the master: …/MASTER_NAME[/DB]")
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    tls = parts.scheme.startswith("rediss")
    tls_options = {k: query[k] for k in _SSL_OPTIONS if k in query} if tls else {}
    sentinel_kwargs: dict[str, Any] = {
        "socket_connect_timeout": options["socket_connect_timeout"],
        "socket_timeout": 5.0,
        "ssl": tls,
        **tls_options,
    }
    if "sentinel_password" in query:
        sentinel_kwargs["password"] = query["sentinel_password"]
    if "sentinel_username" in query:
        sentinel_kwargs["username"] = query["sentinel_username"]
    # Typed through Any: redis-py types Sentinel's constructor from 8.2 on, not before, so
    # a call checked either way needs an ignore that the other release calls unused.
    make_sentinel: Any = Sentinel
    sentinel: Sentinel = make_sentinel(hosts, sentinel_kwargs=sentinel_kwargs)
    master: Redis = sentinel.master_for(
        path[0],
        redis_class=Redis,
        connection_pool_class=_BlockingSentinelPool,
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password else None,
        db=int(path[1]) if len(path) > 1 else 0,
        ssl=tls,
        **tls_options,
        **options,
    )
    master.auto_close_connection_pool = True
    return master


async def wait_until_done(tasks: set[asyncio.Task[Any]]) -> None:
    """Wait until `tasks` — a live set, which its tasks leave as they end — is empty; if the
    wait is cancelled (a stop bounds each step), cancel the tasks still in it."""
    try:
        while tasks:
            await asyncio.wait(set(tasks))
    finally:
        for task in list(tasks):
            task.cancel()


async def cancel_and_wait(tasks: Iterable[asyncio.Task[object]]) -> None:
    """Cancel `tasks` and wait until each has really ended.

    A cancellation that lands inside a bounded Redis call (a socket timeout, or a timeout
    around the call racing the cancel) can come out as a `TimeoutError` on Python 3.11 (the
    cancellation is lost), which a loop that survives Redis errors treats as a failure and goes
    on: so cancel again until the task is done.
    """
    pending = list(tasks)
    for task in pending:
        task.cancel()
    for task in pending:
        while not task.done():
            await asyncio.wait({task}, timeout=0.5)
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
