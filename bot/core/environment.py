"""The raw environment settings are read from: the process's (or a given mapping), with the
values of the dotenv file `APPROVALS_ENV_FILE` names under it (the real environment wins).

Light on purpose (no pydantic): `bot.core.settings` validates every variable from here, and the
command hook, which starts a process for each gated tool call, reads just `APPROVALS_URL`
and `APPROVALS_TOKEN` from here when that is all it needs (`http_client_settings`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

#: Names a dotenv file to read (optional; the environment wins over it).
ENV_FILE_VARIABLE = "APPROVALS_ENV_FILE"


class SettingsError(Exception):
    """The configuration is unusable; `problems`: one line per problem, naming its variable."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(self.problems))


def environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`env` (default: the process environment) over the values of `APPROVALS_ENV_FILE`'s
    file, if it names one; `SettingsError` when that file cannot be read."""
    source = dict(os.environ if env is None else env)
    env_file = (source.get(ENV_FILE_VARIABLE) or "").strip()
    if env_file:
        source = {**_read_env_file(env_file), **source}
    return source


def _read_env_file(path: str) -> dict[str, str]:
    from dotenv import dotenv_values  # python-dotenv, a dependency of pydantic-settings

    file = Path(path).expanduser()
    if not file.is_file():
        raise SettingsError([f"{ENV_FILE_VARIABLE}: no such file: {file}"])
    try:
        values = dotenv_values(file)
    except (OSError, UnicodeError) as e:  # the error's text may quote the file: not shown
        raise SettingsError(
            [f"{ENV_FILE_VARIABLE}: cannot read {file} ({type(e).__name__}; it must be UTF-8)"]
        ) from None
    return {k: v for k, v in values.items() if v is not None}


def http_client_settings(values: Mapping[str, str]) -> tuple[str, str] | None:
    """(APPROVALS_URL without its trailing slash, APPROVALS_TOKEN) when both are set and
    valid as `bot.core.settings` would take them — an http(s) URL with a host and no user info,
    a token without spaces; else None, and the caller loads every setting (and so reports
    any problem the same way as everywhere else)."""
    url = (values.get("APPROVALS_URL") or "").strip()
    token = (values.get("APPROVALS_TOKEN") or "").strip()
    if not url or not token or any(c.isspace() for c in token):
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or "@" in parts.netloc:
        return None
    try:
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        return None
    return url.rstrip("/"), token
