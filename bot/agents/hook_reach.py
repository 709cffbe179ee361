"""`setup --check`'s view from where the agent runs: can the written hook command start, and
whom will it ask? (`bot.agents.check` adds these findings to its `Report`.)

Both are read from the environment of the shell `--check` runs in, plus Claude Code's
settings `env`: `check_command` finds the hook's program, `check_bot` finds the bot or Redis
the hook will ask (`probe_token` tries an `APPROVALS_TOKEN`). Each finding and its level:
docs/ARCHITECTURE.md, "Agent setup".
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from bot.agents.settings_files import HookRef, _command_args


class Report(Protocol):
    """Where findings go (`bot.agents.check.Report`)."""

    def add(self, level: Any, text: str) -> None: ...


#: A bot's answer to a token check: `ok`, `refused` (401/403), or why it could not be asked.
TokenProbe = Callable[[str, str], str]


def program_of(command: str) -> tuple[str | None, bool]:
    """(the program the command starts, whether that program is approval-bot itself)."""
    words = _command_args(command) or []
    if not words:
        return None, False
    return words[0], Path(words[0]).name == "approval-bot"


def resolve(program: str, project: Path, path: str | None) -> str | None:
    """Where `program` is found as the agent would start it (a path: from the project
    directory, the agent's cwd; a bare name: on `path`); None when it is not."""
    if "/" in program:
        found = (project / Path(program).expanduser()).resolve()
        return str(found) if found.is_file() and os.access(found, os.X_OK) else None
    return shutil.which(program, path=path)


def check_command(report: Report, ref: HookRef, project: Path, path: str | None) -> None:
    """Whether the hook's command can start (see the module docstring)."""
    command = ref.handler.get("command")
    if ref.kind != "command" or not isinstance(command, str):
        return
    program, direct = program_of(command)
    where = f"{ref.file}: {ref.event}"
    if program is None:
        report.add("error", f"{where}: the hook's command is empty")
        return
    found = resolve(program, project, path)
    if found is None:
        report.add(
            "error",
            f"{where}: `{program}` is not on PATH here, so the agent cannot start the hook and "
            "runs the call without asking; rerun `approval-bot setup` from where approval-bot "
            "is installed (it then writes its full path), or pass --executable /path/to/"
            "approval-bot",
        )
    elif direct:
        report.add("ok", f"{where}: the hook's command starts {found}")
    else:
        report.add(
            "unknown",
            f"{where}: the hook runs approval-bot through `{program}` ({found}): whether that "
            "finds approval-bot cannot be checked from here",
        )


def check_bot(
    report: Report,
    refs: list[HookRef],
    env: Mapping[str, str],
    embedded_running: Callable[[], str | None],
    probe: TokenProbe,
) -> None:
    """Whom the hooks will ask, from `env` (see the module docstring). `embedded_running`
    names the embedded server a `serve` runs for the data directory, if any; `probe` asks a
    bot whether it takes a token."""
    for ref in refs:
        if ref.kind == "http":
            variable = _http_token_variable(ref)
            if variable and not env.get(variable):
                report.add(
                    "error",
                    f"{ref.file}: {ref.event}: the http hook sends ${variable}, which is not set "
                    "here: the bot refuses the call, and Claude Code then runs the tool",
                )
    if not any(ref.kind == "command" for ref in refs):
        return
    url, token = env.get("APPROVALS_URL", "").strip(), env.get("APPROVALS_TOKEN", "").strip()
    if url and token:
        answer = probe(url, token)
        if answer == "ok":
            report.add("ok", f"the hook asks the bot at {url} (APPROVALS_URL, APPROVALS_TOKEN)")
        elif answer == "refused":
            report.add(
                "error",
                f"the bot at {url} refuses APPROVALS_TOKEN: the hook denies every call (use "
                "the export line `approval-bot serve` printed, or a token in its "
                "APPROVALS_API_TOKENS)",
            )
        else:
            report.add(
                "unknown",
                f"the bot at {url} (APPROVALS_URL) could not be asked now ({answer}): while it "
                "does not answer, the hook denies every call",
            )
        return
    if url or token:
        missing = "APPROVALS_TOKEN" if url else "APPROVALS_URL"
        report.add(
            "error",
            f"{missing} is not set here but {'APPROVALS_URL' if url else 'APPROVALS_TOKEN'} is: "
            "the hook needs both to ask the bot over HTTP, and denies every call",
        )
        return
    if env.get("REDIS_URL", "").strip():
        report.add("ok", "the hook reviews calls over REDIS_URL (no APPROVALS_URL set here)")
        return
    running = embedded_running()
    if running:
        report.add(
            "warning",
            f"no APPROVALS_URL or REDIS_URL here: the hook uses the embedded Redis ({running}) "
            "of the serve running now with this APPROVALS_DATA_DIR, and denies every call "
            "once it stops",
        )
        return
    report.add(
        "error",
        "neither APPROVALS_URL + APPROVALS_TOKEN nor REDIS_URL is set here, and no serve "
        "runs: the hook denies every call. Start `approval-bot serve` and paste the export "
        "line it prints where the agent runs",
    )


def _http_token_variable(ref: HookRef) -> str | None:
    allowed = ref.handler.get("allowedEnvVars")
    if isinstance(allowed, list) and allowed and isinstance(allowed[0], str):
        return allowed[0]
    return None


def probe_token(url: str, token: str, timeout: float = 3.0) -> str:
    """Ask the bot at `url` about a request id that cannot exist, with `token`: 404 means the
    token is taken (`ok`), 401/403 that it is not (`refused`); anything else says why."""
    import http.client
    from urllib.parse import urlsplit

    from bot.agents.command_hook import http_connection

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "not an http(s) URL"
    connection = http_connection(parts, timeout)
    try:
        connection.request(
            "GET",
            f"{parts.path.rstrip('/')}/v1/approvals/apr_setup_check",
            headers={"Authorization": f"Bearer {token}"},
        )
        status = connection.getresponse().status
    except (OSError, http.client.HTTPException) as e:
        return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    finally:
        connection.close()
    if status in (401, 403):
        return "refused"
    return "ok" if status == 404 else f"HTTP {status}"
