"""the suite used whatever answered on 127.0.0.1:6379 and ran `CLIENT KILL TYPE pubsub`,
cutting every other client's subscriptions on that server. It runs on a private throwaway
server (tests/conftest.py `redis_url`) and, on any server, touches only what is its own:
no test or benchmark flushes a database or kills connections by type, only its own by id."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Commands that reach other clients' data or connections on a shared server.
FORBIDDEN = re.compile(
    r"\.flushall\(|\.flushdb\(|execute_command\([^)]*FLUSH(ALL|DB)"
    r"|execute_command\([^)]*[\"']KILL[\"'](?![^)]*[\"']ID[\"'])"
    r"|client_kill_filter\([^)]*_type",
    re.IGNORECASE,
)


def test_no_test_or_benchmark_disturbs_other_clients() -> None:
    offenders = []
    for path in [*ROOT.glob("tests/**/*.py"), *ROOT.glob("bench/**/*.py")]:
        if path.name == Path(__file__).name:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if FORBIDDEN.search(code):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []


def test_hypothesis_examples_have_no_deadline() -> None:
    """Hypothesis' default per-example deadline (200 ms) is a timing assert: under the soak's
    CPU burners a 0.4 ms example took 332 ms and failed the run. Every profile the suite
    loads has none, and no test sets one of its own."""
    from hypothesis import settings

    assert settings().deadline is None
    numbered = re.compile(r"deadline\s*=\s*(?!None)[\w.(]")
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted((ROOT / "tests").rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "settings(" in line and numbered.search(line)
    ]
    assert found == []


# -- realistic credentials ----------------------------------------------------------
#
# `xapp-test` hid that the bot masked its own app-level token on the way to
# `apps.connections.open`: the masker recognises a real `xapp-1-…` and not that. Tests and
# benchmarks use credentials of the shapes real ones have (tests/support/credentials.py).

#: Where any token shape is the point (what the masker must recognise, long or short), and
#: where the shapes are written down (checked by the last test below).
FREE_SHAPES = (
    "tests/support/secret_corpus.py",
    "tests/bot/masking/",
    "bench/bench_masking.py",
    "tests/support/credentials.py",
)
#: A Slack token in a string: a prefix and at least one letter or digit of body.
SLACK_TOKEN = re.compile(r"(?:xoxe\.)?xox[a-z]-[A-Za-z0-9][\w.-]*|xapp-[A-Za-z0-9][\w-]*")
#: The shapes Slack's tokens have, by prefix (the longest prefix first).
REAL_SHAPES = (
    ("xoxe.xoxb-", re.compile(r"xoxe\.xoxb-1-[A-Za-z0-9]{40,}")),
    ("xoxe-", re.compile(r"xoxe-1-[A-Za-z0-9]{40,}")),
    ("xoxb-", re.compile(r"xoxb-\d{10,13}-\d{13}-[A-Za-z0-9]{24}")),
    ("xoxp-", re.compile(r"xoxp-\d{10,13}-\d{10,13}-\d{13}-[0-9a-f]{32}")),
    ("xapp-", re.compile(r"xapp-1-A[A-Z0-9]{10}-\d{13}-[0-9a-f]{64}")),
)
#: Stand-ins that must not come back, wherever they are.
PLACEHOLDERS = re.compile(
    r"\b(?:xox[a-z]|xapp)-(?:test|wrong|revoked|fake|dummy|example|replace)"
    r"|test-signing-secret|\btest-token\b|legacy-unused",
    re.IGNORECASE,
)
#: Names under which a string is a signing secret (keyword, dict key, assignment, env), and
#: the `secret=` of `tests.support.e2e.sign`.
SIGNING_NAME = re.compile(r"signing_secret|^sign\(secret\)$", re.IGNORECASE)


def _strings(tree: ast.AST) -> list[tuple[int, str]]:
    """Every string literal in `tree` but docstrings and other bare strings (which may tell
    of a stand-in), f-strings' literal parts included, with its line."""
    bare = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in bare
    ]


def _named_strings(tree: ast.AST) -> list[tuple[int, str, str]]:
    """(line, name, literal) for each string literal given a name: `name="…"` keywords,
    `{"NAME": "…"}` items, `NAME = "…"` assignments."""
    found: list[tuple[int, str, str]] = []
    for node in ast.walk(tree):
        pairs: list[tuple[str, ast.AST]] = []
        if isinstance(node, ast.Call):
            func = node.func.id if isinstance(node.func, ast.Name) else ""
            for kw in node.keywords:
                if kw.arg:
                    name = f"sign({kw.arg})" if func == "sign" else kw.arg
                    pairs.append((name, kw.value))
        elif isinstance(node, ast.Dict):
            pairs += [
                (k.value, v)
                for k, v in zip(node.keys, node.values, strict=True)
                if isinstance(k, ast.Constant) and isinstance(k.value, str)
            ]
        elif isinstance(node, ast.Assign):
            pairs += [(t.id, node.value) for t in node.targets if isinstance(t, ast.Name)]
        for name, value in pairs:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found.append((value.lineno, name, value.value))
    return found


