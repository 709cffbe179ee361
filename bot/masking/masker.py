"""Masking secrets before anything reaches Slack: texts, argument trees, and whole payloads.

The rules that recognise a secret live in `bot.masking.rules`; this module applies them. The
renderers mask with what they know of a request (`mask_arguments`, `hidden_values`,
`mask_text`); `outbound(payload)` is the one entry point every payload bound for Slack
passes, and a `Masked` message (made only by `bot.slack.render.request_message`) passes as
drawn. A masked value keeps its place and shows its length class only: `••••••(16-31 chars)`.
The layers, the caches and why: docs/ARCHITECTURE.md, "Masking".
"""

from __future__ import annotations

import bisect
import functools
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from bot.masking.rules import RULES, find, is_secret_name, normalise

MASK = "••••••"
#: A mask as `masked()` writes it (or a bare `MASK`): never masked again.
_MASKED = re.compile(r"••••••(?:\((?:\d+-\d+|\d+\+) chars\))?")
_LENGTH_CLASSES = ((7, "1-7"), (15, "8-15"), (31, "16-31"), (63, "32-63"))

#: Literal values shorter than this are not scrubbed out of free text (too many false hits).
MIN_SCRUB_LEN = 3

#: Payload keys that carry our own ids, not text (left exactly as they are by `outbound`).
STRUCTURAL_KEYS = frozenset(
    {
        "type", "action_id", "block_id", "callback_id", "private_metadata", "trigger_id",
        "channel", "ts", "thread_ts", "user", "users", "view_id", "external_id", "hash",
        "style", "response_action", "event_type", "emoji",
    }
)  # fmt: skip


def length_class(length: int) -> str:
    for upper, label in _LENGTH_CLASSES:
        if length <= upper:
            return label
    return "64+"


def masked(length: int) -> str:
    """What a secret of `length` characters becomes: `••••••(8-15 chars)`."""
    return f"{MASK}({length_class(max(1, length))} chars)"


def is_sensitive_key(name: object) -> bool:
    """Whether an argument named `name` holds a secret by its name (password, token, api_key, …)."""
    return is_secret_name(str(name))


# ---------------------------------------------------------------- text


#: `mask_text` keeps this many recent answers (a request's texts are masked again for each
#: message, update, reminder and App Home view of it; Block Kit's fixed labels every time).
CACHE_SIZE = 4096
#: Texts longer than this are masked afresh each time (a cache of big texts would hold a lot).
CACHE_MAX_LEN = 4096


#: Large texts' answers are kept too, up to this many characters of texts in all: a large
#: request is masked once (its post, update, reminders and App Home view ask again).
LARGE_CACHE_CHARS = 16 * 1024 * 1024
#: A request whose texts hold more characters than this is drawn off the event loop
#: (`payload_chars`; `bot.slack.delivery.dispatcher`).
LARGE_REQUEST_CHARS = 32 * 1024


