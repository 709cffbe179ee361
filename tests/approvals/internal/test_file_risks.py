"""Risk hints for file writes (`approvals/_internal/file_risks.py`): outside the working
directory, sensitive paths; the `{code, text}` shape shared with the shell-command hints."""

from __future__ import annotations

import pytest

from approvals._internal.file_risks import (
    WRITES_OUTSIDE_CWD,
    WRITES_SENSITIVE_PATH,
    file_risks,
    is_sensitive,
    outside,
)

CWD = "/home/dev/app"


@pytest.mark.parametrize(
    ("path", "codes"),
    [
        ("src/main.py", []),
        ("/home/dev/app/src/main.py", []),
        ("/home/dev/app", []),
        ("../other/main.py", [WRITES_OUTSIDE_CWD]),
        ("src/../../app2/x", [WRITES_OUTSIDE_CWD]),
        ("/home/dev/app-evil/x", [WRITES_OUTSIDE_CWD]),  # a prefix is not a parent
        ("/etc/hosts", [WRITES_OUTSIDE_CWD, WRITES_SENSITIVE_PATH]),
        ("/etc", [WRITES_OUTSIDE_CWD, WRITES_SENSITIVE_PATH]),
        ("~/.ssh/authorized_keys", [WRITES_OUTSIDE_CWD, WRITES_SENSITIVE_PATH]),
        ("/home/dev/.aws/credentials", [WRITES_OUTSIDE_CWD, WRITES_SENSITIVE_PATH]),
        ("/home/dev/.bashrc", [WRITES_OUTSIDE_CWD, WRITES_SENSITIVE_PATH]),
        ("~/.zshrc", [WRITES_OUTSIDE_CWD, WRITES_SENSITIVE_PATH]),
        ("/home/dev/.config/fish/config.fish", [WRITES_OUTSIDE_CWD, WRITES_SENSITIVE_PATH]),
        (".ssh/config", [WRITES_SENSITIVE_PATH]),  # inside the cwd, still keys
        ("deploy/.profile", [WRITES_SENSITIVE_PATH]),
        ("docs/config.fish", []),  # not fish's own
        ("src/etc/hosts", []),  # /etc only at the root
    ],
)
def test_file_risks(path: str, codes: list[str]) -> None:
    risks = file_risks(path, CWD)
    assert [r["code"] for r in risks] == codes
    for risk in risks:
        assert set(risk) == {"code", "text"} and path in risk["text"]


def test_without_a_cwd_only_sensitive_paths_are_flagged() -> None:
    assert file_risks("../x", None) == []
    assert [r["code"] for r in file_risks("/etc/passwd", None)] == [WRITES_SENSITIVE_PATH]
    assert not outside("/anywhere", "relative/cwd")


def test_is_sensitive_names_why() -> None:
    assert is_sensitive("/etc/sudoers") == "a system configuration file under /etc"
    assert is_sensitive("~/.ssh/id_ed25519") == "a credentials directory (.ssh)"
    assert is_sensitive("/root/.bash_profile") == "a shell start-up file"
    assert is_sensitive("/srv/app/README.md") is None
