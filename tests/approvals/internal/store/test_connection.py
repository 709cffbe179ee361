"""The bot's Redis pool (`approvals/_internal/store/connection.py`): bounded, callers past the
bound wait
in order and are woken when a connection comes back; a free connection is taken without
redis-py's waiting machinery; commands are packed in C, as redis-py would. Counts, not timings."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.asyncio import BlockingConnectionPool, ConnectionPool, Redis
from redis.credentials import UsernamePasswordCredentialProvider
from redis.exceptions import ConnectionError as RedisConnectionError

from approvals._internal.store.connection import QuickBlockingPool, connect
from approvals._internal.store.keys import Keys


def _pool(client: Any) -> QuickBlockingPool:
    pool = client.connection_pool
    assert isinstance(pool, QuickBlockingPool)
    return pool


def _opened(pool: QuickBlockingPool) -> int:
    return len(pool._available_connections) + len(pool._in_use_connections)


async def test_a_free_connection_is_taken_without_the_waiting_path(
    redis_url: str, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    waited = 0
    original = BlockingConnectionPool.get_connection

    async def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal waited
        waited += 1
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(BlockingConnectionPool, "get_connection", counted)
    client = connect(redis_url, max_connections=4, client_name="approval-bot-test-pool")
    try:
        for n in range(50):
            await client.set(keys.lock(f"pool:{n}"), "x", ex=60)
        assert waited == 0
        assert _opened(_pool(client)) == 1  # one at a time: one connection, reused
    finally:
        await client.aclose()


@pytest.fixture
def slow_releases(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the releases that go redis-py's way (`ConnectionPool.release`)."""
    count = [0]
    original = ConnectionPool.release

    async def counted(self: Any, connection: Any) -> None:
        count[0] += 1
        await original(self, connection)

    monkeypatch.setattr(ConnectionPool, "release", counted)
    return count


async def test_a_connection_comes_back_at_once_and_the_pool_stays_whole(
    redis_url: str, keys: Keys, slow_releases: list[int]
) -> None:
    """Without a credential provider a connection is handed back without redis-py's lock,
    event and counters; one marked for a reconnect (redis-py's maintenance notices) is
    disconnected first and comes back, not lost."""
    client = connect(redis_url, max_connections=4, client_name="approval-bot-test-pool")
    pool = _pool(client)
    try:
        await asyncio.gather(
            *(client.set(keys.lock(f"pool:back:{n}"), "x", ex=60) for n in range(40))
        )
        opened = _opened(pool)
        assert not pool._in_use_connections and len(pool._available_connections) == opened
        marked = pool._available_connections[-1]
        marked.mark_for_reconnect()
        assert await client.get(keys.lock("pool:back:0")) == "x"  # taken, used, handed back
        assert not marked.should_reconnect() and not marked.is_connected
        assert _opened(pool) == opened and not pool._in_use_connections
        assert await client.get(keys.lock("pool:back:1")) == "x"  # and it reconnects
        assert slow_releases == [0]
    finally:
        await client.aclose()


async def test_with_a_credential_provider_a_connection_goes_back_redis_pys_way(
    redis_url: str, keys: Keys, slow_releases: list[int]
) -> None:
    """redis-py re-authenticates a released connection for a streaming credential provider:
    with any provider given, the release is left to redis-py."""
    provider = UsernamePasswordCredentialProvider("default", "any")  # the nopass default user
    pool = QuickBlockingPool.from_url(
        redis_url, max_connections=2, decode_responses=True, credential_provider=provider
    )
    client = Redis.from_pool(pool)
    try:
        for n in range(3):
            await client.set(keys.lock(f"pool:creds:{n}"), "x", ex=60)
        assert slow_releases == [3]
    finally:
        await client.aclose()


