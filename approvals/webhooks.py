"""Decision callbacks: what an agent asks for (`Callback`) and where the policy lets it point.

A request may carry `callback = {url, events?, metadata?}`; its host must be in the policy's
`callbacks.allowed_hosts`, and no loopback, private, link-local, shared, reserved or multicast
address is allowed unless an entry names it. Entries: `hooks.example.com` (that host),
`.example.com` or `*.example.com` (any host under it, not the apex), `203.0.113.7` / `::1` /
`10.0.0.0/8` (those addresses). Pure: no I/O. Delivery: docs/ARCHITECTURE.md, "Decision
webhooks".
"""

from __future__ import annotations

import ipaddress
import json
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from approvals.errors import InvalidRequest

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: The longest callback URL accepted.
MAX_URL = 2048
#: The largest callback `metadata` (serialised) accepted.
MAX_CALLBACK_METADATA_BYTES = 16 * 1024
#: The events a callback may ask for (one today: the request left `pending`).
CallbackEvent = Literal["decided"]


def _decided_only() -> list[CallbackEvent]:
    return ["decided"]


class Callback(BaseModel):
    """Where to POST the signed approval object once the request is decided."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(min_length=1, max_length=MAX_URL)
    events: list[CallbackEvent] = Field(default_factory=_decided_only, min_length=1)
    #: Echoed back in the webhook (e.g. a workflow id to signal); never interpreted.
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        problem = url_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("metadata")
    @classmethod
    def _check_metadata(cls, value: dict[str, Any]) -> dict[str, Any]:
        size = len(json.dumps(value, default=str).encode())
        if size > MAX_CALLBACK_METADATA_BYTES:
            raise ValueError(
                f"callback metadata is {size} bytes; the limit is {MAX_CALLBACK_METADATA_BYTES}"
            )
        return value

    @property
    def host(self) -> str:
        return normalize_host(urlsplit(self.url).hostname or "")


def url_problem(url: str) -> str | None:
    """Why `url` cannot be a callback URL (None when its shape is fine)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError as e:
        return f"callback url is not a valid URL: {e}"
    if parts.scheme not in ("http", "https"):
        return "callback url must be an http:// or https:// URL"
    if not parts.hostname:
        return "callback url has no host"
    if parts.username is not None or parts.password is not None:
        return "callback url must not carry credentials (user:password@)"
    if parts.fragment:
        return "callback url must not have a #fragment"
    if any(c.isspace() or ord(c) < 0x20 for c in url):
        return "callback url must not contain spaces or control characters"
    return None


def normalize_host(host: str) -> str:
    return host.strip().rstrip(".").lower()


def parse_ip(text: str) -> IPAddress | None:
    """The address `text` spells (IPv4-mapped IPv6 as IPv4), or None for a name."""
    try:
        ip = ipaddress.ip_address(text.split("%", 1)[0])  # drop an IPv6 zone (fe80::1%eth0)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def is_public(ip: IPAddress) -> bool:
    """True for a globally routable unicast address; false for loopback, private (RFC 1918,
    fc00::/7), link-local (169.254/16 — cloud metadata — and fe80::/10), shared (100.64/10),
    unspecified, reserved, documentation and multicast addresses."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if isinstance(ip, ipaddress.IPv6Address) and (ip.sixtofour or ip.teredo):
        return False  # tunnels that embed an IPv4 address of any kind
    return ip.is_global and not ip.is_multicast


class CallbackPolicy(BaseModel):
    """The policy file's `callbacks` section."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    allowed_hosts: list[str] = Field(default_factory=list)

    @field_validator("allowed_hosts")
    @classmethod
    def _check_hosts(cls, value: list[str]) -> list[str]:
        out = []
        for entry in value:
            text = normalize_host(entry)
            if not text:
                raise ValueError("an allowed host must not be empty")
            if "/" in text:
                try:
                    ipaddress.ip_network(text, strict=False)
                except ValueError as e:
                    raise ValueError(f"{entry!r} is not a valid network: {e}") from e
            elif parse_ip(text) is None:
                name = text[2:] if text.startswith("*.") else text.lstrip(".")
                labels = name.split(".")
                if not name or any(
                    not label or not all(c.isalnum() or c in "-_" for c in label)
                    for label in labels
                ):
                    raise ValueError(
                        f"{entry!r} is not a host name, '.suffix', '*.suffix', address or network"
                    )
            out.append(text)
        return out

    def _networks(self) -> list[IPNetwork]:
        nets: list[IPNetwork] = []
        for entry in self.allowed_hosts:
            if "/" in entry:
                nets.append(ipaddress.ip_network(entry, strict=False))
            elif (ip := parse_ip(entry)) is not None:
                nets.append(ipaddress.ip_network(ip))
        return nets

    def _name_allowed(self, host: str) -> bool:
        for entry in self.allowed_hosts:
            if "/" in entry or parse_ip(entry) is not None:
                continue
            if entry.startswith("*.") or entry.startswith("."):
                suffix = "." + entry.lstrip("*.")
                if host.endswith(suffix) and len(host) > len(suffix):
                    return True
            elif host == entry:
                return True
        return False

    def address_allowed(self, address: str | IPAddress) -> bool:
        """May the bot connect to this address? Public ones yes; any other only when an
        address or network entry names it."""
        ip = parse_ip(str(address))
        if ip is None:
            return False
        if any(ip.version == net.version and ip in net for net in self._networks()):
            return True
        return is_public(ip)

    def host_allowed(self, host: str) -> bool:
        """Is `host` (a URL's host: a name or an address) on the allow-list? An address must
        be listed as an address or network; a name as a name or suffix."""
        host = normalize_host(host)
        ip = parse_ip(host)
        if ip is not None:
            return any(ip.version == net.version and ip in net for net in self._networks())
        return self._name_allowed(host)

    def refusal(self, url: str) -> str | None:
        """Why a callback to `url` is refused (None when allowed). Names resolve at delivery
        time, where `address_allowed` checks each address connected to."""
        problem = url_problem(url)
        if problem:
            return problem
        host = normalize_host(urlsplit(url).hostname or "")
        if not self.allowed_hosts:
            return (
                "callbacks are turned off: the policy file lists no callbacks.allowed_hosts "
                f"(add {host!r} there to allow this one)"
            )
        if not self.host_allowed(host):
            return f"callback host {host!r} is not in the policy's callbacks.allowed_hosts"
        return None

    def check(self, callback: Callback) -> None:
        """Raise `InvalidRequest` (HTTP 422) when the policy does not allow `callback`."""
        reason = self.refusal(callback.url)
        if reason:
            raise InvalidRequest(reason, details="callback.url")


def as_callback(value: Callback | dict[str, Any] | None) -> Callback | None:
    """A `Callback` from itself or its dict form; `InvalidRequest` naming the problem."""
    if value is None or isinstance(value, Callback):
        return value
    try:
        return Callback.model_validate(value)
    except ValidationError as e:
        raise InvalidRequest(f"invalid callback: {e}", details=e.errors()) from e
