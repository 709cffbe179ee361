"""The development token: what `serve` accepts when `APPROVALS_API_TOKENS` is not set.

Without API tokens `serve` listens on loopback only (`LOOPBACK`) and accepts one
token of its own, kept in `APPROVALS_DATA_DIR/dev-token` (mode 0600): made on the
first start, reused on the next ones (so an `export` pasted in another shell stays
good), made anew when the file is missing, unreadable, not a token, or readable by
anyone but its owner. Its principal is `dev`. `serve` prints the line to paste:
`export APPROVALS_URL=http://127.0.0.1:PORT APPROVALS_TOKEN=…`.

A bind other than loopback without any API token is refused (`bot.core.app.Bot.start`):
the HTTP API is never open. Clients do not read this file: the printed line carries
the token, and a client on another machine could not read it anyway.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
from pathlib import Path

#: The file's name in the data directory.
FILE = "dev-token"
#: The principal the token authenticates as (requests show "asked by dev").
PRINCIPAL = "dev"
#: Where `serve` listens without API tokens.
LOOPBACK = "127.0.0.1"
_TOKEN = re.compile(r"[A-Za-z0-9_-]{32,128}")


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and `localhost`: only this machine can connect."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def path(data_dir: str | Path) -> Path:
    return Path(data_dir).expanduser() / FILE


def load_or_create(data_dir: str | Path) -> str:
    """The token kept in `data_dir` (see the module docstring), made when needed."""
    file = path(data_dir)
    try:
        info = file.stat()
        token = file.read_text(encoding="ascii").strip()
    except (OSError, UnicodeError):
        pass
    else:
        owner = os.getuid() if hasattr(os, "getuid") else info.st_uid
        private = stat.S_IMODE(info.st_mode) & 0o077 == 0 and info.st_uid == owner
        if private and _TOKEN.fullmatch(token):
            return token
    return _create(file)


def _create(file: Path) -> str:
    """A new token written to a new file (mode 0600 from the start), replacing any old one."""
    file.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    tmp = file.with_name(f".{file.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # whatever the umask, and an old file's mode, said
        os.write(fd, f"{token}\n".encode("ascii"))
    finally:
        os.close(fd)
    tmp.replace(file)
    return token


def export_line(port: int, token: str) -> str:
    """The line `serve` prints, to paste in the shell the agent or the CLI runs in."""
    return f"export APPROVALS_URL=http://{LOOPBACK}:{port} APPROVALS_TOKEN={token}"
