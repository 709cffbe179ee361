"""The secret rules against their corpus: every rule has a positive and a near miss, and holds."""

from __future__ import annotations

import json

import pytest

from bot.masking.masker import mask_arguments, mask_text, outbound
from bot.masking.rules import RULE_NAMES, RULES, find, is_secret_name, normalise
from tests.support.secret_corpus import FAKES, NEAR_MISSES, Fake, leaked_piece


def test_the_corpus_is_large_and_names_only_real_rules() -> None:
    assert len(FAKES) >= 100
    named = {f.rule for f in FAKES} | {n.rule for n in NEAR_MISSES}
    assert named <= set(RULE_NAMES), named - set(RULE_NAMES)


@pytest.mark.parametrize("rule", RULE_NAMES)
def test_every_rule_has_a_positive_and_a_near_miss(rule: str) -> None:
    assert any(f.rule == rule for f in FAKES), f"no fake in the corpus for {rule}"
    assert any(n.rule == rule for n in NEAR_MISSES), f"no near miss in the corpus for {rule}"


@pytest.mark.parametrize("fake", FAKES, ids=lambda f: f.rule)
def test_the_named_rule_finds_its_fake(fake: Fake) -> None:
    text = normalise(fake.text)[0]
    secret = normalise(fake.secret)[0]
    spans = [(s, e) for s, e, rule in find(text) if rule == fake.rule]
    if fake.value is None:
        at = text.index(secret)
        assert any(s <= at and at + len(secret) <= e for s, e in spans), (fake.rule, fake.text)
    else:  # lines of a list: the rule sees them joined
        assert spans, (fake.rule, fake.text)


@pytest.mark.parametrize("fake", FAKES, ids=lambda f: f.rule)
def test_no_piece_of_a_fake_survives_masking(fake: Fake) -> None:
    masked_args = mask_arguments({"a": fake.as_value, "b": {"c": [fake.as_value]}}, "low")
    for shown in (
        mask_text(fake.text),
        json.dumps(masked_args, ensure_ascii=False),
        json.dumps(outbound({"text": fake.text, "v": fake.as_value}), ensure_ascii=False),
    ):
        assert leaked_piece(shown, fake.secret) is None, (fake.rule, shown)


@pytest.mark.parametrize("near", NEAR_MISSES, ids=lambda n: n.rule)
def test_near_misses_are_left_alone(near: object) -> None:
    text = near.text  # type: ignore[attr-defined]
    assert mask_text(text) == text
    assert outbound({"text": text}) == {"text": text}


@pytest.mark.parametrize(
    "name",
    ["password", "DB_PASSWORD", "PGPASSWORD", "auth", "pass", "pw", "pwd", "OPENAI_KEY", "apiKey",
     "client_secret", "X-Api-Key", "AccountKey", "SECRET_KEY_BASE", "cookie", "secretToken",
     "\uff50\uff41\uff53\uff53\uff57\uff4f\uff52\uff44"],
)  # fmt: skip
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    ["author", "passenger", "bypass", "compass", "tokenizer", "primary_key", "public_key",
     "password_policy", "token_url", "key", "keyboard", "session_id", "cwd", "path"],
)  # fmt: skip
def test_not_secret_names(name: str) -> None:
    assert not is_secret_name(name)


def test_masks_keep_their_place_and_say_the_length_class() -> None:
    out = mask_arguments({"db": {"password": "x" * 20}, "n": 3}, "low")
    assert out == {"db": {"password": "••••••(16-31 chars)"}, "n": 3}
    assert mask_text(mask_text("token=abcdefgh1234")) == "token=••••••(8-15 chars)"


def test_a_fake_mask_does_not_shield_what_follows_it() -> None:
    out = mask_text("password=••••••hunter22 and ••••••(8-15 chars)ghp_" + "a1" * 18)
    assert "hunter22" not in out and "a1a1a1" not in out


def test_zero_width_and_full_width_are_masked_and_the_rest_is_kept() -> None:
    token = "ghp_" + "Ab1" * 12
    text = f"run\u200b {token[:9]}\u200b{token[9:]} \uff2f\uff2b"
    out = mask_text(text)
    assert "Ab1Ab1" not in normalise(out)[0]
    assert out.startswith("run\u200b ") and out.endswith(" \uff2f\uff2b")


@pytest.mark.parametrize("index", range(len(RULES)), ids=lambda i: f"{RULES[i].name}-{i}")
def test_every_pattern_finds_a_fake_of_its_own(index: int) -> None:
    """Each pattern (not just each rule name) is needed: some fake is found by it alone."""
    rule = RULES[index]
    for fake in FAKES:
        if fake.rule != rule.name or fake.value is not None:
            continue
        text, secret = normalise(fake.text)[0], normalise(fake.secret)[0]
        at = text.index(secret)
        if any(s <= at and at + len(secret) <= e for s, e, _ in find(text, (rule,))):
            return
    pytest.fail(f"no fake in the corpus is found by pattern {index} ({rule.name})")


@pytest.mark.parametrize(
    "text",
    ["...OPENAI_KEY=GRmn0iF3$9xq", "…OPENAI_KEY=GRmn0iF3$9xq", "--db.password=GRmn0iF3$9xq"],
)
def test_a_key_after_dots_or_dashes_is_still_a_key(text: str) -> None:
    """A clipped text starts with `…` or `...` (a reason kept by its end): the key right
    after it is no less a key."""
    from bot.masking.masker import mask_text

    assert "GRmn0iF3" not in mask_text(text)


@pytest.mark.parametrize(
    "text",
    ["…redis://:QPUCI3qRwKuO0XTg+5@cache.internal:6379/0", ".-redis://:QPUCI3qRwKuO0XTg+5@h"],
)
def test_a_url_after_dots_or_dashes_still_has_its_credentials_masked(text: str) -> None:
    from bot.masking.masker import mask_text

    assert "QPUCI3qRwKuO" not in mask_text(text)
