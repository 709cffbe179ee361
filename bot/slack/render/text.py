"""Text for Slack mrkdwn: escaping and cutting to a limit (pure), shared by the renderers."""

from __future__ import annotations

_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def escape(text: str) -> str:
    """Escape text for Slack mrkdwn (`&` first, so no entity is escaped twice)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def clip(text: str, limit: int, ellipsis: str = "…") -> str:
    """Plain text cut to at most `limit` characters."""
    return text if len(text) <= limit else text[: limit - len(ellipsis)] + ellipsis


def clip_escaped(raw: str, limit: int, ellipsis: str = "…") -> str:
    """`raw` escaped for mrkdwn and cut so the result fits `limit`, never inside an entity."""
    escaped = escape(raw)
    if len(escaped) <= limit:
        return escaped
    budget, used, out = limit - len(ellipsis), 0, []
    for ch in raw:
        piece = _ESCAPES.get(ch, ch)
        if used + len(piece) > budget:
            break
        out.append(piece)
        used += len(piece)
    return "".join(out) + ellipsis