class _LargeCache:
    """Answers for large texts, least recently used first out, bounded by the characters of
    their keys (`LARGE_CACHE_CHARS`). Safe from several threads (one lock)."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.used = 0
        self.items: OrderedDict[Any, tuple[Any, int]] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: Any, make: Callable[[], Any]) -> Any:
        with self.lock:
            if key in self.items:
                self.items.move_to_end(key)
                return self.items[key][0]
        value = make()
        size = payload_chars(key)
        if size > self.budget:
            return value
        with self.lock:
            if key not in self.items:
                self.items[key] = (value, size)
                self.used += size
            while self.used > self.budget:
                _, (_, dropped) = self.items.popitem(last=False)
                self.used -= dropped
        return value

    def clear(self) -> None:
        with self.lock:
            self.items.clear()
            self.used = 0


_LARGE = _LargeCache(LARGE_CACHE_CHARS)


def payload_chars(value: Any) -> int:
    """Characters of the strings in `value` (dicts' keys and values, lists, tuples): what
    masking it reads. No regular expression: a walk."""
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return total


def mask_text(text: str, *, hide: Iterable[str] = ()) -> str:
    """`text` with every secret the rules find masked, and each of `hide` (values known to be
    secret, also in their JSON-escaped forms) blanked out. Matching runs on the normalised
    text (NFKC, zero-width characters removed); everything not masked is kept as it was,
    but bidi controls (`strip_bidi`).

    A pure function of (`text`, `hide`): answers for short texts come from a bounded cache
    (`CACHE_SIZE`), which holds only what this process already holds (the requests it
    renders) and is never shared."""
    hidden = hide if isinstance(hide, tuple) else tuple(hide)
    if len(text) > CACHE_MAX_LEN or sum(map(len, hidden)) > CACHE_MAX_LEN:
        answer: str = _LARGE.get(("text", text, hidden), lambda: _mask_text(text, hidden))
        return answer
    return _mask_text_cached(text, hidden)


def hidden_in(text: str, *, hide: Iterable[str] = ()) -> tuple[str, ...]:
    """What masking `text` would hide (normalised): each piece the rules find, and each of
    `hide` found in it. A text drawn from `text` (a command's parsed view, a risk line) is
    masked with these too, so what the command shows masked is never shown plain beside it.
    Cached as `mask_text` is (a request is drawn again for its update, App Home, …)."""
    hidden = hide if isinstance(hide, tuple) else tuple(hide)
    if len(text) > CACHE_MAX_LEN or sum(map(len, hidden)) > CACHE_MAX_LEN:
        found: tuple[str, ...] = _LARGE.get(("hidden", text, hidden), lambda: _hidden(text, hidden))
        return found
    return _hidden_cached(text, hidden)


def _hidden(text: str, hide: tuple[str, ...]) -> tuple[str, ...]:
    norm, _ = normalise(text)
    found = [norm[start:end] for start, end, _ in find(norm)]
    found += [literal for literal in _literals(hide) if literal in norm]
    return tuple(dict.fromkeys(found))


_hidden_cached = functools.lru_cache(maxsize=CACHE_SIZE)(_hidden)


#: A run of this many characters of a hidden secret (or of its letters and digits) shown in
#: a text drawn from it counts as showing it (`shows_piece_of`).
PIECE = 8


def shows_piece_of(text: str, secrets: Iterable[str]) -> bool:
    """Whether `text`, a text drawn from one that held `secrets` (a risk line, a parsed view),
    shows a piece of one: `PIECE` characters of it in a row (a secret cut short, as a risk
    line names a path in 60 characters, is no longer one the rules find), or `PIECE` of its
    letters and digits in a row with other characters between them (a parsed view splits
    `-pHunter2Secret` into `-p -H -u -n -t …`). Linear in the texts' lengths."""
    norm = normalise(text)[0]
    letters = _letters(norm)
    shown = {norm[i : i + PIECE] for i in range(len(norm) - PIECE + 1)}
    spelled = {letters[i : i + PIECE] for i in range(len(letters) - PIECE + 1)}
    for secret in secrets:
        value = normalise(secret)[0]
        if any(value[i : i + PIECE] in shown for i in range(len(value) - PIECE + 1)):
            return True
        squashed = _letters(value)
        if any(squashed[i : i + PIECE] in spelled for i in range(len(squashed) - PIECE + 1)):
            return True
    return False


def _letters(text: str) -> str:
    return "".join(ch for ch in text if ch.isalnum())


#: Bidi embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069): in Slack text they
#: would make `exe.txt` of `txt.exe`, a tool name read backwards. Every string `mask_text`
#: gives back (so every agent-given string a renderer draws, and every payload `outbound`
#: sends) is without them.
_BIDI = dict.fromkeys([*range(0x202A, 0x202F), *range(0x2066, 0x206A)])


def strip_bidi(text: str) -> str:
    """`text` without bidi embeddings, overrides and isolates (`_BIDI`)."""
    return text if text.isascii() else text.translate(_BIDI)


def _mask_text(text: str, hide: tuple[str, ...], *, keep_lines: bool = False) -> str:
    return strip_bidi(_mask_spans(text, hide, keep_lines=keep_lines))


def _mask_spans(text: str, hide: tuple[str, ...], *, keep_lines: bool = False) -> str:
    norm, where = normalise(text)
    spans = [(start, end) for start, end, _ in find(norm)]
    for literal in _literals(hide):
        at = norm.find(literal)
        while at != -1:
            spans.append((at, at + len(literal)))
            at = norm.find(literal, at + len(literal))
    if not spans:
        return text
    kept = [m.span() for m in _MASKED.finditer(norm)]
    out: list[str] = []
    done = 0  # index into `text` copied so far
    for start, end in _merge(_outside(spans, kept)):
        begin = start if where is None else where[start]
        stop = end if where is None else where[end - 1] + 1
        if begin < done:
            continue
        out.append(text[done:begin])
        out.append(masked(end - start))
        if keep_lines:  # the lines a mask covers stay, empty, so the line count holds
            out.append("\n" * text.count("\n", begin, stop))
        done = stop
    out.append(text[done:])
    return "".join(out)


def mask_lines(lines: list[str], prefixes: list[str], *, hide: Iterable[str] = ()) -> list[str]:
    """`lines` masked as one text (a secret spread over several is found whole), each put
    back behind its `prefix` (a diff's `+`, `-`, ` `), so a prefix never joins the text it
    stands before (a `+` before a base64 key would hide its start from the rules). A mask
    stands on the first line of what it covers; the other lines it covers are left empty.

    The lines are then read once more with their prefixes, as a whole-message scan reads
    them (a `-` before a word looks like a command-line flag, `-pass VALUE`): what either
    reading finds is masked."""
    hidden = tuple(hide)
    text = "\n".join(lines)
    shown = _mask_text(text, hidden, keep_lines=True).split("\n")
    prefixed = "\n".join(p + line for p, line in zip(prefixes, shown, strict=True))
    return _mask_text(prefixed, hidden, keep_lines=True).split("\n")


_mask_text_cached = functools.lru_cache(maxsize=CACHE_SIZE)(_mask_text)


def clear_cache() -> None:
    """Forget every cached answer (benchmarks measure masking afresh with it)."""
    _mask_text_cached.cache_clear()
    _hidden_cached.cache_clear()
    _spread_texts_cached.cache_clear()
    _LARGE.clear()
    is_secret_name.cache_clear()


def _literals(hide: Iterable[str]) -> list[str]:
    found: set[str] = set()
    for value in hide:
        norm = normalise(value)[0]
        for form in (norm, json.dumps(norm, ensure_ascii=False)[1:-1], json.dumps(norm)[1:-1]):
            if len(form) >= MIN_SCRUB_LEN:
                found.add(form)
    return sorted(found, key=len, reverse=True)


def _outside(spans: list[tuple[int, int]], kept: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """`spans` minus the parts that are masks already (whatever is left still gets masked).
    `kept` is sorted and its parts do not overlap (matches of one pattern): after merging
    `spans`, each part of `kept` is passed over at most once per span it overlaps, and the
    merged spans do not overlap, so this runs in O((spans + kept) log kept)."""
    if not kept:
        return spans
    ends = [k_end for _, k_end in kept]
    out: list[tuple[int, int]] = []
    for start, end in _merge(spans):
        i = bisect.bisect_right(ends, start)  # the first kept part ending after `start`
        s = start
        while i < len(kept) and kept[i][0] < end:
            k_start, k_end = kept[i]
            if s < k_start:
                out.append((s, k_start))
            s = max(s, k_end)
            i += 1
        if s < end:
            out.append((s, end))
    return out


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


# ---------------------------------------------------------------- argument trees


def mask_value(value: Any) -> Any:
    """Mask a whole value: each leaf becomes `masked(length)`; dict keys and list shapes stay."""
    if isinstance(value, Mapping):
        return _map_keys({k: mask_value(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return [mask_value(v) for v in value]
    text = json.dumps(value) if value is None or isinstance(value, bool) else str(value)
    return masked(len(text))


def mask_arguments(arguments: Mapping[str, Any], sensitivity: str) -> dict[str, Any]:
    """A copy of `arguments` safe to show: every value masked under `secret` sensitivity;
    otherwise values of secret-named keys masked and secrets in strings masked, at any depth,
    and whole the strings a secret spreads over (`spread_values`: a private key one line
    per list item, or split over sibling arguments)."""
    if sensitivity == "secret":
        return _map_keys({k: mask_value(v) for k, v in arguments.items()})
    spread = spread_values(arguments)
    return _map_keys({k: _mask_item(k, v, spread) for k, v in arguments.items()})


def _mask_item(key: object, value: Any, spread: frozenset[str]) -> Any:
    if is_sensitive_key(key):
        return mask_value(value)
    return _mask_nested(value, spread)


def _mask_nested(value: Any, spread: frozenset[str]) -> Any:
    if isinstance(value, str):
        return masked(len(value)) if value in spread else mask_text(value)
    if isinstance(value, Mapping):
        return _map_keys({k: _mask_item(k, v, spread) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return [_mask_nested(v, spread) for v in value]
    if value is None or isinstance(value, bool | int | float):
        return value
    return mask_text(str(value))


def spread_values(arguments: Mapping[str, Any]) -> frozenset[str]:
    """The argument strings a secret spreads over when they are read in order, one after
    the other — a private key one line per list item or split over sibling arguments
    (`{"head": "-----BEGIN …", "body": "MIIE…", "tail": "-----END …"}`) — each of which
    alone may show nothing the rules find. Every string outside secret-named keys, depth
    first, in order."""
    texts: list[str] = []
    stack: list[Any] = [arguments]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(item, Mapping):
            stack.extend(reversed([v for k, v in item.items() if not is_sensitive_key(k)]))
        elif isinstance(item, list | tuple):
            stack.extend(reversed(item))
    if len(texts) < 2:
        return frozenset()
    if sum(map(len, texts)) > CACHE_MAX_LEN:
        key = tuple(texts)
        spread: frozenset[str] = _LARGE.get(("spread", key), lambda: _spread_texts(key))
        return spread
    return _spread_texts_cached(tuple(texts))


def _spread_texts(texts: tuple[str, ...]) -> frozenset[str]:
    return frozenset(texts[i] for i in _spread_secrets(list(texts)))


_spread_texts_cached = functools.lru_cache(maxsize=CACHE_SIZE)(_spread_texts)


#: The rules a secret cut anywhere is looked for with, its pieces joined as they are: a
#: private key (its header line may be cut too). Token rules are not: joined as they are,
#: a token would run on into the next harmless item ("Bearer abc" + "Accept: json").
_UNCUT_RULES = tuple(r for r in RULES if r.name == "pem_private_key")


def _spread_secrets(items: list[Any]) -> list[int]:
    """Indices of the string items a secret spreads over: read one after the other, joined by
    a line break (a PEM key one line per item; every rule) and joined as they are (a private
    key cut anywhere, its header line included: `_UNCUT_RULES`); and the items that hold a
    secret only the item before them tells (`--password`, then the password)."""
    texts = [(i, normalise(v)[0]) for i, v in enumerate(items) if isinstance(v, str)]
    if len(texts) < 2:
        return []
    spread: set[int] = set()
    for joint, rules in (("\n", RULES), ("", _UNCUT_RULES)):
        starts, stops, at = [], [], 0
        for _, text in texts:
            starts.append(at)
            at += len(text) + len(joint)
            stops.append(at)  # an item's text and the joint after it
        found = sorted(
            (start, end) for start, end, _ in find(joint.join(t for _, t in texts), rules)
        )
        for start, end in _overlapping(found):
            # The items the span touches: one bisection, then each item once (the spans
            # no longer overlap), so the whole is O((spans + items) log items).
            first = bisect.bisect_right(stops, start)
            last = bisect.bisect_left(starts, end)
            if last - first > 1:
                spread.update(texts[k][0] for k in range(first, last))
            elif last - first == 1 and not _found_alone(texts[first][1], start - starts[first]):
                # A secret within one item, told by the item before it: an argv list's
                # `["mysql", "--password", PW]`. The item alone shows nothing: hide it whole.
                spread.add(texts[first][0])
    return sorted(spread)


def _found_alone(text: str, at: int) -> bool:
    """Whether the rules find a secret at `at` in `text` read on its own."""
    return any(start <= at < end for start, end, _ in find(text))


def _overlapping(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted `spans` with those that overlap (not those that only touch) made one."""
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _map_keys(masked_items: dict[Any, Any]) -> dict[str, Any]:
    """Mask secret-looking dict keys too, keeping keys distinct when two mask to the same text."""
    out: dict[str, Any] = {}
    for key, value in masked_items.items():
        name = mask_text(str(key))
        unique, n = name, 1
        while unique in out:
            n += 1
            unique = f"{name} ({n})"
        out[unique] = value
    return out


def hidden_values(arguments: Mapping[str, Any], sensitivity: str) -> list[str]:
    """Argument values that must not appear in free text (the prompt, the command, a reason):
    all of them under `secret` sensitivity, else those under secret-named keys and the
    strings a secret spreads over (`spread_values`)."""
    if sensitivity == "secret":
        return secret_values(arguments)
    found: list[str] = list(spread_values(arguments))
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


# ---------------------------------------------------------------- the way out to Slack


def outbound(payload: Any) -> Any:
    """The one masking entry point for anything sent to Slack: every string in `payload`
    (a Web API call's arguments, a view, a response body) with every rule applied, except
    under `STRUCTURAL_KEYS` (our ids, channel ids, timestamps). Lists spread over items
    (a PEM key one line per item) are caught as in `mask_arguments`. A string never grows
    (a mask can be longer than what it hides): the renderer kept it within Slack's limits.
    A `Masked` message (drawn from masked pieces by `bot.slack.render.request_message`) is returned
    as it is."""
    if isinstance(payload, str):
        return _within(mask_text(payload), len(payload))
    kind = type(payload)
    if kind is Masked:
        return payload
    # A message is a few hundred plain dicts and lists: `type(...) is` first, since an
    # `isinstance` against the `Mapping` ABC costs several times as much.
    if kind is dict or (kind is not list and isinstance(payload, Mapping)):
        return {
            k: v if k in STRUCTURAL_KEYS and isinstance(v, str) else outbound(v)
            for k, v in payload.items()
        }
    if kind is list or isinstance(payload, list | tuple):
        items = [outbound(v) for v in payload]
        for i in _spread_secrets(list(payload)):
            items[i] = _within(masked(len(payload[i])), len(payload[i]))
        return items
    return payload


class Masked(dict[str, Any]):
    """A request message (`text`, `blocks`) that `bot.slack.render.request_message` drew from
    masked pieces only:
    every string an agent controls went through `mask_text` / `mask_arguments` with the
    request's hidden values, and everything else in it is ours (labels, ids, dates, Slack
    ids matched by pattern). `outbound` sends it as it is instead of scanning its strings
    again (~60 µs of a post's CPU). Only the renderers of `bot.slack.render.request_message` make
    one; the
    no-leak tests render every fake of the corpus in every field without `outbound`, and
    check that `Masked` is made nowhere else. A copy or merge (`|`, `dict(...)`, `{**m}`)
    is a plain dict again: scanned on the way out like any other payload."""

    __slots__ = ()


def _within(text: str, limit: int) -> str:
    """`text` cut to `limit` characters (ending in `…`) if it grew past it."""
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"
