"""`approval-bot setup … --check` (and `doctor`): is the agent's approval gate really on?

`check(agent, …)` reads the agent's settings and returns a `Report` of findings: an `error` is
a gate that fails open or is silently off, a `warning` a weaker gate, `unknown` what cannot be
verified from here (the verdict is then "unknown", never "on"). Given `Here`, it also checks
that the hook's command can start and whom it will ask (`bot.agents.hook_reach`). The timeout
rule itself lives in `bot.agents.settings_files` (`bot_wait`). Each finding and why:
docs/ARCHITECTURE.md, "Agent setup".
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO

from bot.agents import hook_reach
from bot.agents.settings_files import (
    AGENT_DEFAULT_TIMEOUT,
    MIN_AGENT_TIMEOUT,
    MIN_MARGIN_SECONDS,
    Agent,
    HookRef,
    SetupError,
    bot_wait,
    consistent,
    hook_refs,
    read_settings,
    settings_path,
)

Level = Literal["error", "unknown", "warning", "ok"]
Verdict = Literal["on", "off", "unknown"]
#: `setup --check`'s exit status for each verdict.
EXIT_CODES: dict[Verdict, int] = {"on": 0, "off": 1, "unknown": 3}


@dataclass(frozen=True)
class Here:
    """What `--check` sees of where the agent runs: its environment (`PATH`, the bot's
    variables), whether a `serve` runs an embedded Redis for the data directory, and how to
    ask a bot whether it takes a token (`bot.agents.hook_reach`)."""

    env: Mapping[str, str]
    embedded_running: Callable[[], str | None] = lambda: None
    probe: hook_reach.TokenProbe = hook_reach.probe_token


@dataclass(frozen=True)
class Finding:
    level: Level
    text: str


@dataclass
class Report:
    agent: Agent
    findings: list[Finding] = field(default_factory=list)

    def add(self, level: Level, text: str) -> None:
        self.findings.append(Finding(level, text))

    @property
    def ok(self) -> bool:
        return not any(f.level == "error" for f in self.findings)

    @property
    def errors(self) -> list[str]:
        return [f.text for f in self.findings if f.level == "error"]

    @property
    def warnings(self) -> list[str]:
        return [f.text for f in self.findings if f.level == "warning"]

    @property
    def unknowns(self) -> list[str]:
        return [f.text for f in self.findings if f.level == "unknown"]

    @property
    def verdict(self) -> Verdict:
        """`off` with any error; else `unknown` when something could not be verified."""
        if not self.ok:
            return "off"
        return "unknown" if self.unknowns else "on"

    def render(self) -> str:
        labels = {"error": "FAIL", "unknown": "????", "warning": "warn", "ok": "ok  "}
        lines = [f"{labels[f.level]} {f.text}" for f in self.findings]
        verdict = {
            "on": "the gate is on",
            "off": "the gate is NOT reliably on",
            "unknown": "unknown: the gate may be off; what could not be checked is marked ????",
        }[self.verdict]
        lines.append(f"{self.agent}: {verdict}")
        return "\n".join(lines)


def default_bot_wait(kind: str) -> float:
    """What the bot waits when the hook does not say (`--timeout` / `?timeout=` left out)."""
    from approvals.integrations.coding_agents import DEFAULT_HOOK_TIMEOUT

    return DEFAULT_HOOK_TIMEOUT


def _check_timeouts(report: Report, ref: HookRef, agent_name: str) -> None:
    agent_timeout = ref.agent_timeout if ref.agent_timeout is not None else AGENT_DEFAULT_TIMEOUT
    wait = ref.wait if ref.wait is not None else default_bot_wait(ref.kind)
    flag = "?timeout=" if ref.kind == "http" else "--timeout"
    if consistent(wait, agent_timeout):
        report.add(
            "ok",
            f"{ref.file}: {ref.event} {ref.kind} hook: the bot answers within {wait:g} s, "
            f"before the {agent_timeout:g} s hook timeout",
        )
        return
    try:
        suggestion = f"{flag}{'=' if ref.kind == 'http' else ' '}{bot_wait(agent_timeout):g}"
    except SetupError:
        suggestion = f"a hook timeout of at least {MIN_AGENT_TIMEOUT:g} s"
    said = "" if ref.wait is not None else f" ({flag} not given: the default)"
    where = f"{ref.file}: {ref.event} {ref.kind} hook"
    if wait > agent_timeout:
        report.add(
            "error",
            f"{where}: timeouts inconsistent — the bot may wait {wait:g} s{said} but "
            f"{agent_name} gives up after {agent_timeout:g} s and then runs the call; use "
            f"{suggestion} (or `approval-bot setup {report.agent}` to rewrite it)",
        )
    else:
        report.add(
            "warning",
            f"{where}: the bot may wait {wait:g} s{said}, under {MIN_MARGIN_SECONDS:g} s short "
            f"of {agent_name}'s {agent_timeout:g} s hook timeout: a slow start can lose the race "
            f"and the call runs; use {suggestion}",
        )


def _common(report: Report, refs: list[HookRef], agent_name: str, default_matcher: str) -> None:
    for ref in refs:
        _check_timeouts(report, ref, agent_name)
        if ref.on_timeout == "ask":
            what = (
                "Claude Code asks its user instead"
                if report.agent == "claude-code"
                else "the hook prints nothing and Codex's own approval policy decides"
            )
            report.add(
                "warning",
                f"{ref.file}: {ref.event}: on timeout {what} (--on-timeout deny blocks instead)",
            )
        if ref.on_timeout == "defer":
            report.add(
                "warning",
                f"{ref.file}: {ref.event}: on timeout the hook defers, which only headless "
                "`claude -p` honours; an interactive session (or a turn with several tool calls) "
                "ignores it and goes on with its normal permission flow",
            )
        matcher = ref.matcher or ""
        try:
            covers_bash = matcher in ("", "*") or re.fullmatch(matcher, "Bash") is not None
        except re.error:
            covers_bash = False
        if not covers_bash:
            report.add(
                "warning",
                f"{ref.file}: {ref.event}: the matcher {matcher!r} does not cover Bash "
                f"(default: {default_matcher!r})",
            )
    events = {ref.event for ref in refs}
    if len(events) > 1:
        report.add(
            "warning",
            "approval-bot hooks on both PreToolUse and PermissionRequest: one call may be "
            "asked about twice",
        )


def _load(report: Report, path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    try:
        return read_settings(path)[1]
    except SetupError as e:
        report.add("error", str(e))
        return None


#: The first Claude Code whose hook schema has `onFailure` (2.1.294's has not; measured).
ON_FAILURE_SINCE = (2, 1, 295)


def claude_version(claude: str | None = None) -> tuple[int, ...] | None:
    """`claude --version` as numbers (None when there is no `claude` or it says nothing usable)."""
    exe = claude or shutil.which("claude")
    if exe is None:
        return None
    try:
        done = subprocess.run(
            [exe, "--version"], capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"(\d+)\.(\d+)\.(\d+)", done.stdout)
    return tuple(int(n) for n in found.groups()) if found else None


def _check_on_failure(report: Report, ref: HookRef, claude: str | None) -> None:
    value = ref.handler.get("onFailure")
    since = ".".join(map(str, ON_FAILURE_SINCE))
    version = claude_version(claude)
    if value != "block":
        report.add("warning", f"{ref.file}: {ref.event}: onFailure is {value!r}, not 'block'")
    elif version is None:
        report.add(
            "warning",
            f"{ref.file}: {ref.event}: 'onFailure': 'block' works from Claude Code {since} on "
            "and is ignored before; `claude` is not on PATH to tell which one runs here",
        )
    elif version < ON_FAILURE_SINCE:
        shown = ".".join(map(str, version))
        report.add(
            "warning",
            f"{ref.file}: {ref.event}: 'onFailure' is ignored by Claude Code {shown} (it needs "
            f"{since} or later): a failing hook still lets the call through",
        )
    else:
        report.add("ok", f"{ref.file}: {ref.event}: onFailure 'block' (Claude Code {since}+)")


def check_claude_code(
    project: Path, home: Path, claude: str | None = None, *, here: Here | None = None
) -> Report:
    """Claude Code: user, project and local settings together, as Claude Code merges them.
    `claude`: the executable asked for its version (default: `claude` on PATH); `here`:
    also check that the hook starts and has a bot to ask."""
    report = Report("claude-code")
    refs: list[HookRef] = []
    settings_env: dict[str, str] = {}  # the settings' `env`, set for hooks too
    for scope in ("user", "project", "local"):
        path = settings_path("claude-code", scope, project, home, home)
        data = _load(report, path)
        if data is None:
            continue
        if isinstance(data.get("env"), dict):
            settings_env.update({k: str(v) for k, v in data["env"].items()})
        if data.get("disableAllHooks") is True:
            report.add("error", f"{path}: disableAllHooks is true: no hook runs at all")
        for ref in hook_refs(path, data, "claude-code"):
            if not ref.ours:
                continue
            refs.append(ref)
            if "onFailure" in ref.handler:
                _check_on_failure(report, ref, claude)
    if not refs:
        report.add(
            "error",
            "no approval-bot hook in ~/.claude/settings.json, .claude/settings.json or "
            ".claude/settings.local.json: Claude Code runs tools without asking the bot "
            "(`approval-bot setup claude-code`)",
        )
        return report
    for ref in refs:
        if ref.kind == "http":
            report.add(
                "warning",
                f"{ref.file}: {ref.event}: an http hook fails open: Claude Code runs the tool "
                "when the bot is unreachable, answers non-2xx or is slower than the hook "
                "timeout (`--type command` blocks in those cases)",
            )
    if {ref.event for ref in refs} == {"PermissionRequest"}:
        report.add(
            "warning",
            "only PermissionRequest is gated: it never runs under `claude -p` (the call is "
            "denied there, not sent for approval); add PreToolUse for headless runs",
        )
    _common(report, refs, "Claude Code", "Bash|Edit|Write|MultiEdit|NotebookEdit|mcp__.*")
    if here is not None:
        _reach(report, refs, project, here, settings_env)
    return report


def _reach(
    report: Report, refs: list[HookRef], project: Path, here: Here, extra: Mapping[str, str]
) -> None:
    env = {**here.env, **extra}
    for ref in refs:
        hook_reach.check_command(report, ref, project, env.get("PATH"))
    hook_reach.check_bot(report, refs, env, here.embedded_running, here.probe)


def project_trusted(codex_home: Path, project: Path) -> bool | None:
    """Whether `config.toml` marks `project` (or a parent) trusted; None when unreadable."""
    try:
        config = tomllib.loads((codex_home / "config.toml").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return False
    except (OSError, tomllib.TOMLDecodeError):
        return None
    projects = config.get("projects")
    if not isinstance(projects, dict):
        return False
    for candidate in (project, *project.parents):
        entry = projects.get(str(candidate))
        if isinstance(entry, dict) and entry.get("trust_level") == "trusted":
            return True
    return False


def check_codex(
    project: Path,
    codex_home: Path,
    codex: str | None = None,
    *,
    use_codex: bool = True,
    here: Here | None = None,
) -> Report:
    """Codex: `$CODEX_HOME/hooks.json` and the project's, plus what Codex says of their trust."""
    report = Report("codex")
    refs: list[HookRef] = []
    project_file = settings_path("codex", "project", project, codex_home, codex_home)
    for scope in ("user", "project"):
        path = settings_path("codex", scope, project, codex_home, codex_home)
        data = _load(report, path)
        if data is None:
            continue
        refs.extend(ref for ref in hook_refs(path, data, "codex") if ref.ours)
    if not refs:
        report.add(
            "error",
            f"no approval-bot hook in {codex_home / 'hooks.json'} or {project_file}: Codex runs "
            "commands without asking the bot (`approval-bot setup codex`)",
        )
        return report
    if any(ref.file == project_file for ref in refs):
        trusted = project_trusted(codex_home, project)
        if trusted is False:
            report.add(
                "error",
                f"{project_file}: the project is not trusted in {codex_home / 'config.toml'}, so "
                f'Codex ignores this file without a word: add [projects."{project}"] '
                'trust_level = "trusted" (or use --scope user)',
            )
        elif trusted is None:
            report.add(
                "unknown",
                f"cannot read {codex_home / 'config.toml'} to see whether Codex trusts {project}",
            )
    _common(report, refs, "Codex", "Bash|apply_patch|mcp__.*")
    if use_codex:
        from bot.agents.codex_app_server import check_trust

        check_trust(report, refs, project, codex, codex_home)
    if here is not None:
        _reach(report, refs, project, here, {})
    return report


def check(
    agent: Agent,
    *,
    project: Path,
    home: Path,
    codex_home: Path,
    codex: str | None = None,
    here: Here | None = None,
) -> Report:
    """The report for one agent (what `setup --check` prints and `doctor` may reuse)."""
    if agent == "claude-code":
        return check_claude_code(project, home, here=here)
    return check_codex(project, codex_home, codex, here=here)


def run_check(args: argparse.Namespace, out: TextIO, *, codex_home: Path, here: Here) -> int:
    """`approval-bot setup --check`: print the findings; exit 0 when the gate is on, 1 when
    it is not reliably on, 3 when something could not be verified (`EXIT_CODES`)."""
    project = Path(args.project).resolve()
    codex_home = Path(args.codex_home) if getattr(args, "codex_home", None) else codex_home
    codex = getattr(args, "codex", None)
    report = check(
        args.agent,
        project=project,
        home=Path.home(),
        codex_home=codex_home,
        codex=codex,
        here=here,
    )
    print(report.render(), file=out)
    return EXIT_CODES[report.verdict]
