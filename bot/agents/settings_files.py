"""The agents' hook settings: reading, recognising and merging approval-bot's hook entries.

`settings_path` says where an agent's entries go, `merge` merges approval-bot's hook into a
file (never replacing it: other keys and hooks stay, ours is updated in place, twice changes
nothing), and `write_with_backup` keeps the old file as `<file>.<UTC time>.bak`. `bot_wait` is
the timeout rule, in one place. Only the standard library (and `bot.cli.durations`) is
imported: the CLI imports this module to build its parser. The files and the rule:
docs/ARCHITECTURE.md, "Agent setup".
"""

from __future__ import annotations

import copy
import difflib
import json
import math
import os
import shlex
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

from bot.cli.durations import duration

Agent = Literal["claude-code", "codex"]
Scope = Literal["project", "local", "user"]
HookType = Literal["command", "http"]

AGENTS: tuple[Agent, ...] = ("claude-code", "codex")
EVENTS = ("PreToolUse", "PermissionRequest")
#: What each agent uses when a hook entry has no `timeout` (Claude Code 2.1.197 and
#: Codex 0.171.0 both: 600 s for a command hook; Claude Code's http hook too).
AGENT_DEFAULT_TIMEOUT = 600.0
#: The shortest hook timeout setup writes; the bot then waits 5 s.
MIN_AGENT_TIMEOUT = 10.0
MIN_MARGIN_SECONDS = 5.0
MAX_MARGIN_SECONDS = 30.0
DEFAULT_MATCHER: dict[Agent, str] = {
    "claude-code": "Bash|Edit|Write|MultiEdit|NotebookEdit|mcp__.*",
    "codex": "Bash|apply_patch|mcp__.*",
}
DEFAULT_TOKEN_VARIABLE = "APPROVALS_TOKEN"
#: `coding_agents.ON_TIMEOUT`, spelled out to keep this module's imports light (a test keeps
#: the two equal).
ON_TIMEOUT_CHOICES = ("deny", "ask", "defer")
STATUS_MESSAGE = "Waiting for approval in Slack"
HTTP_HOOK_PATH = "/hooks/claude-code"


class SetupError(Exception):
    """Setup cannot go on (unreadable settings, bad option); nothing was written."""


# -- the timeout rule --------------------------------------------------------------------------


def margin(agent_timeout: float) -> float:
    """How much earlier than the agent's hook `timeout` the bot answers."""
    return min(MAX_MARGIN_SECONDS, max(MIN_MARGIN_SECONDS, agent_timeout * 0.1))


def bot_wait(agent_timeout: float) -> float:
    """The command's `--timeout` / the http `?timeout=` for a hook `timeout` of `agent_timeout`."""
    if agent_timeout < MIN_AGENT_TIMEOUT:
        raise SetupError(
            f"a hook timeout of {agent_timeout:g} s is too short: use at least "
            f"{MIN_AGENT_TIMEOUT:g} s (the bot answers {MIN_MARGIN_SECONDS:g} s before it)"
        )
    # Rounded down to 0.1 s: the written number never ends up above the rule.
    return math.floor((agent_timeout - margin(agent_timeout)) * 10) / 10


def consistent(wait: float, agent_timeout: float) -> bool:
    """True when the bot, waiting `wait` seconds, answers comfortably before the agent gives up."""
    return wait <= agent_timeout - MIN_MARGIN_SECONDS


def format_seconds(value: float) -> str:
    """`570`, `5.4`: every digit kept (`:g` would round 123456.7 up to 123457)."""
    return f"{value:.1f}".removesuffix(".0")


# -- recognising our hooks -------------------------------------------------------------------


@dataclass(frozen=True)
class HookRef:
    """One hook handler found in a settings file, as far as the bot cares."""

    file: Path
    event: str
    matcher: str | None
    handler: dict[str, Any]
    ours: bool
    kind: str  # "command" | "http" | other
    wait: float | None  # the bot's wait (`--timeout` / `?timeout=`), None when not given
    on_timeout: str | None
    agent_timeout: float | None  # the handler's `timeout`, None when not given


def _command_args(command: str) -> list[str] | None:
    try:
        return shlex.split(command)
    except ValueError:
        return None


def command_is_ours(command: str, agent: Agent) -> bool:
    """`…approval-bot hook <agent> …` (any path to the executable)."""
    words = _command_args(command) or []
    for i, word in enumerate(words[:-2]):
        if Path(word).name == "approval-bot" and words[i + 1 : i + 3] == ["hook", agent]:
            return True
    return False


