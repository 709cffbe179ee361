"""Codex's own `codex app-server` (JSON-RPC over stdio): list hooks, mark ours trusted.

Codex runs a hook from `hooks.json` only when it is trusted: `hooks/list`
reports each hook's `key`, `currentHash` and `trustStatus` (`trusted`,
`untrusted`, `modified`, `managed`), and trusting stores that very hash as
`[hooks.state."<key>"] trusted_hash` in `$CODEX_HOME/config.toml`. We never
compute the hash: we hand back what `hooks/list` returned, through Codex's
own `config/batchWrite`, and only for hooks whose command and matcher are the
ones setup just wrote. Measured on Codex 0.171.0 (`scripts/check-codex`).
A project's `.codex/hooks.json` is not listed at all while the project is
untrusted — the same silence Codex shows when it skips it. `check_trust` is
`setup codex --check`'s part that asks the app-server.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TextIO

if TYPE_CHECKING:
    from bot.agents.settings_files import HookRef

#: Seconds to wait for one answer from the app-server (it starts in well under a second).
REQUEST_TIMEOUT = 20.0


class Findings(Protocol):
    """Where `check_trust` reports (`bot.agents.check.Report`)."""

    def add(self, level: Any, text: str) -> None: ...


class CodexError(Exception):
    """The app-server could not be run or answered with an error."""


def find_codex(explicit: str | None = None) -> str | None:
    if explicit:
        return explicit if Path(explicit).exists() or shutil.which(explicit) else None
    return shutil.which("codex")


class AppServer:
    """One `codex app-server` process; use as a context manager."""

    def __init__(
        self,
        codex: str,
        cwd: Path,
        codex_home: Path | None = None,
        timeout: float = REQUEST_TIMEOUT,
    ) -> None:
        self.codex, self.cwd, self.timeout = codex, cwd, timeout
        # The one place a child gets an environment: Codex finds its home in CODEX_HOME.
        self.env = {**os.environ, "CODEX_HOME": str(codex_home)} if codex_home else None
        self._next_id = 0
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> AppServer:
        try:
            self._proc = subprocess.Popen(
                [self.codex, "app-server"],
                cwd=self.cwd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=self.env,
                text=True,
                encoding="utf-8",
            )
        except OSError as e:
            raise CodexError(f"cannot run {self.codex} app-server: {e.strerror or e}") from e
        threading.Thread(target=self._read, daemon=True).start()
        self.request("initialize", {"clientInfo": {"name": "approval-bot", "version": "setup"}})
        self._send({"method": "initialized"})
        return self

    def __exit__(self, *exc: object) -> None:
        proc = self._proc
        if proc is None:
            return
        try:
            if proc.stdin:
                proc.stdin.close()
            proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _send(self, message: dict[str, Any]) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        try:
            self._proc.stdin.write(json.dumps(message) + "\n")
            self._proc.stdin.flush()
        except OSError as e:
            raise CodexError(f"codex app-server stopped: {e.strerror or e}") from e

    def request(self, method: str, params: dict[str, Any]) -> Any:
        self._next_id += 1
        request_id = self._next_id
        self._send({"id": request_id, "method": method, "params": params})
        while True:
            try:
                line = self._lines.get(timeout=self.timeout)
            except queue.Empty:
                raise CodexError(f"codex app-server did not answer {method}") from None
            if line is None:
                raise CodexError(f"codex app-server exited before answering {method}")
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if not isinstance(message, dict) or message.get("id") != request_id:
                continue  # notifications, and answers to nothing we asked
            if "error" in message:
                error = message["error"]
                text = error.get("message") if isinstance(error, dict) else error
                raise CodexError(f"codex app-server refused {method}: {text}")
            return message.get("result")


def list_hooks(server: AppServer, project: Path) -> dict[str, Any]:
    """`hooks/list` for `project`: `{"hooks": [...], "warnings": [...], "errors": [...]}`."""
    result = server.request("hooks/list", {"cwds": [str(project)]})
    data = result.get("data") if isinstance(result, dict) else None
    if not isinstance(data, list) or not data or not isinstance(data[0], dict):
        raise CodexError("codex app-server answered hooks/list without data")
    entry = data[0]
    return {
        "hooks": [h for h in entry.get("hooks", []) if isinstance(h, dict)],
        "warnings": list(entry.get("warnings", [])),
        "errors": list(entry.get("errors", [])),
    }


def trust(server: AppServer, hooks: list[dict[str, Any]]) -> None:
    """Store each hook's current hash as trusted (Codex's own config writer)."""
    state = {h["key"]: {"trusted_hash": h["currentHash"]} for h in hooks}
    server.request(
        "config/batchWrite",
        {"edits": [{"keyPath": "hooks.state", "mergeStrategy": "upsert", "value": state}]},
    )


def _same_file(a: Any, b: Path) -> bool:
    try:
        return isinstance(a, str) and Path(a).resolve() == b.resolve()
    except OSError:
        return False


#: A hook as setup wrote it: (command, matcher).
Wanted = Sequence[tuple[str, str | None]]


def ours_in(hooks: list[dict[str, Any]], path: Path, wanted: Wanted) -> list[dict[str, Any]]:
    """The listed hooks that are exactly what setup wrote to `path` (command and matcher)."""
    return [
        h
        for h in hooks
        if h.get("handlerType") == "command"
        and _same_file(h.get("sourcePath"), path)
        and (h.get("command"), h.get("matcher")) in set(wanted)
    ]


def manual_step(path: Path) -> str:
    return (
        f"Codex skips this hook until it is trusted: run `codex` in the project, type /hooks, "
        f"and trust the approval-bot hook from {path} — or rerun `approval-bot setup codex` "
        "with `codex` on PATH (or --codex /path/to/codex) to trust it without the TUI."
    )


def trust_our_hooks(
    path: Path,
    project: Path,
    wanted: Wanted,
    codex: str | None,
    out: TextIO,
    codex_home: Path | None = None,
) -> int:
    """Trust the hooks setup wrote to `path`; 0 when Codex now runs them, 1 when it will not."""
    exe = find_codex(codex)
    if exe is None:
        print(f"codex not found. {manual_step(path)}", file=out)
        return 1
    try:
        with AppServer(exe, project, codex_home) as server:
            listed = list_hooks(server, project)["hooks"]
            mine = ours_in(listed, path, wanted)
            if not mine:
                if path.parent.name == ".codex" and path.parent.parent == project:
                    print(
                        f"Codex does not read {path}: the project {project} is not trusted. "
                        f'Add [projects."{project}"] trust_level = "trusted" to '
                        "$CODEX_HOME/config.toml (or open the project in Codex and trust it), "
                        "then rerun this command.",
                        file=out,
                    )
                else:
                    print(f"Codex does not list the hook in {path}. {manual_step(path)}", file=out)
                return 1
            pending = [h for h in mine if h.get("trustStatus") not in ("trusted", "managed")]
            if pending:
                trust(server, pending)
                listed = list_hooks(server, project)["hooks"]
                mine = ours_in(listed, path, wanted)
    except CodexError as e:
        print(f"{e}. {manual_step(path)}", file=out)
        return 1
    untrusted = [h for h in mine if h.get("trustStatus") not in ("trusted", "managed")]
    if untrusted:
        print(
            f"Codex still reports the hook as {untrusted[0].get('trustStatus')}. "
            f"{manual_step(path)}",
            file=out,
        )
        return 1
    keys = ", ".join(h["key"] for h in mine)
    print(f"Codex trusts the hook ({keys}).", file=out)
    return 0


def check_trust(
    report: Findings, refs: list[HookRef], project: Path, codex: str | None, codex_home: Path
) -> None:
    """`setup --check` for Codex: is each of our hooks loaded, enabled and trusted? Codex
    skips an untrusted one silently; what cannot be asked (no codex) is `unknown`."""
    exe = find_codex(codex)
    if exe is None:
        report.add(
            "unknown",
            "codex is not on PATH, so whether Codex trusts the hook cannot be checked; Codex "
            "skips an untrusted hook silently (--codex /path/to/codex)",
        )
        return
    try:
        with AppServer(exe, project, codex_home) as server:
            listed = list_hooks(server, project)["hooks"]
    except CodexError as e:
        report.add("unknown", f"whether Codex trusts the hook could not be checked: {e}")
        return
    for ref in refs:
        found = [
            h
            for h in listed
            if h.get("command") == ref.handler.get("command")
            and isinstance(h.get("sourcePath"), str)
            and Path(h["sourcePath"]).resolve() == ref.file.resolve()
        ]
        if not found:
            report.add(
                "error",
                f"{ref.file}: {ref.event}: Codex does not load this hook (an untrusted project, "
                "or a file Codex does not read), so it never runs",
            )
            continue
        for hook in found:
            status = hook.get("trustStatus")
            if hook.get("enabled") is False:
                report.add("error", f"{hook.get('key')}: disabled in Codex: it never runs")
            elif status in ("trusted", "managed"):
                report.add("ok", f"{hook.get('key')}: {status} in Codex")
            else:
                report.add(
                    "error",
                    f"{hook.get('key')}: {status} in Codex, which skips it silently and runs the "
                    f"command. {manual_step(ref.file)}",
                )
