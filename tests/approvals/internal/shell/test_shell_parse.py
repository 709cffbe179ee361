"""The grammar: every place a simple command can hide, word values, and the bounds on
hostile input (size, parse budget, nodes, depth, brace expansion) — past a bound the
command is unanalysable, never an exception."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from approvals._internal.shell import parse as parse_module
from approvals._internal.shell.model import ParsedCommand
from approvals._internal.shell.normalise import analyse
from approvals._internal.shell.words import (
    MAX_BRACE_WORDS,
    BraceLimit,
    ansi_c,
    brace_expand,
    text_of,
    unquoted_parts,
)

ROOT = Path(__file__).resolve().parents[4]


def programs(command: str) -> list[str | None]:
    return [c.program for c in analyse(command).commands]


def argvs(command: str) -> list[tuple[str, ...]]:
    return [c.argv for c in analyse(command).commands]


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("a; b && c || d & e", ["a", "b", "c", "d", "e"]),
        ("a | b |& c", ["a", "b", "c"]),
        ("a\nb\n\nc", ["a", "b", "c"]),
        ("(a; b) && { c; }", ["a", "b", "c"]),
        ("if a; then b; elif c; then d; else e; fi", ["a", "b", "c", "d", "e"]),
        ("for x in 1 2; do a; done; while b; do c; done; until d; do e; done",
         ["a", "b", "c", "d", "e"]),
        ("for ((i=0;i<2;i++)); do a; done", ["a"]),
        ("case $x in 1) a;; *) b;; esac", ["a", "b"]),
        ("f() { a; }; function g { b; }", ["a", "b"]),
        ("echo $(a) `b` $((1 + $(c)))", ["echo", "a", "b", "c"]),
        ("diff <(a) >(b)", ["diff", "a", "b"]),
        ("x=$(a) y=`b`", ["a", "b"]),
        ("echo ${x:-$(a)}", ["echo", "a"]),
        ("export A=$(a); local B=$(b)", ["export", "a", "local", "b"]),
        ("! a", ["a"]),
        ("[[ -f $(a) ]] && b", ["[[", "a", "b"]),
        ("cat <<EOF\n$(a)\nEOF", ["cat", "a"]),
        ("cat <<'EOF'\n$(a)\nEOF", ["cat"]),
        ("a # b", ["a"]),
    ],
)  # fmt: skip
def test_every_place_a_command_can_be(command: str, expected: list[str]) -> None:
    assert programs(command) == expected


@pytest.mark.parametrize(
    ("command", "argv"),
    [
        ("\\rm x", ("rm", "x")),
        ("'rm' x", ("rm", "x")),
        ('r""m x', ("rm", "x")),
        ("$'r\\x6d' x", ("rm", "x")),
        ("$'\\162\\155' x", ("rm", "x")),
        ('echo "a \\"b\\" \\$c"', ("echo", 'a "b" $c')),
        ("echo 'a\\nb'", ("echo", "a\\nb")),
        ("echo a\\ b", ("echo", "a b")),
        ("r\\\nm x", ("rm", "x")),
        ("echo a{1..3}", ("echo", "a1", "a2", "a3")),
        ("echo {a,b}{c,d}", ("echo", "ac", "ad", "bc", "bd")),
        ("echo '{a,b}' \\{a,b}", ("echo", "{a,b}", "{a,b}")),
        ("echo {}", ("echo", "{}")),
    ],
)
def test_word_values(command: str, argv: tuple[str, ...]) -> None:
    assert argvs(command)[0] == argv


def test_redirections_and_input() -> None:
    parsed = analyse("cat < in.txt > out.txt 2>&1; a | b; c <<< word")
    cat, a, b, c = parsed.commands
    assert [r.op for r in cat.redirects] == ["<", ">", ">&"]
    assert [r.writes_file for r in cat.redirects] == [False, True, False]
    assert cat.stdin == "file"
    assert (a.stdin, b.stdin) == (None, "pipe")
    assert (c.stdin, c.stdin_text) == ("herestring", "word")
    grouped = analyse("{ a; b; } > out")
    assert all(r.target and r.target.text == "out" for c in grouped.commands for r in c.redirects)


def test_redirections_alone_are_the_null_command_writing_their_files() -> None:
    """`ls; > /etc/passwd` truncates /etc/passwd: bash runs the redirection alone as `:`.
    Found while putting prefix grants on the model: the walk dropped it, and the read-only
    rule allowed the line."""
    ls, null = analyse("ls; > /etc/passwd").commands
    assert ls.program == "ls" and null.program == ":"
    assert [(r.op, r.target.text if r.target else None) for r in null.redirects] == [
        (">", "/etc/passwd")
    ]
    (reader,) = analyse("<in.txt").commands
    assert reader.program == ":" and reader.stdin == "file"


def test_a_word_across_a_line_break_is_unanalysable() -> None:
    """tree-sitter-bash reads `ls <newline>\\rm -rf /` as `ls` with the argument
    `<newline>rm`; bash ends `ls` at the line break and runs `rm -rf /`. Found while
    putting prefix grants on the model: the read-only rule allowed it."""
    for command in ("ls \n\\rm -rf /", "ls\t\n\\touch x", "ls\n\\ls"):
        parsed = analyse(command)
        assert not parsed.analysable, command
        assert any("line break" in p for p in parsed.problems), command
    assert analyse("ls \\\nx").analysable, "a line continuation is not a line break"
    assert analyse("echo 'a\nb'").analysable, "nor a quoted one"


def test_a_heredoc_piped_into_a_command() -> None:
    parsed = analyse("cat <<EOF | bash\nrm -rf x\nEOF")
    cat, bash = parsed.commands
    assert cat.stdin == "heredoc" and cat.stdin_text == "rm -rf x\n"
    assert bash.stdin == "pipe" and bash.problem is not None


def test_a_parse_error_is_unanalysable_but_what_was_found_is_kept() -> None:
    parsed = analyse("ls && (rm -rf x")
    assert not parsed.analysable
    assert any("does not parse" in p for p in parsed.problems)
    assert "rm" in [c.program for c in parsed.commands]


def test_an_empty_command_is_unanalysable() -> None:
    for command in ("", "   ", "# only a comment"):
        parsed = analyse(command)
        assert not parsed.analysable and parsed.commands == ()


def test_a_command_over_the_size_cap_is_unanalysable() -> None:
    parsed = analyse("echo " + "a" * parse_module.MAX_BYTES)
    assert not parsed.analysable
    assert parsed.commands == ()
    assert "too large" in parsed.problems[0]


def test_a_parse_over_its_cpu_budget_is_unanalysable() -> None:
    """`a | a | …` costs tree-sitter-bash quadratic time: 30 KB takes about a second, a
    hundred times the budget, so the parse is cancelled."""
    parsed = analyse("a | " * 7500 + "a")
    assert not parsed.analysable
    assert any("time budget" in p for p in parsed.problems)


def test_walks_stop_at_the_node_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parse_module, "MAX_NODES", 50)
    parsed = analyse("a; " * 100)
    assert not parsed.analysable
    assert parsed.nodes <= 50
    assert any("syntax nodes" in p for p in parsed.problems), parsed.problems


def test_deep_nesting_is_unanalysable_not_a_recursion_error() -> None:
    parsed = analyse("echo " + "$(" * 3000 + "ls" + ")" * 3000)
    assert not parsed.analysable
    deep = analyse("(" * 5000 + "ls" + ")" * 5000)
    assert not deep.analysable


def test_nested_shell_strings_stop_at_the_nesting_cap() -> None:
    parsed = analyse("eval " * 12 + "rm -rf x")
    assert not parsed.analysable
    assert any("nested more than" in r for r in parsed.reasons)
    quoted = analyse("sh -c " + shlex.quote("sh -c " + shlex.quote("sh -c 'rm -rf x'")))
    assert [c.context for c in quoted.commands] == [("sh -c", "sh -c", "sh -c")]


def test_brace_expansion_is_bounded() -> None:
    with pytest.raises(BraceLimit):
        brace_expand(unquoted_parts("{a,b}" * 9))
    assert len(brace_expand(unquoted_parts("{a,b}" * 8))) == MAX_BRACE_WORDS
    parsed = analyse("rm {a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}")
    assert parsed.commands[0].problem is not None and not parsed.analysable
    with pytest.raises(BraceLimit):
        brace_expand(unquoted_parts("{1..100000}"))


def test_brace_expansion_follows_bash() -> None:
    def expand(text: str) -> list[str]:
        return [text_of(p) for p in brace_expand(unquoted_parts(text))]

    assert expand("-{r,f}") == ["-r", "-f"]
    assert expand("a{,b}") == ["a", "ab"]
    assert expand("{a,{b,c}}d") == ["ad", "bd", "cd"]
    assert expand("{05..07}") == ["05", "06", "07"]
    assert expand("{c..a}") == ["c", "b", "a"]
    assert expand("{1..7..3}") == ["1", "4", "7"]
    assert expand("{a}") == ["{a}"]
    assert expand("{}") == ["{}"]


def test_ansi_c_escapes() -> None:
    assert ansi_c("r\\x6d") == "rm"
    assert ansi_c("\\u0072m\\t\\e\\cA\\'") == "rm\t\x1b\x01'"
    assert ansi_c("\\U0001F600") == "\U0001f600"
    assert ansi_c("\\UFFFFFFFF") == "\ufffd"


def test_an_analyser_failure_is_unanalysable_never_an_exception(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("planted")

    monkeypatch.setattr("approvals._internal.shell.normalise.parse_script", broken)
    parsed = analyse("ls")
    assert isinstance(parsed, ParsedCommand)
    assert not parsed.analysable
    assert "RuntimeError" in parsed.problems[0]


@pytest.mark.slow(reason="six child processes of 20,000 parses each")
def test_characters_past_the_bmp_after_a_brace_do_not_crash_the_process() -> None:
    """tree-sitter-bash 0.25 reads out of bounds on a character past U+FFFF after a `{` and
    can kill the process (SIGSEGV or SIGBUS, by memory layout: without the fix, 9 of 24 runs
    of this loop died on this VM). An agent's command must never do that. Run in child
    processes (a crash would take the test runner with it), each with its own layout."""
    child = Path(__file__).with_name("astral_child.py")
    for seed in (3, 4, 5, 19, 22, 24):
        done = subprocess.run(
            [sys.executable, str(child), str(seed)],
            capture_output=True,
            text=True,
            timeout=240,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert done.returncode == 0 and done.stdout.strip() == "ok", (seed, done.returncode)


def test_the_parser_is_never_given_a_character_past_the_bmp(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What tree-sitter reads has each such character as `++++`: the same byte length, so
    the words, sliced from the real text, keep it."""
    given: list[bytes] = []
    real = parse_module._parse

    def spy(source: bytes, budget: parse_module.Budget) -> object:
        given.append(source)
        return real(source, budget)

    monkeypatch.setattr(parse_module, "_parse", spy)
    text = "ls {😀,b} 𱡀 && echo 'é✅'"
    analyse(text)
    assert given and all(max(g) < 0xF0 for g in given)
    assert len(given[0]) == len(text.encode())
    assert given[0] == "ls {++++,b} ++++ && echo 'é✅'".encode()


def test_characters_past_the_bmp_keep_their_text_in_the_words() -> None:
    parsed = analyse('rm -rf 🐛dir && echo "fix 🐛" {😀,b}')
    words = [[w.text for w in c.words] for c in parsed.commands]
    assert [c.program for c in parsed.commands] == ["rm", "echo"]
    assert words == [["-rf", "🐛dir"], ["fix 🐛", "😀", "b"]]
