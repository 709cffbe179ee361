"""Masking: secrets and token-like values never survive into text bound for Slack."""

from __future__ import annotations

import json
import string

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from bot.masking.masker import (
    _MASKED,
    CACHE_MAX_LEN,
    CACHE_SIZE,
    MASK,
    MIN_SCRUB_LEN,
    _mask_text_cached,
    clear_cache,
    hidden_values,
    is_sensitive_key,
    mask_arguments,
    mask_text,
    mask_value,
    masked,
    outbound,
    secret_values,
)
from bot.masking.rules import RULES, find, normalise

ALNUM = string.ascii_letters + string.digits
UPPER_DIGITS = string.ascii_uppercase + string.digits

TOKENS = [
    "xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOp",
    "xoxp-1111-2222-3333-abcdef",
    "xoxa-2-abcdef123456",
    "xapp-1-A0123-456789-abcdef0123",
    "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
    "gho_16C7e42F292c6912E7710c838347Ae178B4a",
    "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
    "AKIAIOSFODNN7EXAMPLE",
    "sk-proj-abcdefghijklmnopqrstuvwxyz012345",
    "sk-ant-api03-abcdefghijklmnopqrstuvwxyz",
    "sk_live_abcdefghijklmnop",
]


@pytest.mark.parametrize("token", TOKENS)
def test_token_like_values_are_masked_in_text(token: str) -> None:
    text = f"run with {token} now"
    out = mask_text(text)
    assert token not in out
    assert out.startswith("run with ") and out.endswith(" now")
    assert MASK in out


def test_private_key_block_is_masked_whole() -> None:
    body = "MIIEpAIBAAKCAQEA7bq\nZm9vYmFyYmF6cXV4\n"
    text = f"key:\n-----BEGIN RSA PRIVATE KEY-----\n{body}-----END RSA PRIVATE KEY-----\ndone"
    out = mask_text(text)
    assert "MIIEpAIBAAKCAQEA7bq" not in out and "Zm9vYmFy" not in out
    assert out.endswith("\ndone")


def test_unterminated_private_key_is_masked_to_the_end() -> None:
    out = mask_text("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA")
    assert "b3BlbnNzaC1rZXktdjEAAAAA" not in out


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("password=hunter2 user=bob", f"password={masked(7)} user=bob"),
        ("secret=abc&x=1", f"secret={masked(3)}&x=1"),
        ("token=t0k3n", f"token={masked(5)}"),
        ('Approve f(password="hunter2", n=1)?', f'Approve f(password="{masked(7)}", n=1)?'),
        ("DB_PASSWORD: s3cr3t", f"DB_PASSWORD: {masked(6)}"),
        ("Server=x;Password=abc;User=y", f"Server=x;Password={masked(3)};User=y"),
        ("Authorization: Bearer abc.def", f"Authorization: Bearer {masked(7)}"),
        ("curl -H 'Bearer abcdef123'", f"curl -H 'Bearer {masked(9)}'"),
        ("postgres://app:pa55w0rd@db:5432/x", f"postgres://app:{masked(8)}@db:5432/x"),
        ("redis://:p@ss/w0rd@cache:6379", f"redis://:{masked(9)}@cache:6379"),
        ("mysql -u root -pS3cret! shop", f"mysql -u root -p{masked(7)} shop"),
        ("curl -u deploy:S3cret!x https://ci", f"curl -u deploy:{masked(8)} https://ci"),
    ],
)
def test_assignments_mask_only_the_value(text: str, expected: str) -> None:
    assert mask_text(text) == expected


def test_ordinary_text_is_left_alone() -> None:
    text = "Deploy web to production with 3 replicas (task-42), see https://example.com/a?b=c"
    assert mask_text(text) == text


def test_masking_is_idempotent() -> None:
    once = mask_text("token=abc ghp_16C7e42F292c6912E7710c838347Ae178B4a Bearer xyz")
    assert mask_text(once) == once


@pytest.mark.parametrize(
    "key",
    [
        "password",
        "db_passwd",
        "API_KEY",
        "apiKey",
        "private_key",
        "credentials",
        "Authorization",
        "github_token",
        "client_secret",
    ],
)
def test_sensitive_key_names(key: str) -> None:
    assert is_sensitive_key(key)


@pytest.mark.parametrize("key", ["name", "replicas", "path", "command", "author"])
def test_ordinary_key_names(key: str) -> None:
    assert not is_sensitive_key(key)


