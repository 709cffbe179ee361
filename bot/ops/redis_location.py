"""Which Redis `serve`, the CLI and the command hook use, and how a log or error line names it.

`REDIS_URL` when set; else the embedded server of the data directory
(`APPROVALS_DATA_DIR`: `serve` starts or shares it, `bot.ops.embedded_redis`;
the CLI and the hook find it through the address the server recorded). A Redis
that happens to answer on `localhost:6379` is never used unless `REDIS_URL`
names it: another program's Redis is not ours to write to. Its presence is only
told (a TCP connect, no command sent) in `serve`'s log and the CLI's "cannot
reach" line, for those who relied on it before 0.2.0. A description never shows
a password.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from bot.ops import embedded_redis

#: The well-known address that is used only when REDIS_URL names it (tests point it at a
#: stand-in server of their own, never at the real one).
LOCALHOST = "redis://localhost:6379/0"


def localhost_hint() -> str | None:
    """A line for whoever relied on the bot using `localhost:6379` without REDIS_URL (before
    0.2.0), when something answers there; None otherwise. Connects, sends nothing."""
    if not embedded_redis.answers(LOCALHOST, 0.5):
        return None
    return (
        f"a Redis answers on {describe(LOCALHOST).removesuffix(' db 0')} but is not used "
        f"without REDIS_URL (set REDIS_URL={LOCALHOST} to use it)"
    )


def describe(url: str) -> str:
    """`host:port db N` (plus TLS or the socket path); never the password or user name."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return f"unix socket {unquote(parts.path)}"
    tls = " (TLS)" if parts.scheme.startswith("rediss") else ""
    if parts.scheme.endswith("+sentinel"):
        where = parts.netloc.rsplit("@", 1)[-1]
        return f"master {parts.path.strip('/') or '?'} via sentinels {where}{tls}"
    db = parts.path.strip("/") or "0"
    return f"{parts.hostname or 'localhost'}:{parts.port or 6379} db {db}{tls}"


def server_dir(data_dir: str | Path) -> Path:
    """Where the embedded server keeps its data, address and lock."""
    return Path(data_dir).expanduser().resolve() / "redis"


@dataclass(frozen=True)
class Located:
    """The URL to use, where it came from, and what was tried (for a "cannot reach" line)."""

    url: str
    source: str  # "REDIS_URL" | "embedded" | "nothing"
    tried: tuple[str, ...]

    def cannot_reach(self) -> str:
        """One line saying what was tried, for when nothing answered."""
        return "cannot reach Redis: tried " + "; ".join(self.tried)


def for_cli(redis_url: str | None, data_dir: str | Path) -> Located:
    """The Redis a CLI command or a hook should use (see the module docstring)."""
    if redis_url:
        return Located(redis_url, "REDIS_URL", (f"REDIS_URL ({describe(redis_url)})",))
    tried = ["REDIS_URL (not set)"]
    directory = server_dir(data_dir)
    recorded = embedded_redis.recorded_address(directory)
    if recorded and embedded_redis.answers(recorded):
        return Located(recorded, "embedded", tuple(tried))
    where = directory / embedded_redis.URL_FILE
    if recorded:
        tried.append(f"the embedded server recorded in {where} ({describe(recorded)}: no answer)")
    else:
        tried.append(
            f"the embedded server of {directory} (no address recorded: is `approval-bot "
            "serve` running with this APPROVALS_DATA_DIR?)"
        )
    hint = localhost_hint()
    if hint:
        tried.append(hint)
    return Located(LOCALHOST, "nothing", tuple(tried))
