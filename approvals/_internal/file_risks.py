"""Risk hints for a file a call writes: outside the working directory, or a sensitive path.

Internal to approval-bot (not a stable API). Pure and standard-library only: the bot draws the
hints from the event (its path and `cwd`, read lexically: the bot may be another machine, and
nothing here touches the file system), and the command hook, on the agent's machine, uses
`is_sensitive` to leave such a file unread.

A hint is `{code, text}`, the shape of the shell-command risk hints, so the two lists merge;
the codes are the shared ones: `writes_outside_cwd`, `writes_sensitive_path`.
"""

from __future__ import annotations

import posixpath
from typing import TypedDict


class Risk(TypedDict):
    """One risk hint: a stable `code` and a one-line `text` for reviewers."""

    code: str
    text: str


WRITES_OUTSIDE_CWD = "writes_outside_cwd"
WRITES_SENSITIVE_PATH = "writes_sensitive_path"

#: System directories a write to is always worth a second look.
SENSITIVE_ROOTS = ("/etc",)
#: Directories of a home (anywhere in a path) that hold credentials or keys.
SENSITIVE_DIRS = frozenset({".ssh", ".aws", ".gnupg", ".kube", ".docker"})
#: Shell start-up files: a write there runs at the next login or shell.
SHELL_RC_FILES = frozenset(
    {
        ".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile", ".zshrc",
        ".zprofile", ".zshenv", ".zlogin", ".kshrc", ".cshrc", ".tcshrc", "config.fish",
    }
)  # fmt: skip


def resolve(path: str, cwd: str | None = None) -> str:
    """`path` as an absolute, normalised POSIX path when it can be told (relative paths are
    joined to `cwd`; `~` stays `~`), lexically: `..` is folded, links are not followed."""
    path = path.strip()
    if path == "~" or path.startswith("~/"):
        return "~" + posixpath.normpath(path[1:] or "/") if path != "~" else "~"
    if not posixpath.isabs(path) and cwd and posixpath.isabs(cwd):
        path = posixpath.join(cwd, path)
    return posixpath.normpath(path) if path else path


def is_sensitive(path: str, cwd: str | None = None) -> str | None:
    """Why `path` is a sensitive place to write (one short phrase), or None."""
    full = resolve(path, cwd)
    for root in SENSITIVE_ROOTS:
        if full == root or full.startswith(root + "/"):
            return f"a system configuration file under {root}"
    parts = full.split("/")
    for part in parts[:-1]:
        if part in SENSITIVE_DIRS:
            return f"a credentials directory ({part})"
    name = parts[-1] if parts else ""
    if name in SHELL_RC_FILES and (name != "config.fish" or "fish" in parts[:-1]):
        return "a shell start-up file"
    return None


def outside(path: str, cwd: str | None) -> bool:
    """Whether `path` lies outside `cwd` (both read lexically; False without an absolute cwd)."""
    if not cwd or not posixpath.isabs(cwd):
        return False
    full = resolve(path, cwd)
    if full.startswith("~"):
        return True  # a home path is never inside a working directory we can name
    root = posixpath.normpath(cwd)
    return not (full == root or full.startswith(root.rstrip("/") + "/"))


def file_risks(path: str, cwd: str | None = None) -> list[Risk]:
    """The risk hints for a write to `path` by a call made in `cwd`."""
    risks: list[Risk] = []
    if outside(path, cwd):
        risks.append(
            {"code": WRITES_OUTSIDE_CWD, "text": f"writes outside the working directory: {path}"}
        )
    why = is_sensitive(path, cwd)
    if why is not None:
        risks.append({"code": WRITES_SENSITIVE_PATH, "text": f"writes {why}: {path}"})
    return risks
