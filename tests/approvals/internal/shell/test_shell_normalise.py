"""Normalising: wrappers unwrapped, basenames, options split and spelled canonically per the
shipped tables, subcommands past global options, `--`, and the parsed view lines."""

from __future__ import annotations

import pytest

from approvals._internal.shell.matching import rule_flags
from approvals._internal.shell.normalise import analyse
from approvals._internal.shell.tables import OPTIONS, WRAPPERS
from approvals._internal.shell.view import explain, plain_command


def only(command: str):  # type: ignore[no-untyped-def]
    parsed = analyse(command)
    assert len(parsed.commands) == 1, parsed.commands
    return parsed.commands[0]


def test_the_issue_example_shows_the_command_behind_the_wrappers() -> None:
    lines = explain("CI=1 timeout 5 env rm -fr build")
    assert lines == ["rm -f -r build   (via timeout 5, env; with CI=1)"]


@pytest.mark.parametrize(
    ("command", "wrappers"),
    [
        ("env -i -u HOME FOO=1 rm x", ["env -i -u HOME"]),
        ("sudo -u root -E -- rm x", ["sudo -u root -E --"]),
        ("doas -u root rm x", ["doas -u root"]),
        ("timeout -k 1 5s rm x", ["timeout -k 1 5s"]),
        ("nice -n 5 rm x", ["nice -n 5"]),
        ("ionice -c 3 rm x", ["ionice -c 3"]),
        ("nohup rm x", ["nohup"]),
        ("stdbuf -oL -eL rm x", ["stdbuf -oL -eL"]),
        ("setsid -f rm x", ["setsid -f"]),
        ("time -p rm x", ["time -p"]),
        ("command rm x", ["command"]),
        ("builtin rm x", ["builtin"]),
        ("exec -a name rm x", ["exec -a name"]),
        ("xargs -0 -n 1 rm x", ["xargs -0 -n 1"]),
        ("busybox rm x", ["busybox"]),
        ("flock -w 5 /tmp/l rm x", ["flock -w 5 /tmp/l"]),
        ("chroot /srv rm x", ["chroot /srv"]),
        ("watch -x -n 1 rm x", ["watch -x -n 1"]),
        ("uv run --with httpx rm x", ["uv run --with httpx"]),
        ("python3 -m pip install x", ["python3 -m"]),
    ],
)
def test_wrappers_are_unwrapped(command: str, wrappers: list[str]) -> None:
    c = only(command)
    assert c.program in ("rm", "pip")
    assert list(c.wrappers) == wrappers
    assert c.problem is None


def test_every_wrapper_in_the_table_has_a_why() -> None:
    assert all(spec.why for spec in WRAPPERS.values())
    assert all(table.why for table in OPTIONS.values())


def test_a_wrapper_with_an_unknown_option_is_unanalysable() -> None:
    c = only("sudo --no-such-thing rm -rf x")
    assert c.program == "sudo" and c.problem and "unknown option" in c.problem


def test_a_wrapper_without_a_command_is_the_program() -> None:
    assert only("env").program == "env" and only("env").wrappers == ()
    assert only("xargs").argv == ("echo",)
    assert only("sudo -l").problem is not None


def test_basename_and_case() -> None:
    assert only("/usr/bin/rm -rf x").program == "rm"
    assert only("/usr/bin/rm -rf x").path == "/usr/bin/rm"
    assert only("RM x").program == "rm"


@pytest.mark.parametrize(
    ("command", "flags", "args"),
    [
        ("rm -rf x", {"-r", "-f"}, ("-r", "-f", "x")),
        ("rm --recursive --force x", {"-r", "-f"}, ("-r", "-f", "x")),
        ("rm --rec x", {"-r"}, ("-r", "x")),
        ("rm x -R", {"-r"}, ("x", "-r")),
        ("rm -- -rf", set(), ("--", "-rf")),
        ("cp -a -t dst src", {"-a", "-t"}, ("-a", "-t", "dst", "src")),
        ("cp -tdst src", {"-t"}, ("-t", "dst", "src")),
        ("chmod -R 755 x", {"-R"}, ("-R", "755", "x")),
        ("chmod -r x", {"-r"}, ("-r", "x")),
        ("chown --recursive u x", {"-R"}, ("-R", "u", "x")),
        ("mv -fv a b", {"-f", "-v"}, ("-f", "-v", "a", "b")),
        ("curl -sSLo out https://x", {"-s", "-S", "-L", "-o"}, ("-s", "-S", "-L", "-o", "out",
                                                                 "https://x")),
        ("curl --output=out https://x", {"-o"}, ("-o", "out", "https://x")),
        ("wget -nc -O f https://x", {"-nc", "-O"}, ("-nc", "-O", "f", "https://x")),
        ("kubectl -n prod delete pod x", {"-n"}, ("-n", "prod", "delete", "pod", "x")),
        ("terraform apply --auto-approve", {"-auto-approve"}, ("apply", "-auto-approve")),
        ("terraform apply -auto-approve=false", set(), ("apply", "-auto-approve=false")),
        ("docker -H h rm -f c", {"-H", "-f"}, ("-H", "h", "rm", "-f", "c")),
        ("npm --prefix web i -D x", {"--prefix", "-D"}, ("--prefix", "web", "i", "-D", "x")),
        ("pip install --force-rein x", {"--force-reinstall"},
         ("install", "--force-reinstall", "x")),
        ("pip install --upgr x", {"--upgr"}, ("install", "--upgr", "x")),  # ambiguous
        ("head -n5 x", {"-n", "-5"}, ("-n", "-5", "x")),
        ("find . -name x -delete", {"-name", "-delete"}, (".", "-name", "x", "-delete")),
    ],
)  # fmt: skip
def test_options_are_split_and_spelled_canonically(
    command: str, flags: set[str], args: tuple[str, ...]
) -> None:
    c = only(command)
    assert c.flags == flags
    assert c.args == args


