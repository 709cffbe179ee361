"""Review findings on policy files: quorums that no one can reach."""

from __future__ import annotations

import pytest

from approvals.policy_file import PolicyError, parse_policy


def test_a_rule_quorum_larger_than_its_routes_reviewers_is_refused() -> None:
    data = {
        "routes": {
            "default": {"channel": "C0DEF"},
            "pair": {"channel": "C0PAIR", "reviewers": ["U0ANN", "U0BOB"]},
            "team": {"channel": "C0TEAM", "reviewers": ["S0TEAM"]},
        },
        "rules": [
            {"name": "ok", "action": "ask", "route": "pair", "quorum": 2},
            {"name": "groups-may-be-big", "action": "ask", "route": "team", "quorum": 5},
            {"name": "three-of-two", "action": "ask", "route": "pair", "quorum": 3},
        ],
    }
    with pytest.raises(PolicyError) as caught:
        parse_policy(data, source="p.yaml")
    assert caught.value.problems == [
        "p.yaml: rules[2].quorum: quorum 3 needs at least 3 reviewers; route 'pair' lists 2"
    ]
