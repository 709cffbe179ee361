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
