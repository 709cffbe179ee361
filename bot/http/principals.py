"""Who is calling the HTTP API: bearer tokens → principals (names), compared in constant time.

`APPROVALS_API_TOKENS` entries are `name:token` (the name is the principal)
or a bare token, whose principal is a name derived from it (`token-` and the
first 8 hex digits of its SHA-256, so the name never reveals the token).
`APPROVALS_ADMIN_TOKENS` entries have the same form; an admin principal may
see, wait on and cancel every principal's requests. Identity comes only from
here: nothing a caller writes in a body names an actor.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable
from dataclasses import dataclass

#: A principal's name: letters, digits, `_ . -`, starting with a letter or digit.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True)
class Principal:
    """An authenticated caller: its name, and whether it may see every principal's requests."""

    name: str
    admin: bool = False

    def may_see(self, owner: str | None) -> bool:
        """Whether this caller may read, wait on or cancel a request made by `owner`."""
        return self.admin or owner == self.name


class AuthProblem(Exception):
    """The request carries no usable credential; `status` and `code` are its HTTP answer."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def derived_name(token: str) -> str:
    return "token-" + hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()[:8]


def parse_entry(entry: str) -> tuple[str, str]:
    """`name:token` → (name, token); a bare token → (derived name, token)."""
    name, sep, token = entry.partition(":")
    if sep and token and NAME.fullmatch(name):
        return name, token
    return derived_name(entry), entry


@dataclass(frozen=True)
class _Entry:
    token: bytes
    principal: Principal


class Principals:
    """The accepted tokens and whose they are."""

    def __init__(self, entries: Iterable[str], admin_entries: Iterable[str] = ()) -> None:
        found: list[_Entry] = []
        # Admin entries first: a token listed in both lists is an admin's.
        for raw, admin in [*((e, True) for e in admin_entries), *((e, False) for e in entries)]:
            name, token = parse_entry(raw)
            found.append(_Entry(token.encode("utf-8", "replace"), Principal(name, admin)))
        self._entries = tuple(found)

    def __repr__(self) -> str:  # never show a token
        return f"Principals({', '.join(e.principal.name for e in self._entries)})"

    @property
    def enabled(self) -> bool:
        return bool(self._entries)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(e.principal.name for e in self._entries))

    def authenticate(self, header: str | None) -> Principal:
        """The principal of an `Authorization: Bearer …` header; `AuthProblem` otherwise
        (503 none configured, 401 no bearer token, 403 unknown token)."""
        if not self._entries:
            raise AuthProblem(
                503,
                "api_disabled",
                "the HTTP API is disabled: set APPROVALS_API_TOKENS to one or more "
                "comma-separated bearer tokens",
            )
        scheme, _, given = (header or "").strip().partition(" ")
        given = given.strip()
        if scheme.lower() != "bearer" or not given:
            raise AuthProblem(401, "unauthorized", "send 'Authorization: Bearer <token>'")
        presented = given.encode("utf-8", "replace")
        matched: Principal | None = None
        for entry in self._entries:  # every token compared, in constant time
            if hmac.compare_digest(presented, entry.token) and matched is None:
                matched = entry.principal
        if matched is None:
            raise AuthProblem(403, "forbidden", "the bearer token is not valid for this API")
        return matched
