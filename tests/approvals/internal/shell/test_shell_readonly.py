"""The read-only judgement: the shipped list, the options that make a listed program write
or run something, redirections, wrappers, assignments, functions and paths."""

from __future__ import annotations

import pytest

from approvals._internal.shell.normalise import analyse
from approvals._internal.shell.readonly import READ_ONLY, why_not


def verdicts(command: str) -> list[str | None]:
    return [why_not(c) for c in analyse(command).commands]


@pytest.mark.parametrize(
    "command",
    [
        "ls -la", "cat a | grep b | wc -l", "git status", "git log -p -1", "git branch -a",
        "git tag -l 'v*'", "git stash list", "git config --get user.name", "git config user.name",
        "git -C /x status", "git --version", "find . -name '*.py'", "rg foo", "sort -u a",
        "sed -n '1,20p' f", "date +%s", "echo hi 2>/dev/null >&2", "LC_ALL=C sort f",
        "GIT_PAGER=cat git log", "env", "npm ls", "pip show x", "kubectl get pods",
        "docker ps", "python3 --version", "tee < f", "command -v ls", "/usr/bin/ls",
        "xargs grep foo < files", "uniq a", "tar -tzf x.tgz", "go env GOPATH",
    ],
)  # fmt: skip
def test_read_only(command: str) -> None:
    assert verdicts(command) == [None] * len(analyse(command).commands)


@pytest.mark.parametrize(
    ("command", "why"),
    [
        ("rm x", "rm is not on the read-only list"),
        ("ls > out", "writes out (>)"),
        ("ls >> out", "writes out (>>)"),
        ("ls &> out", "writes out (&>)"),
        ("ls | tee out", "tee writes files"),
        ("find . -exec cat {} +", "find -exec writes or runs something"),
        ("find . -delete", "find -delete writes or runs something"),
        ("find . -fprint x", "find -fprint writes or runs something"),
        ("fd -x cat", "fd -x writes or runs something"),
        ("rg --pre sh x", "rg --pre writes or runs something"),
        ("sort -o out in", "sort -o writes or runs something"),
        ("sort -uo out in", "sort -o writes or runs something"),
        ("uniq in out", "uniq with more than 1 file argument(s) writes"),
        ("sed -i s/a/b/ f", "sed with options other than -n / -E"),
        ("sed s/a/b/ f", "sed without -n (only `sed -n 'N,Mp'` is read-only)"),
        ("sed -n 'w out' f", "sed script other than N,Mp"),
        ("date 0101", "date with an argument sets the clock"),
        ("hostname newname", "hostname with more than 0 file argument(s) writes"),
        ("git push", "git push is not on the read-only list"),
        ("git branch new", "git branch creates, moves or deletes branches"),
        ("git branch -D old", "git branch creates, moves or deletes branches"),
        ("git tag v1", "git tag creates or deletes tags"),
        ("git config user.name x", "git config changes the configuration"),
        ("git -c core.pager=sh log", "git -c writes a file or runs a program"),
        ("git -p log", "git -p writes a file or runs a program"),
        ("git log --output=x", "git --output writes a file or runs a program"),
        ("git diff --ext-diff", "git --ext-diff writes a file or runs a program"),
        ("git stash", "git stash  changes the repository"),
        ("git remote add o u", "git remote changes remotes"),
        ("kubectl get secrets -o yaml", "kubectl get secrets prints credentials"),
        ("kubectl delete pod x", "kubectl delete is not on the read-only list"),
        ("npm install", "npm install is not on the read-only list"),
        ("python3 x.py", "python3 runs code (only --version / --help is read-only)"),
        ("sudo ls", "runs through sudo"),
        ("nohup ls", "runs through nohup"),
        ("FOO=1 ls", "runs with FOO set"),
        ("./ls", "./ls is not a system program"),
        ("/tmp/cat f", "/tmp/cat is not a system program"),
        ("/usr/bin/../../tmp/ls", "/usr/bin/../../tmp/ls is not a system program"),
        ("tar -xzf x.tgz", "tar other than -t (list)"),
        ("go env -w GOFLAGS=x", "go -w writes or runs something"),
    ],
)
def test_not_read_only(command: str, why: str) -> None:
    assert why in [v for v in verdicts(command) if v], verdicts(command)


def test_a_function_defined_in_the_line_is_not_read_only() -> None:
    parsed = analyse("ls() { touch x; }; ls")
    assert [why_not(c) for c in parsed.commands] == [
        "touch is not on the read-only list",
        "ls is a function defined in this command",
    ]


def test_unanalysable_commands_are_not_read_only() -> None:
    (c,) = analyse("$x").commands
    assert why_not(c) == "the program is only known when it runs"


def test_every_entry_says_why() -> None:
    assert all(entry.why for entry in READ_ONLY.values())