def _option(words: list[str], name: str) -> str | None:
    for i, word in enumerate(words):
        if word == name and i + 1 < len(words):
            return words[i + 1]
        if word.startswith(name + "="):
            return word.split("=", 1)[1]
    return None


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return duration(text)
    except Exception:
        return None


def inspect_handler(
    file: Path, event: str, matcher: str | None, handler: Any, agent: Agent
) -> HookRef:
    """Describe one handler of a settings file's `hooks.<event>[].hooks[]`."""
    if not isinstance(handler, dict):
        return HookRef(file, event, matcher, {}, False, "invalid", None, None, None)
    kind = str(handler.get("type", ""))
    raw_timeout = handler.get("timeout")
    agent_timeout = (
        float(raw_timeout)
        if isinstance(raw_timeout, int | float) and not isinstance(raw_timeout, bool)
        else None
    )
    ours, wait, on_timeout = False, None, None
    if kind == "command" and isinstance(handler.get("command"), str):
        command = handler["command"]
        ours = command_is_ours(command, agent)
        if ours:
            words = _command_args(command) or []
            wait = _number(_option(words, "--timeout"))
            on_timeout = _option(words, "--on-timeout") or "deny"
    elif kind == "http" and isinstance(handler.get("url"), str) and agent == "claude-code":
        parts = urlsplit(handler["url"])
        ours = parts.path.rstrip("/").endswith(HTTP_HOOK_PATH)
        if ours:
            query = parse_qs(parts.query)
            wait = _number(query.get("timeout", [None])[0])
            on_timeout = query.get("on_timeout", ["deny"])[0]
    return HookRef(file, event, matcher, handler, ours, kind, wait, on_timeout, agent_timeout)


def hook_refs(file: Path, data: Any, agent: Agent) -> Iterator[HookRef]:
    """Every PreToolUse / PermissionRequest handler in a loaded settings document."""
    hooks = data.get("hooks") if isinstance(data, dict) else None
    if not isinstance(hooks, dict):
        return
    for event in EVENTS:
        groups = hooks.get(event)
        if not isinstance(groups, list):
            continue
        for group in groups:
            if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
                continue
            matcher = group.get("matcher") if isinstance(group.get("matcher"), str) else None
            for handler in group["hooks"]:
                yield inspect_handler(file, event, matcher, handler, agent)


# -- files -----------------------------------------------------------------------------------


def settings_path(agent: Agent, scope: Scope, project: Path, home: Path, codex_home: Path) -> Path:
    if agent == "claude-code":
        if scope == "project":
            return project / ".claude" / "settings.json"
        if scope == "local":
            return project / ".claude" / "settings.local.json"
        return home / ".claude" / "settings.json"
    if scope == "project":
        return project / ".codex" / "hooks.json"
    if scope == "local":
        raise SetupError("codex has no 'local' scope: use --scope user or --scope project")
    return codex_home / "hooks.json"


def read_settings(path: Path) -> tuple[str, dict[str, Any]]:
    """The file's text and its JSON object ("" and {} when it does not exist)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return "", {}
    except OSError as e:
        raise SetupError(f"cannot read {path}: {e.strerror or e}") from e
    if not text.strip():
        return text, {}
    try:
        data = json.loads(text)
    except ValueError as e:
        raise SetupError(f"{path} is not valid JSON ({e}); nothing was written") from e
    if not isinstance(data, dict):
        raise SetupError(f"{path} must hold a JSON object; nothing was written")
    return text, data


def render(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def diff(old: str, new: str, path: Path) -> str:
    return "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True),
            new.splitlines(keepends=True),
            fromfile=f"{path} (before)" if old else "/dev/null",
            tofile=str(path),
        )
    )


def write_with_backup(path: Path, old: str, new: str, now: datetime | None = None) -> Path | None:
    """Write `new` to `path` atomically; copy an existing file aside first. The backup's path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    backup = None
    if path.exists():
        stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%S%fZ")
        backup = path.with_name(f"{path.name}.{stamp}.bak")
        shutil.copy2(path, backup)
    tmp = path.with_name(f".{path.name}.approval-bot.tmp")
    tmp.write_text(new, encoding="utf-8")
    if backup is not None:
        shutil.copymode(backup, tmp)
    os.replace(tmp, path)
    return backup


# -- the plan ---------------------------------------------------------------------------------