def test_low_sensitivity_masks_sensitive_keys_and_tokens_recursively() -> None:
    args = {
        "service": "web",
        "replicas": 3,
        "dry_run": False,
        "password": "hunter2",
        "env": {"API_KEY": "k-123", "REGION": "eu", "nested": [{"token": "t"}]},
        "headers": ["Authorization: Bearer abcdef", "Accept: json"],
        "credentials": {"user": "bob", "pass": "pw"},
    }
    out = mask_arguments(args, "low")
    assert out["service"] == "web" and out["replicas"] == 3 and out["dry_run"] is False
    assert out["password"] == masked(7)
    assert out["env"]["API_KEY"] == masked(5) and out["env"]["REGION"] == "eu"
    assert out["env"]["nested"] == [{"token": masked(1)}]
    assert out["headers"] == [f"Authorization: Bearer {masked(6)}", "Accept: json"]
    assert out["credentials"] == {"user": masked(3), "pass": masked(2)}
    assert args["password"] == "hunter2", "the input must not be changed"


def test_secret_sensitivity_masks_every_value_and_keeps_keys() -> None:
    args = {"to": "alice@example.com", "amount": 120, "meta": {"note": "x", "tags": ["a", "b"]}}
    out = mask_arguments(args, "secret")
    m = masked(1)
    assert out == {"to": masked(17), "amount": masked(3), "meta": {"note": m, "tags": [m, m]}}


def test_token_like_keys_are_masked_and_stay_distinct() -> None:
    args = {
        "ghp_16C7e42F292c6912E7710c838347Ae178B4a": 1,
        "ghp_26C7e42F292c6912E7710c838347Ae178B4a": 2,
    }
    out = mask_arguments(args, "low")
    assert sorted(out.values()) == [1, 2]
    assert not any(k.startswith("ghp_") for k in out)


def test_mask_value_keeps_shape() -> None:
    assert mask_value({"a": [1, {"b": None}]}) == {"a": [masked(1), {"b": masked(4)}]}
    assert mask_value("x" * 40) == masked(40) == f"{MASK}(32-63 chars)"


def test_hide_scrubs_literal_and_json_escaped_values() -> None:
    value = 'multi\nline "quoted" secret'
    text = f"raw {value} json {json.dumps(value)}"
    out = mask_text(text, hide=[value])
    assert value not in out and json.dumps(value)[1:-1] not in out


def test_hidden_values_by_sensitivity() -> None:
    args = {"user": "bob", "password": "hunter2", "n": {"api_key": 12345}}
    assert sorted(hidden_values(args, "low")) == ["12345", "hunter2"]
    assert sorted(hidden_values(args, "secret")) == sorted(secret_values(args))
    assert "bob" in hidden_values(args, "secret")


# ---------------------------------------------------------------- properties

_token = st.one_of(
    st.builds(
        lambda p, s: p + s,
        st.sampled_from(["xoxb-", "xoxp-", "xoxa-", "xapp-1-"]),
        st.text(ALNUM + "-", min_size=10, max_size=40),
    ),
    st.builds(
        lambda p, s: p + s,
        st.sampled_from(["ghp_", "gho_"]),
        st.text(ALNUM, min_size=20, max_size=40),
    ),
    st.builds(lambda s: "github_pat_" + s, st.text(ALNUM + "_", min_size=20, max_size=60)),
    st.builds(lambda s: "AKIA" + s, st.text(UPPER_DIGITS, min_size=16, max_size=16)),
    st.builds(lambda s: "sk-" + s, st.text(ALNUM + "-_", min_size=20, max_size=48)),
    st.builds(
        lambda k, v: f"{k}={v}",
        st.sampled_from(["password", "secret", "token"]),
        st.text(ALNUM + "!#$%*+/", min_size=6, max_size=30),
    ),
)
_filler = st.text(string.printable, max_size=40)


@settings(max_examples=300, deadline=None)
@given(prefix=_filler, token=_token, suffix=_filler)
@example(prefix="", token="secret=secret", suffix="")
def test_property_token_never_survives(prefix: str, token: str, suffix: str) -> None:
    text = f"{prefix} {token} {suffix}"
    key, _, value = token.rpartition("=") if "=" in token else ("", "", token)
    secret = value
    # The key name stays visible by design: a value that is part of it ("secret=secret")
    # or of the filler proves nothing.
    assume(all(secret not in part for part in (prefix, key, suffix)))
    out = mask_text(text)
    assert secret not in out
    nested = mask_arguments({"a": text, "b": [text, {"c": text}]}, "low")
    assert secret not in json.dumps(nested, ensure_ascii=False)