@pytest.mark.parametrize(
    ("command", "subcommand", "flags"),
    [
        ("git -C /repo push -f", "push", {"-C", "--force"}),
        ("git --git-dir=/r/.git -c a=b push --force-with-lease", "push",
         {"--git-dir", "-c", "--force-with-lease"}),
        ("git --no-pager log -n 3", "log", {"-P", "--max-count"}),
        ("git commit -m -rf", "commit", {"--message"}),
        ("git clean -fdx", "clean", {"--force", "-d", "-x"}),
        ("git checkout -b new", "checkout", {"-b"}),
        ("npm i x", "install", set()),
        ("npm rm x", "uninstall", set()),
        ("kubectl --context prod delete ns x", "delete", {"--context"}),
        ("terraform -chdir=infra destroy", "destroy", {"-chdir"}),
        ("docker --context x push img", "push", {"-c"}),
    ],
)  # fmt: skip
def test_subcommands_follow_global_options(command: str, subcommand: str, flags: set[str]) -> None:
    c = only(command)
    assert c.subcommand == subcommand
    assert c.flags == flags


@pytest.mark.parametrize(
    ("program", "subcommand", "spellings"),
    [
        ("rm", None, ["-r", "-R", "--recursive", "--recur"]),
        ("rm", None, ["-f", "--force"]),
        ("cp", None, ["-r", "-R", "--recursive"]),
        ("mv", None, ["-f", "--force"]),
        ("chmod", None, ["-R", "--recursive"]),
        ("chown", None, ["-R", "--recursive"]),
        ("curl", None, ["-o", "--output"]),
        ("curl", None, ["-k", "--insecure"]),
        ("wget", None, ["-O", "--output-document"]),
        ("kubectl", None, ["-A", "--all-namespaces"]),
        ("terraform", None, ["-auto-approve", "--auto-approve"]),
        ("docker", None, ["-f", "--force"]),
        ("npm", None, ["-g", "--global"]),
        ("pip", None, ["-U", "--upgrade"]),
        ("git", "push", ["-f", "--force", "--forc"]),
        ("git", "clean", ["-f", "--force"]),
        ("git", "branch", ["-d", "--delete"]),
    ],
)
def test_flag_equivalences(program: str, subcommand: str | None, spellings: list[str]) -> None:
    """Each spelling of a rule's flag stands for the same canonical option (git --forc is
    ambiguous among --force, --force-with-lease, … only for git; here the table resolves
    the unique prefix --forc to --force only when it is unique)."""
    canon = {frozenset(rule_flags(program, subcommand, s)) for s in spellings if s != "--forc"}
    assert len(canon) == 1, canon


def test_git_abbreviations_are_resolved_only_when_unique() -> None:
    assert only("git push --force-w").flags == {"--force-with-lease"}
    assert only("git push --forc").flags == {"--forc"}  # ambiguous: git refuses it


def test_argv_lists_are_analysed_like_command_lines() -> None:
    parsed = analyse(["bash", "-lc", "git status && rm -rf x"])
    assert [c.argv for c in parsed.commands] == [("git", "status"), ("rm", "-r", "-f", "x")]
    assert [c.context for c in parsed.commands] == [("bash -c",), ("bash -c",)]
    assert analyse(["rm", "a b; c"]).commands[0].argv == ("rm", "a b; c")


def test_inner_commands_keep_the_outer_wrappers_and_redirections() -> None:
    parsed = analyse("sudo -u root bash -c 'cat /etc/shadow' > out.txt")
    (cat,) = parsed.commands
    assert cat.program == "cat" and cat.wrappers == ("sudo -u root",)
    assert [r.target.text for r in cat.redirects if r.target] == ["out.txt"]


def test_plain_command_is_one_simple_command_without_anything_around_it() -> None:
    assert plain_command("npm test -- -k x") == ("npm", "test", "--", "-k", "x")
    assert plain_command(["git", "status"]) == ("git", "status")
    for command in (
        "ls; pwd",
        "ls > x",
        "FOO=1 ls",
        "sudo ls",
        "echo $(id)",
        "echo $HOME",
        "/bin/ls",
        "ls *.py",
        "bash -c ls",
        "x=1; ls",
        "",
        None,
    ):
        assert plain_command(command) is None, command


def test_explain_names_what_cannot_be_analysed() -> None:
    lines = explain("ls && $cmd -rf x")
    assert lines[0] == "ls"
    assert "UNANALYSABLE: the program is only known when it runs" in lines[1]
    assert explain(None) == ["UNANALYSABLE: no command given"]
