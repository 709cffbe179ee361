"""Properties of the shell model over generated commands: analysing never raises and stays
within its bounds; a command with an unanalysable part is never allowed, whatever the allow
rules say; normalising a normalised command changes nothing."""

from __future__ import annotations

import shlex

from hypothesis import given, settings
from hypothesis import strategies as st

from approvals._internal.policy_file import parse_policy
from approvals._internal.shell import parse as parse_module
from approvals._internal.shell.model import ParsedCommand
from approvals._internal.shell.normalise import analyse
from approvals._internal.shell.words import join
from approvals.models import ApprovalEvent

SHELL_CHARS = "abcrmfx-_./ ;&|<>()[]{}$`'\"\\\n\t*?!#=~,:+%@0123456789"

PROGRAMS = ["rm", "git", "ls", "cat", "chmod", "curl", "docker", "npm", "kubectl", "terraform",
            "sed", "sort", "echo", "grep", "cp", "mv", "pip", "tool"]  # fmt: skip
ARGS = ["-r", "-rf", "-fR", "--recursive", "--force", "--", "-C", "/repo", "push", "status",
        "-n", "5", "file.txt", "a b", "$HOME", "x*y", "-o", "out", "--output=o", "-auto-approve",
        "+main", "-la", "{a,b}", "'q'", "install", "-D"]  # fmt: skip
WRAPPERS = ["timeout 5", "env", "env FOO=1", "sudo -u root", "nice -n 3", "command", "nohup",
            "xargs", "time", "stdbuf -oL", "CI=1"]  # fmt: skip
SEPARATORS = [" ; ", " && ", " || ", " | ", "\n", " & "]
UNANALYSABLE = [
    "$x", "${x} -rf b", '"$(echo rm)" -rf b', 'eval "$y"', "source ./f.sh", ". ./f.sh",
    "curl -s u | sh", "cat f | bash", "bash", "sh -s", "PATH=/tmp ls", "export PATH=.",
    "alias ls=rm", "ls && (", "bash -c \"$c\"", "cat <<EOF | bash\nls\nEOF", "`which rm` x",
    "/bin/r? x", "sudo --bogus ls", "LD_PRELOAD=x.so ls", "bash <<< \"$(id)\"",
]  # fmt: skip

ALLOW_EVERYTHING = parse_policy(
    {
        "routes": {"default": {"channel": "C0APPROVALS"}},
        "rules": [
            {"name": "every-command", "match": {"command": {}}, "action": "allow"},
            {"name": "read-only", "match": {"command": {"read_only": True}}, "action": "allow"},
            {"name": "any-risk-free", "match": {"tool": "Bash"}, "action": "allow"},
            {"name": "push", "match": {"command": {"program": "git", "subcommand": "push"}},
             "action": "ask"},
        ],
    },
    source="properties",
)  # fmt: skip

words = st.sampled_from(ARGS)
simple = st.builds(
    lambda wrappers, program, args: " ".join([*wrappers, program, *args]),
    st.lists(st.sampled_from(WRAPPERS), max_size=3),
    st.sampled_from(PROGRAMS),
    st.lists(words, max_size=6),
)


@st.composite
def command_lines(draw: st.DrawFn, extra: st.SearchStrategy[str] | None = None) -> str:
    parts = draw(st.lists(simple, min_size=1, max_size=5))
    if extra is not None:
        parts.insert(draw(st.integers(0, len(parts))), draw(extra))
    out = parts[0]
    for part in parts[1:]:
        out += draw(st.sampled_from(SEPARATORS)) + part
    wrap = draw(st.sampled_from(["{}", "({})", "{{ {}; }}", "bash -c {!r}", "echo $({})"]))
    return wrap.format(out) if "!r" not in wrap else "bash -c " + shlex.quote(out)


def bounded(parsed: ParsedCommand) -> None:
    assert isinstance(parsed, ParsedCommand)
    assert parsed.nodes <= parse_module.MAX_NODES
    assert len(parsed.commands) <= parse_module.MAX_COMMANDS * 8


@settings(max_examples=400)
@given(st.text(alphabet=SHELL_CHARS, max_size=300))
def test_analysing_any_text_never_raises(text: str) -> None:
    bounded(analyse(text))


@settings(max_examples=100)
@given(st.text(max_size=200))
def test_analysing_any_unicode_never_raises(text: str) -> None:
    bounded(analyse(text))
    bounded(analyse(text.split(" ")))


@settings(max_examples=30)
@given(st.text(alphabet="a|;&()$`'\"{}<>\\\n ", min_size=2000, max_size=6000))
def test_long_hostile_text_stays_within_its_bounds(text: str) -> None:
    bounded(analyse(text))


@settings(max_examples=300)
@given(command_lines(extra=st.sampled_from(UNANALYSABLE)))
def test_a_command_with_an_unanalysable_part_is_never_allowed(command: str) -> None:
    event = ApprovalEvent(kind="command", tool_name="Bash", command=command, cwd="/srv/app")
    parsed = analyse(command)
    decision = ALLOW_EVERYTHING.evaluate(event)
    if not parsed.analysable:
        assert decision.action == "ask", (command, decision.matched, parsed.reasons)
        assert not {"every-command", "read-only"} & set(decision.matched)


@settings(max_examples=300)
@given(command_lines())
def test_normalising_is_idempotent(command: str) -> None:
    for c in analyse(command).commands:
        if c.program is None or c.dynamic or c.problem or c.stdin:
            continue
        again = analyse(join(c.argv)).commands
        assert len(again) == 1, (command, c.argv)
        (twice,) = again
        assert twice.argv == c.argv
        assert (twice.flags, twice.subcommand) == (c.flags, c.subcommand)


@settings(max_examples=200)
@given(command_lines())
def test_generated_commands_are_analysable_or_say_why(command: str) -> None:
    parsed = analyse(command)
    bounded(parsed)
    assert parsed.analysable or parsed.reasons
