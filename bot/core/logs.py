"""Log output of the entry point: one line per record, control characters escaped, text or JSON.

Any value a log line carries may come from an agent (a tool name, a reason); a newline in
it must not forge a second record. Both formats escape C0/C1 control characters, the
Unicode line and paragraph separators and bidi controls in the whole message (our own
format strings hold none). `LOG_FORMAT=json` writes one JSON object per line with the
event (the message before its first `key=value`), the request id, route and principal
when the message names them, and every other `key=value` field. Only `bot.cli.main`, the
entry point, calls `configure`.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

FORMATS = ("text", "json")

# C0 and C1 controls, DEL, line/paragraph separators, bidi embeddings/overrides/isolates.
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_FIELD = re.compile(r"(?<![\w.])([A-Za-z_][\w.]*)=(\S*)")


def escape(text: str) -> str:
    """`text` with every character that could break or disguise a log line escaped."""
    return _UNSAFE.sub(lambda m: _NAMED.get(m.group(), f"\\u{ord(m.group()):04x}"), text)


def _message(record: logging.LogRecord) -> str:
    try:
        if isinstance(record.args, tuple) and "tool" in str(record.msg):
            return str(record.msg) % tuple(_masked(a) for a in record.args)
        return record.getMessage()
    except Exception:  # a bad format string must not lose the record
        return f"{record.msg!r} {record.args!r}"


def _masked(value: object) -> object:
    """A record's argument with secrets masked (`bot.masking.masker.mask_text`), for the
    records that name a tool: an agent may glue a token into a tool name
    (`deploy_ghp_…`). Tool names repeat, so most are answered by the masker's cache."""
    if not isinstance(value, str):
        return value
    from bot.masking.masker import mask_text

    return mask_text(value)


class TextFormatter(logging.Formatter):
    """`asctime level logger message`, the message escaped; a traceback follows, indented."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        safe = logging.makeLogRecord(record.__dict__)
        safe.msg, safe.args = escape(_message(record)), None
        safe.exc_info, safe.exc_text, safe.stack_info = None, None, None
        line = super().format(safe)
        if record.exc_info:
            trace = self.formatException(record.exc_info)
            line += "\n" + "\n".join("    " + escape(t) for t in trace.splitlines())
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, event, request_id, route, principal,
    message and the message's other `key=value` fields."""

    def format(self, record: logging.LogRecord) -> str:
        message = _message(record)
        fields = dict(_FIELD.findall(message))
        first = _FIELD.search(message)
        event = (message[: first.start()] if first else message).strip()
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "event": escape(event),
            "request_id": fields.pop("id", None) or fields.pop("request_id", None),
            "route": fields.pop("route", None),
            "principal": fields.pop("principal", None),
            "message": escape(message),
        }
        for key in ("request_id", "route", "principal"):
            value = getattr(record, key, None)  # `extra=` wins over the text
            if value is not None:
                out[key] = str(value)
        out.update({k: escape(v) for k, v in fields.items() if k not in out})
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def configure(level: str, fmt: str = "text", stream: TextIO | None = None) -> None:
    """Route every record to `stream` (stderr) in `fmt`; replaces handlers set before."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
