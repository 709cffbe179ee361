"""The documentation stays navigable and true to the code: every relative link reaches a file
(and a heading, for `#anchor` links), every code path it names exists, and the reference pages
list every environment variable, metric and command the code has."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bot.cli.main import build_parser
from bot.core.settings import ENV_FILE_VARIABLE, VARIABLES
from bot.ops.metrics import Metrics

ROOT = Path(__file__).resolve().parents[1]
#: The pages a reader navigates: the README and everything under docs/.
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
#: Pages whose links are checked too (they name files that may come with other work, so their
#: code paths are not).
LINKED = [*DOCS, ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md", ROOT / "bench" / "README.md"]

FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"(`+)(?!`).+?(?<!`)\1(?!`)", re.DOTALL)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.MULTILINE)


def prose(text: str) -> str:
    """The text without fenced code blocks and inline code (where brackets are not links)."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file, with GitHub's -1, -2 … for repeated ones."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text())):
        base = anchor(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def relative_links(path: Path) -> list[str]:
    return [
        target
        for target in LINK.findall(prose(path.read_text()))
        if not re.match(r"[a-z][a-z0-9+.-]*:", target)  # https:, mailto:, …
    ]


def broken_links(path: Path) -> list[str]:
    problems = []
    for target in relative_links(path):
        file_part, _, fragment = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            problems.append(f"{target}: no such file")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            problems.append(f"{target}: no such heading in {dest.name}")
    return problems


@pytest.mark.parametrize("page", LINKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_heading(page: Path) -> None:
    assert broken_links(page) == []


def test_the_link_check_sees_links_and_catches_broken_ones(tmp_path: Path) -> None:
    """The check above would pass on pages with no links, or if it resolved nothing."""
    assert sum(len(relative_links(p)) for p in DOCS) > 50
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other\n\n## A `code` heading: yes\n")
    page.write_text(
        "# Page\n\n[ok](other.md#a-code-heading-yes) [self](#page) [web](https://example.com)\n"
        "[gone](missing.md) [bad anchor](other.md#nope) [bad self](#nowhere)\n"
        "`[not a link](missing-too.md)`\n\n```md\n[also not](missing-three.md)\n```\n"
    )
    assert broken_links(page) == [
        "missing.md: no such file",
        "other.md#nope: no such heading in other.md",
        "#nowhere: no such heading in page.md",
    ]


def test_the_readme_is_at_most_200_lines() -> None:
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= 200, f"README.md has {lines} lines; move detail to docs/"


#: A repository path in the docs: `bot/http/api.py`, `approvals/_internal/store/`, `scripts/serve`.
# Outside
#: `scripts/` a file has an extension, so `config/batchWrite` (a Codex method) is no path.
CODE_PATH = re.compile(
    r"(?<![\w./$~-])("
    r"(?:approvals|bot|tests|config|deploy|examples|bench|docs|requirements)/[\w./-]*(?:\.\w+|/)"
    r"|scripts/[\w.-]*\w"
    r")(?![\w/-])"
)


def test_every_code_path_named_in_the_docs_exists() -> None:
    missing = {}
    for page in DOCS:
        named = set(CODE_PATH.findall(page.read_text()))
        gone = sorted(p for p in named if not (ROOT / p).exists())
        if gone:
            missing[str(page.relative_to(ROOT))] = gone
    assert missing == {}


def test_the_code_path_check_finds_paths() -> None:
    named = {p for page in DOCS for p in CODE_PATH.findall(page.read_text())}
    assert {
        "bot/core/settings.py",
        "approvals/_internal/store/store.py",
        "bot/mcp/",
        "scripts/serve",
    } <= named
    text = "https://code.claude.com/docs/en/hooks, $CODEX_HOME/hooks.json, `config/batchWrite`,"
    assert CODE_PATH.findall(text + " `tests/bot/x.py`, scripts/lock.") == [
        "tests/bot/x.py",
        "scripts/lock",
    ]


def page_text(page: str) -> str:
    return (ROOT / "docs" / page).read_text()


def test_every_environment_variable_is_in_the_configuration_table() -> None:
    text = page_text("operating/configuration.md")
    rows = set(re.findall(r"^\| `([A-Z_]+)` \|", text, re.MULTILINE))
    variables = {*VARIABLES, ENV_FILE_VARIABLE}
    assert sorted(variables - rows) == []
    assert sorted(rows - variables) == []


def test_every_metric_is_in_the_metrics_page() -> None:
    text = page_text("operating/metrics.md")
    names = {family.name for family in Metrics().registry.collect()}
    assert len(names) > 20
    assert sorted(n for n in names if f"`{n}" not in text) == []


def test_every_command_is_in_the_cli_page() -> None:
    text = page_text("operating/cli.md")
    parser = build_parser()
    [sub] = [a for a in parser._actions if a.dest == "command"]
    commands = set(sub.choices)  # type: ignore[arg-type]
    assert {"serve", "approve", "doctor"} <= commands
    assert sorted(c for c in commands if f"`approval-bot {c}" not in text) == []
