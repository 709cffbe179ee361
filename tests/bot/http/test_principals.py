"""Tokens → principals (`bot/http/principals.py`) and the settings that carry them."""

from __future__ import annotations

import pytest

from bot.core.settings import load_settings
from bot.http.principals import AuthProblem, Principal, Principals, derived_name, parse_entry


def test_entries_are_name_token_or_a_bare_token_with_a_derived_name() -> None:
    assert parse_entry("ci-agent:s3cr3t") == ("ci-agent", "s3cr3t")
    assert parse_entry("s3cr3t") == (derived_name("s3cr3t"), "s3cr3t")
    assert derived_name("s3cr3t").startswith("token-") and "s3cr3t" not in derived_name("s3cr3t")
    # Not a name before the colon: the whole entry is a bare token.
    assert parse_entry(":x") == (derived_name(":x"), ":x")
    assert parse_entry("a b:x")[1] == "a b:x"


def test_authenticate_names_the_caller_or_refuses() -> None:
    principals = Principals(["ci-agent:tok-a", "tok-bare"], ["ops:tok-admin", "tok-a"])
    # tok-a is in both lists: the admin entry (a bare token there) wins.
    assert principals.authenticate("Bearer tok-a") == Principal(derived_name("tok-a"), admin=True)
    assert principals.authenticate("Bearer tok-bare") == Principal(derived_name("tok-bare"))
    assert principals.authenticate("bearer  tok-admin ") == Principal("ops", admin=True)
    for header, status in ((None, 401), ("Basic x", 401), ("Bearer nope", 403)):
        with pytest.raises(AuthProblem) as refused:
            principals.authenticate(header)
        assert refused.value.status == status
    with pytest.raises(AuthProblem) as off:
        Principals([]).authenticate("Bearer tok-a")
    assert (off.value.status, off.value.code) == (503, "api_disabled")
    assert "tok-a" not in repr(principals)


def test_a_token_listed_as_admin_too_is_an_admin() -> None:
    principals = Principals(["ci-agent:tok-a"], ["ci-agent:tok-a"])
    assert principals.authenticate("Bearer tok-a") == Principal("ci-agent", admin=True)


def test_who_may_see_a_request() -> None:
    assert Principal("a").may_see("a") and not Principal("a").may_see("b")
    assert not Principal("a").may_see(None)
    assert Principal("ops", admin=True).may_see("b") and Principal("ops", admin=True).may_see(None)


def test_settings_read_admin_tokens_as_secrets() -> None:
    s = load_settings(
        {"APPROVALS_ADMIN_TOKENS": "ops:tok-admin, tok-2", "APPROVALS_API_TOKENS": "a:b"}
    )
    assert [t.get_secret_value() for t in s.approvals_admin_tokens] == ["ops:tok-admin", "tok-2"]
    assert "tok-admin" not in repr(s)
