"""Masking of secrets before anything reaches Slack: sensitive keys, token-like values.

Masking errs on the side of hiding too much: a reviewer who sees `••••••`
can look the value up in the approval record; a token posted to a channel
cannot be taken back.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

MASK = "••••••"

#: Argument names whose values are always masked (searched anywhere in the name).
_SENSITIVE_KEY = re.compile(
    r"passw(?:or)?d|passphrase|pwd|secret|token|api[_-]?key|apikey|private[_-]?key"
    r"|credential|authorization|cookie|access[_-]?key|signing[_-]?key|session[_-]?key",
    re.IGNORECASE,
)

# A key name inside free text: `password=…`, `DB_PASSWORD: …`, `"api_key": "…"`.
_KEY_NAME = (
    r"[\w.-]*(?:passw(?:or)?d|passphrase|pwd|secret|token|api[_-]?key|apikey|private[_-]?key"
    r"|credentials?|authorization|access[_-]?key|signing[_-]?key)[\w.-]*"
)
_ASSIGNMENT = re.compile(
    r"(?P<key>(?<![\w.-])" + _KEY_NAME + r")(?P<sep>[\"']?\s*[=:]\s*)"
    r"(?P<scheme>(?:Bearer|Basic|Token)\s+)?"
    r"(?P<value>\"(?:[^\"\\]|\\.)*\"?|'(?:[^'\\]|\\.)*'?|[^\s&\"';]+)",
    re.IGNORECASE,
)

_PRIVATE_KEY = re.compile(
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?"
    r"(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
    re.DOTALL,
)
_URL_CREDENTIALS = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^/\s:@]+:)[^/\s@]+(?P<at>@)", re.I)
_TOKENS = re.compile(
    "|".join(
        (
            r"xox[abposre]-[A-Za-z0-9-]+",  # Slack bot / user / app-level tokens
            r"xapp-[A-Za-z0-9-]+",
            r"gh[pousr]_[A-Za-z0-9]{10,}",  # GitHub
            r"github_pat_[A-Za-z0-9_]{10,}",
            r"(?:AKIA|ASIA)[0-9A-Z]{16}",  # AWS access key ids
            r"(?<![A-Za-z0-9])sk-[A-Za-z0-9_-]{16,}",  # OpenAI / Anthropic style
            r"(?<![A-Za-z0-9])[rs]k_(?:live|test)_[A-Za-z0-9]{10,}",  # Stripe
            r"AIza[0-9A-Za-z_-]{30,}",  # Google API keys
            r"glpat-[A-Za-z0-9_-]{16,}",  # GitLab
            r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*",  # JWT
            r"https://hooks\.slack\.com/(?:services|workflows)/[A-Za-z0-9/_-]+",
        )
    )
)
_BEARER = re.compile(r"(?P<scheme>\bBearer\s+)[A-Za-z0-9._~+/-]+=*", re.IGNORECASE)
_BASIC = re.compile(r"(?P<scheme>\bBasic\s+)[A-Za-z0-9+/]{8,}=*")

#: Argument values shorter than this are not scrubbed out of free text (too many false hits).
MIN_SCRUB_LEN = 3


def is_sensitive_key(name: object) -> bool:
    """Whether an argument named `name` holds a secret by its name (password, token, api_key, …)."""
    return bool(_SENSITIVE_KEY.search(str(name)))


def mask_value(value: Any) -> Any:
    """Mask a whole value: every leaf becomes `MASK`; dict keys and list shapes are kept."""
    if isinstance(value, Mapping):
        return _map_keys({k: mask_value(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return [mask_value(v) for v in value]
    return MASK


def _assignment(match: re.Match[str]) -> str:
    if match.group("value").strip("\"'") == MASK:
        return match.group(0)
    return match.group("key") + match.group("sep") + (match.group("scheme") or "") + MASK


def mask_text(text: str, *, hide: Iterable[str] = ()) -> str:
    """Mask token-like values and `key=value` secrets in free text; also blank out each of `hide`.

    `hide` holds literal values known to be secret (the argument values of a
    `secret` request); their JSON-escaped forms are hidden too.
    """
    out = _PRIVATE_KEY.sub(f"[private key {MASK}]", text)
    out = _URL_CREDENTIALS.sub(lambda m: m.group("head") + MASK + m.group("at"), out)
    out = _TOKENS.sub(MASK, out)
    out = _BEARER.sub(lambda m: m.group("scheme") + MASK, out)
    out = _BASIC.sub(lambda m: m.group("scheme") + MASK, out)
    out = _ASSIGNMENT.sub(_assignment, out)
    literals: set[str] = set()
    for value in hide:
        if len(value) >= MIN_SCRUB_LEN:
            literals.add(value)
            literals.add(json.dumps(value, ensure_ascii=False)[1:-1])
            literals.add(json.dumps(value)[1:-1])
    for literal in sorted(literals, key=len, reverse=True):
        if len(literal) >= MIN_SCRUB_LEN:
            out = out.replace(literal, MASK)
    return out


def mask_arguments(arguments: Mapping[str, Any], sensitivity: str) -> dict[str, Any]:
    """A copy of `arguments` safe to show: every value masked under `secret` sensitivity;
    otherwise values of sensitive-looking keys masked and token-like strings masked, recursively.
    """
    return _map_keys(
        {k: _mask_item(k, v, secret=sensitivity == "secret") for k, v in arguments.items()}
    )


def _mask_item(key: object, value: Any, *, secret: bool) -> Any:
    if secret or is_sensitive_key(key):
        return mask_value(value)
    return _mask_nested(value)


def _mask_nested(value: Any) -> Any:
    if isinstance(value, str):
        return mask_text(value)
    if isinstance(value, Mapping):
        return _map_keys({k: _mask_item(k, v, secret=False) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return [_mask_nested(v) for v in value]
    if value is None or isinstance(value, bool | int | float):
        return value
    return mask_text(str(value))


def _map_keys(masked: dict[Any, Any]) -> dict[str, Any]:
    """Mask token-like dict keys too, keeping keys distinct when two mask to the same text."""
    out: dict[str, Any] = {}
    for key, value in masked.items():
        name = mask_text(str(key))
        unique, n = name, 1
        while unique in out:
            n += 1
            unique = f"{name} ({n})"
        out[unique] = value
    return out


def hidden_values(arguments: Mapping[str, Any], sensitivity: str) -> list[str]:
    """Argument values that must not appear in free text (the prompt, the command, a reason):
    all of them under `secret` sensitivity, else those under sensitive-looking keys.
    """
    if sensitivity == "secret":
        return secret_values(arguments)
    found: list[str] = []
    stack: list[Any] = [arguments]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            for key, value in item.items():
                if is_sensitive_key(key):
                    found += secret_values(value)
                else:
                    stack.append(value)
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return found


def secret_values(value: Any) -> list[str]:
    """Every leaf of `value` as text (dict keys excluded), for `mask_text(..., hide=...)`."""
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
        elif item is None or isinstance(item, bool):
            continue
        else:
            found.append(str(item))
    return found
