"""The README's Python imports work: its Python section has one import line, from `approvals`,
naming only public names; every `from approvals… import …` line in it imports."""

from __future__ import annotations

import re
from pathlib import Path

import approvals

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
IMPORT = re.compile(r"^from approvals[\w.]* import .+$", re.MULTILINE)


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)


def section(title: str) -> str:
    found = re.search(rf"^### {re.escape(title)}\n(.*?)(?=^##)", README, re.DOTALL | re.MULTILINE)
    assert found, f"no '### {title}' section in the README"
    return found.group(1)


def test_the_python_section_has_one_import_line_from_approvals() -> None:
    lines = [line for block in python_blocks(section("Python")) for line in IMPORT.findall(block)]
    assert len(lines) == 1, lines
    [line] = lines
    assert line.startswith("from approvals import ")
    names = [n.strip() for n in line.removeprefix("from approvals import ").split(",")]
    assert set(names) <= set(approvals.__all__), set(names) - set(approvals.__all__)


def test_every_approvals_import_in_the_readme_imports() -> None:
    lines = [line for block in python_blocks(README) for line in IMPORT.findall(block)]
    assert len(lines) >= 3  # the Python section, OpenAI Agents, LangGraph
    for line in lines:
        exec(line, {})  # raises ImportError naming what is missing


def section_text(title: str) -> str:
    """A `##` section's text, up to the next `##` heading."""
    found = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", README, re.DOTALL | re.MULTILINE)
    assert found, f"no '## {title}' section in the README"
    return found.group(1)


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_links_inside_the_readme_point_at_its_headings() -> None:
    """Issue 15: "see the known issue above" pointed at nothing. Every `(#anchor)` link names
    a heading that is there, and nothing refers to a "known issue" section."""
    headings = {anchor(h) for h in re.findall(r"^#{1,6} (.+)$", README, re.MULTILINE)}
    links = set(re.findall(r"\]\(#([^)\s]+)\)", README))
    assert links, "the README links its sections"
    assert sorted(links - headings) == []
    assert "known issue" not in README.lower()


def test_one_benchmark_section_and_the_first_hour_facts() -> None:
    """Issue 15: the benchmark section appeared twice with different figures; the README said an
    invalid policy file stops `serve` with exit 1 (it is 2: tests/bot/core/test_serve_failures.py);
    the warning about the test suite's Redis sat only under Development."""
    headings = re.findall(r"^#{1,6} (.*benchmark.*)$", README, re.MULTILINE | re.IGNORECASE)
    assert headings == ["Benchmarks"]
    assert "An invalid file stops `serve` (exit 2)." in section_text("Policy")
    assert "private throwaway server" in section_text("Quick start")