@dataclass
class HookSpec:
    """What setup installs."""

    agent: Agent
    event: str = "PreToolUse"
    hook_type: HookType = "command"
    matcher: str | None = None
    timeout: float = AGENT_DEFAULT_TIMEOUT  # the agent's hook timeout
    on_timeout: str = "deny"
    executable: str = "approval-bot"
    url: str | None = None  # http: the bot's base URL
    token_variable: str = DEFAULT_TOKEN_VARIABLE
    on_failure_block: bool = False  # Claude Code 2.1.295+: `"onFailure": "block"`
    notes: list[str] = field(default_factory=list)

    @property
    def wait(self) -> float:
        return bot_wait(self.timeout)

    def handler(self) -> dict[str, Any]:
        wait = format_seconds(self.wait)
        extra = {"onFailure": "block"} if self.on_failure_block else {}
        if self.hook_type == "http":
            if not self.url:
                raise SetupError("an http hook needs the bot's URL: --url or APPROVALS_URL")
            base = self.url.rstrip("/")
            query = f"timeout={wait}&on_timeout={self.on_timeout}"
            return {
                "type": "http",
                "url": f"{base}{HTTP_HOOK_PATH}?{query}",
                "headers": {"Authorization": f"Bearer ${self.token_variable}"},
                "allowedEnvVars": [self.token_variable],
                "timeout": _timeout_value(self.timeout),
                **extra,
            }
        command = " ".join(
            [
                shlex.quote(self.executable),
                "hook",
                self.agent,
                "--timeout",
                wait,
                "--on-timeout",
                self.on_timeout,
            ]
        )
        handler: dict[str, Any] = {
            "type": "command",
            "command": command,
            "timeout": _timeout_value(self.timeout),
            **extra,
        }
        if self.agent == "codex":
            handler["statusMessage"] = STATUS_MESSAGE
        return handler


def _timeout_value(seconds: float) -> int | float:
    return int(seconds) if float(seconds).is_integer() else seconds


def merge(data: dict[str, Any], spec: HookSpec) -> dict[str, Any]:
    """`data` with the approval-bot hook of `spec` in place: an existing one (of either type,
    under either event) is replaced where it is; otherwise a new matcher group is appended.
    Other keys, events and hooks are kept in their order."""
    merged: dict[str, Any] = copy.deepcopy(data)
    hooks = merged.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise SetupError("the settings' 'hooks' is not an object; fix it first")
    matcher = spec.matcher or DEFAULT_MATCHER[spec.agent]
    new_handler = spec.handler()
    placed = False
    for event in EVENTS:
        groups = hooks.get(event)
        if groups is None:
            continue
        if not isinstance(groups, list):
            raise SetupError(f"the settings' 'hooks.{event}' is not a list; fix it first")
        kept_groups = []
        for group in groups:
            if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
                kept_groups.append(group)
                continue
            handlers = group["hooks"]
            ours = [inspect_handler(Path(), event, None, h, spec.agent).ours for h in handlers]
            if not any(ours):
                kept_groups.append(group)
                continue
            others = [h for h, mine in zip(handlers, ours, strict=True) if not mine]
            if event != spec.event or placed:
                if others:
                    kept_groups.append({**group, "hooks": others})
                continue
            placed = True
            if not others:
                kept_groups.append({**group, "matcher": matcher, "hooks": [new_handler]})
            elif group.get("matcher") == matcher:  # shared: ours replaced where it was
                first = ours.index(True)
                kept = [
                    new_handler if i == first else h
                    for i, h in enumerate(handlers)
                    if i == first or not ours[i]
                ]
                kept_groups.append({**group, "hooks": kept})
            else:  # shared under another matcher: leave the others, ours in its own group
                kept_groups.append({**group, "hooks": others})
                kept_groups.append({"matcher": matcher, "hooks": [new_handler]})
        if kept_groups:
            hooks[event] = kept_groups
        else:
            del hooks[event]
    if not placed:
        hooks.setdefault(spec.event, []).append({"matcher": matcher, "hooks": [new_handler]})
    return merged


@dataclass
class Change:
    path: Path
    old: str
    new: str

    @property
    def changed(self) -> bool:
        return self.old != self.new

    def diff(self) -> str:
        return diff(self.old, self.new, self.path)


def plan(path: Path, spec: HookSpec) -> Change:
    old, data = read_settings(path)
    merged = merge(data, spec)
    new = render(merged)
    if merged == data and old:
        new = old  # already in place: leave the file byte for byte
    return Change(path, old, new)