def credential_problems(source: str, *, any_shape: bool = False) -> list[str]:
    """What in `source` (a test or benchmark module) is an unrealistic Slack credential:
    a stand-in (`xoxb-test`, `test-token`, …), a Slack token not of its real shape (not
    checked in the masking corpus, where odd shapes are the point), a signing secret
    that is not 32 hex digits."""
    tree = ast.parse(source)
    problems = []
    for line, text in _strings(tree):
        for hit in PLACEHOLDERS.finditer(text):
            problems.append(f"{line}: stand-in {hit.group(0)!r}")
        if any_shape:
            continue
        for hit in SLACK_TOKEN.finditer(text):
            token = hit.group(0)
            shape = next((s for prefix, s in REAL_SHAPES if token.startswith(prefix)), None)
            if shape is None or not shape.fullmatch(token):
                problems.append(f"{line}: Slack token of no real shape {token!r}")
    for line, name, text in _named_strings(tree):
        if SIGNING_NAME.search(name) and not re.fullmatch(r"[0-9a-f]{32}", text):
            problems.append(f"{line}: signing secret {name} is not 32 hex digits: {text!r}")
    return problems


def test_the_credential_check_finds_stand_ins_and_wrong_shapes() -> None:
    planted = (
        'BOT = "xoxb-test"\n'
        'APP = "xapp-1-A111-3333-apps3kr1tvalue"\n'
        'env = {"SLACK_SIGNING_SECRET": "test-signing-secret", "APPROVALS_TOKEN": "test-token"}\n'
        'sign(body, secret="not-the-apps-secret")\n'
        'headers = {"Authorization": f"Bearer xoxb-1-2-{x}"}\n'
    )
    assert credential_problems(planted) == [
        "1: stand-in 'xoxb-test'",
        "1: Slack token of no real shape 'xoxb-test'",
        "2: Slack token of no real shape 'xapp-1-A111-3333-apps3kr1tvalue'",
        "3: stand-in 'test-signing-secret'",
        "3: stand-in 'test-token'",
        "5: Slack token of no real shape 'xoxb-1-2-'",
        "3: signing secret SLACK_SIGNING_SECRET is not 32 hex digits: 'test-signing-secret'",
        "4: signing secret sign(secret) is not 32 hex digits: 'not-the-apps-secret'",
    ]
    from tests.support.credentials import APP_TOKEN, BOT_TOKEN, SIGNING_SECRET

    real = f'a = "{BOT_TOKEN}"\nb = "{APP_TOKEN}"\nsign(b, secret="{SIGNING_SECRET}")\n'
    assert credential_problems(real) == []
    assert credential_problems('t = "xoxb-1-2"', any_shape=True) == []


def test_tests_and_benchmarks_use_realistic_slack_credentials() -> None:
    offenders = []
    for path in sorted([*ROOT.glob("tests/**/*.py"), *ROOT.glob("bench/**/*.py")]):
        if path.name == Path(__file__).name:
            continue
        name = str(path.relative_to(ROOT))
        free = name.startswith(FREE_SHAPES)
        offenders += [f"{name}:{p}" for p in credential_problems(path.read_text(), any_shape=free)]
    scripts = [p for p in (ROOT / "scripts").iterdir() if p.suffix == ".py"]
    for path in sorted(scripts):
        found = credential_problems(path.read_text())
        offenders += [f"{path.relative_to(ROOT)}:{p}" for p in found]
    assert offenders == []


def test_the_shared_credentials_and_the_emulator_defaults_have_real_shapes() -> None:
    from tests.support import credentials as c
    from tests.support.e2e import SIGNING_SECRET
    from tests.support.slack_emulator import SlackEmulator

    for token in (c.BOT_TOKEN, c.OTHER_BOT_TOKEN):
        assert c.BOT_TOKEN_SHAPE.fullmatch(token)
    for token in (c.APP_TOKEN, c.OTHER_APP_TOKEN):
        assert c.APP_TOKEN_SHAPE.fullmatch(token)
    assert SIGNING_SECRET == c.SIGNING_SECRET
    for secret in (c.SIGNING_SECRET, c.OTHER_SIGNING_SECRET):
        assert c.SIGNING_SECRET_SHAPE.fullmatch(secret)
    api = (c.API_TOKEN, c.OTHER_API_TOKEN, c.THIRD_API_TOKEN, c.ADMIN_TOKEN, c.UNKNOWN_API_TOKEN)
    assert all(c.API_TOKEN_SHAPE.fullmatch(t) for t in api) and len(set(api)) == len(api)
    emulator = SlackEmulator()
    assert (emulator.token, emulator.app_token) == (c.BOT_TOKEN, c.APP_TOKEN)
