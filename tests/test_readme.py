"""What the README and the pages it points to promise in text: the imports they show work, the
first approval says what `scripts/serve` does, the benchmark figures are one table of today's
figures, and the first-hour facts are where a reader looks for them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import approvals

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
AGENTS = ROOT / "docs" / "agents"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)


def approvals_imports(text: str) -> list[ast.ImportFrom]:
    """Every `from approvals… import …` statement in the text's Python blocks (parsed: a block
    may await at top level, and ruff formats a long import over several lines)."""
    found = []
    for block in python_blocks(text):
        flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        tree = compile(block, "<docs>", "exec", flags=flags)
        found += [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("approvals")
        ]
    return found


def section(text: str, title: str) -> str:
    """A `##` section's text, up to the next `##` heading (or the end)."""
    found = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.DOTALL | re.MULTILINE)
    assert found, f"no '## {title}' section"
    return found.group(1)


def test_the_python_page_has_one_import_from_approvals() -> None:
    imports = approvals_imports((AGENTS / "python.md").read_text())
    assert len(imports) == 1, [ast.unparse(i) for i in imports]
    [statement] = imports
    assert statement.module == "approvals"
    names = {alias.name for alias in statement.names}
    assert names <= set(approvals.__all__), names - set(approvals.__all__)


def test_every_approvals_import_in_the_docs_imports() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    imports = [statement for page in pages for statement in approvals_imports(page.read_text())]
    assert len(imports) >= 3  # Python, OpenAI Agents, LangGraph
    for statement in imports:
        exec(ast.unparse(statement), {})  # raises ImportError naming what is missing


def test_the_two_commands_are_on_the_first_screen() -> None:
    first_screen = "\n".join(README.splitlines()[:40])
    assert "scripts/serve" in first_screen
    assert "scripts/test" in first_screen


def test_the_first_approval_says_what_serve_does() -> None:
    """No foreign Redis by accident, a development token on loopback, and the commands to paste."""
    text = " ".join(section(README, "First approval without Slack").split())
    for fact in (
        "Without `REDIS_URL`, `serve`, the CLI and the hooks use the embedded Redis",
        "A Redis at `localhost:6379` is used only when `REDIS_URL` names it.",
        "The first log line names the Redis in use.",
        "`scripts/serve` listens on 127.0.0.1 only.",
        "`APPROVALS_DATA_DIR/dev-token` (mode 0600, reused on the next start)",
        "export APPROVALS_URL=http://127.0.0.1:3000 APPROVALS_TOKEN=<token>",
        "With tokens set, it listens on all interfaces as before and prints no token.",
        'curl -s -X POST "$APPROVALS_URL/v1/approvals" -H "Authorization: Bearer $APPROVALS_TOKEN"',
        ".venv/bin/approval-bot pending",
        ".venv/bin/approval-bot approve apr_…",
        '"$APPROVALS_URL/v1/approvals/apr_…?wait=30"',
    ):
        assert fact in text, fact


def test_one_table_of_todays_benchmark_figures() -> None:
    """The benchmark section appeared twice with different figures; figures
    came with commit hashes and dated passes. Now: one table, each row with its command."""
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    tables = re.findall(r"(?:^\|.*\|\n)+", text, re.MULTILINE)
    assert len(tables) == 1
    rows = tables[0].splitlines()[2:]
    assert len(rows) > 10
    assert all("bench." in row or "same run" in row or "tests/" in row for row in rows), rows
    assert re.findall(r"\b[0-9a-f]{7,40}\b", text) == []  # no commit hashes
    assert re.findall(r"\b20\d\d-\d\d-\d\d\b", text) == []  # no dated passes
    assert not re.search(r"^#+ .*benchmark", README, re.MULTILINE | re.IGNORECASE)


def test_the_first_hour_facts() -> None:
    """The README said an invalid policy file stops `serve` with exit 1 (it is 2:
    tests/bot/core/test_serve_failures.py); the warning about the test suite's Redis sat only under
    Development; "see the known issue above" pointed at nothing."""
    policy = " ".join((ROOT / "docs" / "operating" / "policy.md").read_text().split())
    assert "An invalid file stops `serve` (exit 2)." in policy
    assert "private throwaway server" in " ".join(section(README, "Quick start").split())
    assert "known issue" not in README.lower()


def test_the_licence_is_mit_and_the_readme_says_so() -> None:
    assert (ROOT / "LICENSE").read_text().startswith("MIT License\n")
    assert 'license = { text = "MIT" }' in (ROOT / "pyproject.toml").read_text()
    assert "MIT" in section(README, "Licence")
