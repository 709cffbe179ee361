"""docs/ARCHITECTURE.md stays true where it claims to be complete: every Lua script and every
Redis key builder is in it, and docstrings cite files that exist."""

from __future__ import annotations

import re
from pathlib import Path

from approvals._internal.store.keys import Keys

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "ARCHITECTURE.md").read_text()


def test_every_lua_script_is_described() -> None:
    scripts = sorted(
        p.name for p in (ROOT / "approvals" / "_internal" / "store" / "lua").glob("*.lua")
    )
    assert scripts
    missing = [name for name in scripts if f"`{name}`" not in DOC]
    assert missing == [], f"add these scripts to docs/ARCHITECTURE.md: {missing}"


def test_every_key_builder_is_described() -> None:
    builders = [n for n in vars(Keys) if not n.startswith("_") and n not in ("pattern",)]
    builders = [n for n in builders if n not in ("prefix", "retention_seconds")]
    assert "request" in builders
    missing = [n for n in builders if not re.search(rf"`{n}(\(|`)", DOC)]
    assert missing == [], f"add these keys to docs/ARCHITECTURE.md: {missing}"


def test_docstrings_cite_files_that_exist() -> None:
    cited: set[str] = set()
    for path in [*ROOT.glob("approvals/**/*.py"), *ROOT.glob("bot/**/*.py")]:
        assert "DESIGN.md" not in path.read_text(), f"{path} cites DESIGN.md, not in the repo"
        cited |= set(
            re.findall(
                # Repo-root paths only: not the `bot/…` inside `tests/bot/…`.
                r"(?<![\w./-])((?:docs|approvals|bot|config)/[\w./-]+\.(?:md|py|lua|yaml))",
                path.read_text(),
            )
        )
    assert "docs/ARCHITECTURE.md" in cited
    assert sorted(c for c in cited if not (ROOT / c).exists()) == []