async def test_callers_past_the_bound_wait_and_are_all_served(
    redis_url: str, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    waited = 0
    original = BlockingConnectionPool.get_connection

    async def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal waited
        waited += 1
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(BlockingConnectionPool, "get_connection", counted)
    client = connect(redis_url, max_connections=3, client_name="approval-bot-test-pool")
    pool = _pool(client)
    rng = random.Random(7)
    most = 0

    async def worker(n: int) -> int:
        nonlocal most
        done = 0
        for step in range(5):
            key = keys.lock(f"pool:{n}:{step}")
            await client.set(key, str(n), ex=60)
            most = max(most, _opened(pool))
            async with client.pipeline(transaction=False) as pipe:
                pipe.get(key)
                pipe.delete(key)
                got, _ = await pipe.execute()
            done += got == str(n)
            if rng.random() < 0.3:
                await asyncio.sleep(0)
        return done

    try:
        results = await asyncio.wait_for(asyncio.gather(*(worker(n) for n in range(200))), 50)
    finally:
        await client.aclose()
    assert results == [5] * 200
    assert most <= 3, f"{most} connections for a pool of 3"
    assert waited > 0  # some callers found the pool full and waited


async def test_a_caller_that_finds_no_connection_in_time_is_refused(
    redis_url: str, keys: Keys
) -> None:
    client = connect(
        redis_url, max_connections=1, pool_timeout=0.2, client_name="approval-bot-test-pool"
    )
    pool = _pool(client)
    try:
        held = await pool.get_connection()
        with pytest.raises(RedisConnectionError):
            await client.get(keys.lock("pool:none"))
        pool.timeout = 30.0
        waiting = asyncio.create_task(client.set(keys.lock("pool:later"), "1", ex=60))
        await asyncio.sleep(0.05)
        assert not waiting.done()  # queued behind the held connection
        await pool.release(held)  # coming back wakes it
        assert await asyncio.wait_for(waiting, 5) is True
        assert _opened(pool) == 1
    finally:
        await client.aclose()


async def test_new_connections_do_not_read_the_package_metadata_again(
    redis_url: str, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """redis-py left alone reads its own package metadata for every new connection (its
    CLIENT SETINFO version): the client gives every connection one `DriverInfo`."""
    import redis.utils

    from approvals._internal.store import connection

    reads: list[int] = []
    real = redis.utils.get_lib_version
    monkeypatch.setattr(redis.utils, "get_lib_version", lambda: reads.append(1) or real())
    connection.driver_info.cache_clear()
    client = connect(redis_url, max_connections=8, client_name="approval-bot-test-pool")
    try:
        # Eight blocking pops at once hold eight connections: the pool opens all of them.
        await asyncio.gather(*(client.blpop([keys.lock(f"none:{n}")], 0.05) for n in range(8)))
        assert _opened(_pool(client)) == 8
        assert len(reads) == 1  # the one DriverInfo, made once
    finally:
        await client.aclose()
        connection.driver_info.cache_clear()


# -- commands packed in C (`CPacking`) --------------------------------------------------------

_ARG = st.one_of(
    st.text(),
    st.binary(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
)


@given(
    name=st.sampled_from(["SET", "EVALSHA", "CONFIG GET", b"HSET", b"CLIENT SETNAME", "x y z"]),
    args=st.lists(_ARG, max_size=40),
)
def test_c_packing_sends_the_bytes_redis_py_would(name: Any, args: list[Any]) -> None:
    from redis.asyncio.connection import Connection

    from approvals._internal.store.connection import c_packing

    plain = Connection()
    packed = c_packing(Connection)()
    try:
        expected = b"".join(plain.pack_command(name, *args))
    except Exception as e:  # a string that cannot be encoded: the same error either way
        with pytest.raises(type(e)):
            packed.pack_command(name, *args)
        return
    assert b"".join(packed.pack_command(name, *args)) == expected
    # Pipelines pack through the same method.
    assert b"".join(packed.pack_commands([(name, *args), ("PING",)])) == b"".join(
        plain.pack_commands([(name, *args), ("PING",)])
    )


@given(
    bad=st.one_of(
        st.booleans(), st.none(), st.lists(st.integers()), st.dictionaries(st.text(), st.text())
    )
)
def test_c_packing_refuses_what_redis_py_refuses(bad: Any) -> None:
    from redis.asyncio.connection import Connection
    from redis.exceptions import DataError

    from approvals._internal.store.connection import c_packing

    with pytest.raises(DataError):
        c_packing(Connection)().pack_command("SET", "k", bad)


async def test_every_client_connection_packs_in_c_and_round_trips(
    redis_url: str, keys: Keys
) -> None:
    from approvals._internal.store.connection import CPacking

    client = connect(redis_url, max_connections=4, client_name="approval-bot-test-pool")
    try:
        value = "ünïcode \x00 \u2028" + "x" * 10_000
        key = keys.lock("c-packing")
        await client.set(key, value, ex=60)
        assert await client.get(key) == value
        async with client.pipeline(transaction=True) as pipe:
            pipe.set(key, 1.5, ex=60).get(key)
            assert await pipe.execute() == [True, "1.5"]
        await client.delete(key)
        pool = _pool(client)
        opened = [*pool._available_connections, *pool._in_use_connections]
        assert opened and all(isinstance(c, CPacking) for c in opened)
    finally:
        await client.aclose()
