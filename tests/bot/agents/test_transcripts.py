"""The agent's reason from its transcript (`bot/agents/transcripts.py`): real Claude Code and
Codex lines (`tests/support/transcripts/`), read from the end, bounded, never raising."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bot.agents import transcripts as t
from tests.support import transcripts as fixtures
from tests.support.secret_corpus import FAKES

REPO = Path(__file__).resolve().parents[3]
TOKEN = next(f.secret for f in FAKES if f.rule.startswith("github"))


def later() -> float:
    return time.monotonic() + 5


def claude_line(kind: str, content: object, **extra: object) -> str:
    """One Claude Code transcript line of `kind` (user / assistant), as 2.1.197 writes it."""
    line: dict[str, object] = {
        "parentUuid": "0f5e9a2c-7b1d-4c38-8e64-2d9b6f1a3e57",
        "isSidechain": False,
        "userType": "external",
        "cwd": "/srv/app",
        "sessionId": "4b1e9f3c-7d2a-4e85-b6c0-91f3a8d2e7b4",
        "version": "2.1.197",
        "gitBranch": "main",
        "type": kind,
        "message": {"role": kind, "content": content},
        "uuid": f"{time.monotonic_ns():032x}",
        "timestamp": "2026-11-30T09:59:30.000Z",
        **extra,
    }
    return json.dumps(line, separators=(",", ":")) + "\n"


def test_claude_code_reason_and_request(tmp_path: Path) -> None:
    path = fixtures.write(tmp_path, fixtures.CLAUDE_EDIT, TOKEN)
    found = t.claude_excerpt(str(path), fixtures.CLAUDE_EDIT_CALL, deadline=later())
    assert found.reason == fixtures.CLAUDE_EDIT_REASON  # the text before the Edit, only
    assert found.user_request is not None
    # The latest real prompt: not the /clear echo, not the meta reminder, not the earlier one.
    assert found.user_request.startswith("The retry test in tests/test_client.py is flaky")
    assert TOKEN in found.user_request  # sent as typed: the bot masks it (test_no_leaks)
    assert found.problem is None


def test_codex_reason_and_request(tmp_path: Path) -> None:
    path = fixtures.write(tmp_path, fixtures.CODEX_PATCH, TOKEN)
    found = t.codex_excerpt(str(path), fixtures.CODEX_PATCH_CALL, deadline=later())
    assert found.reason == fixtures.CODEX_PATCH_REASON  # once, not again from the event_msg
    assert found.user_request is not None
    assert found.user_request.startswith("The retry test is flaky on CI")
    assert "<environment_context>" not in found.user_request


@pytest.mark.parametrize(
    ("name", "call"),
    [(fixtures.CLAUDE_EDIT, None), (fixtures.CLAUDE_EDIT, "toolu_01NotWrittenYet")],
)
def test_a_call_not_in_the_transcript_takes_the_text_at_its_end(
    tmp_path: Path, name: str, call: str | None
) -> None:
    """No tool_use_id (PermissionRequest), or the call not written yet: the assistant's words
    after the last tool result are the ones right before the call."""
    path = fixtures.write(tmp_path, name)
    found = t.claude_excerpt(str(path), call, deadline=later())
    assert found.reason == fixtures.CLAUDE_EDIT_REASON


def test_the_reason_stops_at_the_previous_tool_result(tmp_path: Path) -> None:
    """Texts of an earlier step (before the Read's result) are not this call's reason."""
    path = fixtures.write(tmp_path, fixtures.CLAUDE_EDIT)
    found = t.claude_excerpt(str(path), "toolu_01Read9c2d4eVb7Xq1Mn", deadline=later())
    assert found.reason is None  # the Read was preceded by thinking only


def test_a_huge_tool_result_is_skipped_unparsed(tmp_path: Path) -> None:
    """A tool result of 3 MB between the prompt and the call: skipped (its head says what it
    is), the request behind it still found."""
    huge = claude_line(
        "user",
        [{"tool_use_id": "toolu_01Big", "type": "tool_result", "content": "x" * 3_000_000}],
    )
    base = fixtures.text(fixtures.CLAUDE_EDIT).splitlines(keepends=True)
    at = next(i for i, line in enumerate(base) if "toolu_01Read9c2d4eVb7Xq1Mn" in line) + 1
    path = tmp_path / "huge.jsonl"
    path.write_text("".join([*base[:at], huge, *base[at:]]))
    found = t.claude_excerpt(str(path), fixtures.CLAUDE_EDIT_CALL, deadline=later())
    assert found.reason == fixtures.CLAUDE_EDIT_REASON
    assert found.user_request is not None and found.user_request.startswith("The retry test")


def test_a_huge_prompt_is_read_from_its_head(tmp_path: Path) -> None:
    """A 2 MB pasted prompt: its start is the request (not the earlier, shorter prompt)."""
    pasted = "Deploy this config:\n" + "key: value\n" * 200_000
    extra = claude_line("user", pasted) + claude_line(
        "assistant", [{"type": "text", "text": "Writing the config now."}]
    )
    path = fixtures.write(tmp_path, fixtures.CLAUDE_EDIT, extra="\n" + extra)
    found = t.claude_excerpt(str(path), None, deadline=later())
    assert found.reason == "Writing the config now."
    assert found.user_request is not None
    assert found.user_request.startswith("Deploy this config:\nkey: value\n")
    assert len(found.user_request) <= t.SEND_CHARS


def test_a_huge_line_of_unknown_kind_ends_the_search_for_the_request(tmp_path: Path) -> None:
    """A long line whose head says nothing known might be the latest prompt: no request is
    reported rather than an older one."""
    extra = json.dumps({"type": "mystery", "blob": "y" * 2_000_000}) + "\n"
    path = fixtures.write(tmp_path, fixtures.CLAUDE_EDIT, extra="\n" + extra)
    found = t.claude_excerpt(str(path), fixtures.CLAUDE_EDIT_CALL, deadline=later())
    assert found.user_request is None


def test_only_the_end_of_a_big_transcript_is_read(tmp_path: Path) -> None:
    """20 MB of earlier session: at most MAX_SCAN_BYTES are read, and here far less (the
    call and the request are near the end)."""
    filler = claude_line("assistant", [{"type": "text", "text": "earlier work " * 50}])
    path = tmp_path / "long.jsonl"
    with path.open("w") as f:
        f.write(filler * (20_000_000 // len(filler)))
        f.write(fixtures.text(fixtures.CLAUDE_EDIT, TOKEN))
    found = t.claude_excerpt(str(path), fixtures.CLAUDE_EDIT_CALL, deadline=later())
    assert found.reason == fixtures.CLAUDE_EDIT_REASON
    assert found.scanned <= 2 * t.BLOCK
    # No prompt anywhere in reach: the read stops at the bound, without one.
    path.write_text(filler * (20_000_000 // len(filler)))
    found = t.claude_excerpt(str(path), None, deadline=later())
    assert found.user_request is None
    assert found.scanned == t.MAX_SCAN_BYTES


def test_a_deadline_stops_the_read(tmp_path: Path) -> None:
    path = fixtures.write(tmp_path, fixtures.CLAUDE_EDIT)
    found = t.claude_excerpt(str(path), fixtures.CLAUDE_EDIT_CALL, deadline=time.monotonic())
    assert found == t.Excerpt(scanned=0)


def test_malformed_and_foreign_lines_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "odd.jsonl"
    path.write_text(
        '{"type":"user","message":"not an object"}\n[1,2]\n\x00\x01garbage\n{"type":1}\n'
        + claude_line("user", "fix the build")
        + "{truncated"
    )
    found = t.claude_excerpt(str(path), None, deadline=later())
    assert found.user_request == "fix the build"


@pytest.mark.parametrize("kind", ["missing", "directory", "fifo", "no_path", "binary"])
def test_no_usable_transcript_is_no_excerpt_and_no_error(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "t.jsonl"
    payload: dict[str, object] = {"transcript_path": str(target), "tool_use_id": "toolu_1"}
    if kind == "directory":
        target.mkdir()
    elif kind == "fifo":
        os.mkfifo(target)  # opened without blocking, refused as not a regular file
    elif kind == "no_path":
        payload = {"tool_use_id": "toolu_1"}
    elif kind == "binary":
        target.write_bytes(os.urandom(300_000))
    found = t.excerpt("claude-code", payload, deadline=later())
    assert found.reason is None and found.user_request is None
    if kind != "binary":
        assert found.problem is not None


def test_a_transcript_the_agents_user_cannot_read(tmp_path: Path) -> None:
    """Run as a user the file's mode shuts out (as root: without the capabilities that
    override file modes, through `setpriv`): no excerpt, a problem named, no exception."""
    path = fixtures.write(tmp_path, fixtures.CLAUDE_EDIT)
    path.chmod(0)
    code = (
        "import json, sys, time\n"
        "from bot.agents.transcripts import excerpt\n"
        f"found = excerpt('claude-code', {{'transcript_path': {str(path)!r}}}, "
        "deadline=time.monotonic() + 5)\n"
        "print(json.dumps([found.reason, found.user_request, found.problem]))\n"
    )
    argv = [sys.executable, "-c", code]
    if os.geteuid() == 0:
        argv = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", *argv]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=30)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [None, None, "transcript not read: permission denied"]
