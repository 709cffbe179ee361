"""A TCP proxy in front of the real Redis for fault tests: cut every connection and refuse new
ones, turn the open ones into black holes (half-open: bytes vanish, nothing is closed), or hold
back what a connection sends next once it has sent a given command."""

from __future__ import annotations

import asyncio
from urllib.parse import urlparse


class RedisProxy:
    """`async with RedisProxy(url) as proxied_url:` — then `cut()` / `restore()`,
    `blackhole()`, `freeze()` / `thaw()`, or `hold_after(b"HGETALL")` / `release()`."""

    def __init__(self, redis_url: str) -> None:
        self.parsed = urlparse(redis_url)
        self.target = (self.parsed.hostname or "127.0.0.1", self.parsed.port or 6379)
        self.down = False
        self.frozen = False
        self.after: bytes | None = None
        self.holding = asyncio.Event()  # set once a command is being held back
        self._released = asyncio.Event()
        self._writers: set[asyncio.StreamWriter] = set()
        self._dead: set[asyncio.StreamWriter] = set()  # black-holed (client side) connections
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        auth = self.parsed.netloc.rpartition("@")[0]
        return self.parsed._replace(netloc=f"{auth}@" * bool(auth) + f"127.0.0.1:{port}").geturl()

    async def __aexit__(self, *exc: object) -> None:
        self.release()
        self.cut()
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    def cut(self) -> None:
        self.down = True
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    def restore(self) -> None:
        self.down = False

    def freeze(self) -> None:
        """Stop forwarding in both directions on every connection, open or new (a frozen
        Redis or a silent partition: connects succeed, nothing ever answers)."""
        self.frozen = True

    def thaw(self) -> None:
        self.frozen = False

    def blackhole(self) -> None:
        """Every open connection goes silent for good (a half-open TCP connection: the peer
        vanished without a FIN or RST); new connections work."""
        self._dead.update(self._writers)

    def hold_after(self, command: bytes) -> None:
        """Hold back the next thing a connection sends after it sent `command` (b"HGETALL")."""
        self.after = b"$%d\r\n%s\r\n" % (len(command), command)
        self._released.clear()

    def release(self) -> None:
        self.after = None
        self._released.set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.down:
            writer.transport.abort()
            return
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self._writers.update((writer, up_writer))
        client = writer

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, up: bool) -> None:
            armed = False
            try:
                while data := await src.read(65536):
                    if up and armed and self.after is not None:
                        self.holding.set()
                        await self._released.wait()
                    armed = up and self.after is not None and self.after in data.upper()
                    if client in self._dead or self.frozen:
                        continue
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.transport.abort()

        await asyncio.gather(pipe(reader, up_writer, True), pipe(up_reader, writer, False))