_json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20)
)
_json = st.recursive(
    _json_leaf,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(args=st.dictionaries(st.text(ALNUM, min_size=1, max_size=8), _json, max_size=6))
def test_property_secret_sensitivity_leaves_only_masks(args: dict[str, object]) -> None:
    out = mask_arguments(args, "secret")
    assert list(out) == [mask_text(k) for k in args]

    def leaves(value: object) -> list[object]:
        if isinstance(value, dict):
            return [x for v in value.values() for x in leaves(v)]
        if isinstance(value, list):
            return [x for v in value for x in leaves(v)]
        return [value]

    assert all(str(leaf).startswith(MASK) for leaf in leaves(out))


# -- the cache: a pure function's answers, kept; never a different answer ----------------------


_hostile_text = st.one_of(
    st.text(max_size=80),
    st.builds(lambda a, t, b: f"{a} {t} {b}", _filler, _token, _filler),
    st.builds(lambda a, t: f"{a}\u200b{t}", _filler, _token),  # a format character inside
)


@settings(max_examples=300, deadline=None)
@given(text=_hostile_text, hide=st.lists(st.text(max_size=12), max_size=3))
def test_property_cached_answer_is_the_fresh_answer(text: str, hide: list[str]) -> None:
    """A cached mask is exactly what masking afresh gives, for the same text and hidden
    values; the hidden values are part of the key (a text masked once without them is
    masked again with them)."""
    clear_cache()
    fresh = mask_text(text, hide=hide)
    assert mask_text(text, hide=tuple(hide)) == fresh  # from the cache
    assert mask_text(text, hide=iter(hide)) == fresh  # any iterable: the same key
    without = mask_text(text)
    clear_cache()
    assert mask_text(text) == without
    shown = _MASKED.sub("", mask_text(text, hide=hide))  # what is left beside the masks
    for value in hide:
        if len(value) >= MIN_SCRUB_LEN and value.isascii() and value.isprintable():
            assert value not in shown


def test_cache_is_bounded_and_skips_long_texts() -> None:
    clear_cache()
    for i in range(CACHE_SIZE + 100):
        mask_text(f"ordinary text {i}")
    assert _mask_text_cached.cache_info().currsize == CACHE_SIZE
    clear_cache()
    long_text = "x" * (CACHE_MAX_LEN + 1) + " token=" + TOKENS[0]
    assert TOKENS[0] not in mask_text(long_text)
    assert _mask_text_cached.cache_info().currsize == 0


@settings(max_examples=300, deadline=None)
@given(text=_hostile_text)
def test_property_hint_index_runs_the_rules_each_rule_would(text: str) -> None:
    """`find` picks the rules to run from one pass over the distinct hints: the same spans
    as asking each rule for its own hints (the rules passed as a copy take that path)."""
    norm = normalise(text)[0]
    assert find(norm) == find(norm, tuple(list(RULES)))


BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


def test_bidi_controls_never_reach_slack() -> None:
    """A tool name such as `deploy\u202etxt.exe` reads backwards in Slack: every string an
    agent gives is drawn without bidi embeddings, overrides and isolates."""
    from approvals.models import ApprovalConfig, ApprovalEvent, ApprovalRequest
    from bot.slack.render import request_message as blocks

    assert mask_text(f"run{BIDI} exe.txt") == "run exe.txt"
    assert outbound({"text": "a\u202eb", "blocks": [{"text": "\u2066c\u2069"}]}) == {
        "text": "ab",
        "blocks": [{"text": "c"}],
    }
    request = ApprovalRequest(
        event=ApprovalEvent(
            tool_name="deploy\u202etxt.exe",
            arguments={"k\u202e": "v\u2067alue", "list": ["\u202dx"]},
            agent="agent\u202e",
            session_id="s\u2068",
            command="ls \u202e-la",
        ),
        config=ApprovalConfig(prompt="ok\u202e?"),
        channel="C1",
    )
    for message in (blocks.request_message(request), blocks.decided_message(request)):
        text = json.dumps(message, ensure_ascii=False)
        assert not any(c in text for c in BIDI), text
        assert "deploytxt.exe" in text


def test_a_large_request_is_masked_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its post, update, reminders and App Home draw it again: the rules read a large text
    once (`_LargeCache`), not once per drawing."""
    from approvals.models import ApprovalConfig, ApprovalEvent, ApprovalRequest
    from bot.masking import masker
    from bot.slack.render import request_message as blocks

    clear_cache()
    reads: list[int] = []
    real_find = masker.find

    def counting(text: str, *args: object) -> object:
        reads.append(len(text))
        return real_find(text, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(masker, "find", counting)
    big = "authorization: " * 8000  # 120 KB
    request = ApprovalRequest(
        event=ApprovalEvent(tool_name="deploy", arguments={"a": big, "b": [big, "x"]}),
        config=ApprovalConfig(),
        channel="C1",
    )
    blocks.request_message(request)
    first = sum(n for n in reads if n >= len(big))
    assert first >= len(big)
    reads.clear()
    blocks.request_message(request)
    blocks.decided_message(request)
    assert sum(n for n in reads if n >= len(big)) == 0, "a large text was read again"
