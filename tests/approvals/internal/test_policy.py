"""Policy: rule matching and merging, routes and sensitivity, timeouts, file loading and errors."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from approvals._internal.policy import Policy, Route
from approvals._internal.policy_file import (
    PolicyError,
    default_policy,
    load_policy,
    parse_policy,
)
from approvals.errors import InvalidRequest
from approvals.models import ApprovalConfig, ApprovalEvent, RouteFloor

EXAMPLE = Path(__file__).resolve().parents[3] / "config" / "policy.example.yaml"

ROUTES: dict[str, Any] = {
    "default": {"channel": "C0DEFAULT", "reviewers": ["U0ANN"]},
    "team": {"channel": "C0TEAM", "reviewers": ["S0TEAM"]},
    "ops": {
        "channel": "C0OPS",
        "reviewers": ["U0ANN", "U0BOB"],
        "quorum": 2,
        "deadline_seconds": 60,
    },
    "big": {"channel": "C0BIG", "reviewers": ["S0BIG"], "quorum": 3},
    "security": {"channel": "G0SEC", "reviewers": ["S0SEC"], "quorum": 2},
    "privacy": {"channel": "C0PII", "reviewers": ["S0PII"]},
}


def make_policy(rules: list[dict[str, Any]], **extra: Any) -> Policy:
    data = {"routes": ROUTES, "defaults": {"deadline_seconds": 1800}, "rules": rules, **extra}
    return parse_policy(copy.deepcopy(data), source="test.yaml")


def event(tool: str = "Bash", **fields: Any) -> ApprovalEvent:
    return ApprovalEvent(tool_name=tool, **fields)


def allow(name: str, reason: str | None = None, **match: Any) -> dict[str, Any]:
    return {"name": name, "action": "allow", "match": match, "reason": reason}


def deny(name: str, reason: str | None = None, **match: Any) -> dict[str, Any]:
    return {"name": name, "action": "deny", "match": match, "reason": reason}


def ask(name: str, reason: str | None = None, **fields: Any) -> dict[str, Any]:
    match = fields.pop("match", {})
    return {"name": name, "action": "ask", "match": match, "reason": reason, **fields}


# -- evaluation: (rules, event, caller config, expected decision fields) ---------------------


def case(
    case_id: str,
    rules: list[dict[str, Any]],
    ev: ApprovalEvent,
    expected: dict[str, Any],
    **config: Any,
) -> Any:
    return pytest.param(rules, ev, config, expected, id=case_id)


# fmt: off
EVALUATE = [
    case("no-rules-ask-default", [], event(),
         {"action": "ask", "matched": (), "winners": (), "reason": None,
          "route_name": "default", "quorum": 1, "deadline_seconds": 1800}),
    case("glob-allow", [allow("gh reads", tool="mcp__github__get_*")],
         event("mcp__github__get_issue"),
         {"action": "allow", "winners": ("gh reads",), "route_name": None, "route": None}),
    case("glob-is-whole-name", [allow("bash", tool="Bash")], event("BashTool"),
         {"action": "ask", "matched": ()}),
    # A name pattern holds at both ends: `allow tool: Read` must not allow a tool that only
    # ends (prefix added), starts, or contains the name somewhere inside.
    case("glob-is-anchored-at-start", [allow("reads", tool="Read")], event("mcp__evil__Read"),
         {"action": "ask", "matched": ()}),
    case("glob-wildcard-is-anchored-at-start", [allow("gh", tool="mcp__github__get_*")],
         event("mcp__evil__mcp__github__get_issue"), {"action": "ask", "matched": ()}),
    case("glob-infix-no-match", [allow("reads", tool="Read")], event("xReadx"),
         {"action": "ask", "matched": ()}),
    case("glob-wildcard-infix-no-match", [allow("gh", tool="*github*")], event("mcp__gitlab__x"),
         {"action": "ask", "matched": ()}),
    case("glob-agent-is-anchored-at-start", [allow("b", agent="billing-*")],
         event(agent="evil-billing-bot"), {"action": "ask", "matched": ()}),
    case("regex-start-anchor-holds", [allow("reads", tool="/^Read$/")],
         event("mcp__evil__Read"), {"action": "ask", "matched": ()}),
    case("regex-start-anchor-infix", [allow("gh", tool="/^mcp__github__/")],
         event("evil__mcp__github__get"), {"action": "ask", "matched": ()}),
    case("glob-list-any", [allow("reads", tool=["Read", "Grep"])], event("Grep"),
         {"action": "allow"}),
    case("regex-tool", [allow("git", tool="/^mcp__(github|gitlab)__/")],
         event("mcp__gitlab__push"), {"action": "allow"}),
    case("regex-tool-is-searched", [allow("git", tool="/github/")], event("x_github_y"),
         {"action": "allow"}),
    case("regex-tool-anchored", [allow("git", tool="/^github$/")], event("x_github_y"),
         {"action": "ask"}),
    case("argument-regex", [deny("rm", "no rm -rf", arguments={"command": "^rm -rf"})],
         event(arguments={"command": "rm -rf /tmp"}),
         {"action": "deny", "reason": "no rm -rf", "winners": ("rm",)}),
    case("argument-regex-anchored", [deny("rm", "no", arguments={"command": "^rm -rf"})],
         event(arguments={"command": "echo rm -rf"}), {"action": "ask"}),
    case("missing-argument-no-match", [deny("rm", "no", arguments={"command": "."})],
         event(arguments={"cmd": "rm -rf"}), {"action": "ask", "matched": ()}),
    case("argument-list-joined", [deny("rm", "no", arguments={"command": "^rm -rf /$"})],
         event(arguments={"command": ["rm", "-rf", "/"]}), {"action": "deny"}),
    case("argument-number", [deny("big", "no", arguments={"count": "^[0-9]{4,}$"})],
         event(arguments={"count": 12345}), {"action": "deny"}),
    case("argument-object-as-json", [deny("prod", "no", arguments={"target": '"env": "prod"'})],
         event(arguments={"target": {"env": "prod", "a": 1}}), {"action": "deny"}),
    case("command-falls-back-to-event-field",
         [deny("rm", "no", kind="command", arguments={"command": "^rm "})],
         event("shell", kind="command", command="rm -rf /"), {"action": "deny"}),
    case("kind-no-match", [deny("cmd", "no", kind=["command", "file"])], event(),
         {"action": "ask"}),
    case("kind-match", [deny("cmd", "no", kind="file")], event("Write", kind="file"),
         {"action": "deny"}),
    case("agent-glob", [ask("billing", match={"agent": "billing-*"}, route="team")],
         event(agent="billing-bot"), {"action": "ask", "route_name": "team"}),
    case("agent-missing-no-match", [ask("billing", match={"agent": "billing-*"}, route="team")],
         event(), {"action": "ask", "route_name": "default", "matched": ()}),
    case("session-regex", [allow("nightly", session=r"/^nightly-\d{8}$/")],
         event(session_id="nightly-20240101"), {"action": "allow"}),
    case("session-no-match", [allow("nightly", session=r"/^nightly-\d{8}$/")],
         event(session_id="nightly-x"), {"action": "ask"}),
    case("sensitivity-match", [deny("pii", "no pii", sensitivity=["pii", "secret"])], event(),
         {"action": "deny", "sensitivity": "pii"}, sensitivity="pii"),
    case("sensitivity-no-match", [deny("pii", "no pii", sensitivity="pii")], event(),
         {"action": "ask"}, sensitivity="low"),
    # conflicting rules: deny > ask > allow; the reasons of the winning rank, joined
    case("deny-beats-ask-and-allow",
         [allow("a1", "fine"), ask("k1", "check"), deny("d1", "first"), allow("a2"),
          deny("d2", "second")], event(),
         {"action": "deny", "reason": "first\n\nsecond", "winners": ("d1", "d2"),
          "matched": ("a1", "k1", "d1", "a2", "d2"), "route_name": None}),
    case("ask-beats-allow", [allow("a1", "fine"), ask("k1", "check one"), ask("k2", "check two")],
         event(), {"action": "ask", "reason": "check one\n\ncheck two", "winners": ("k1", "k2"),
                   "route_name": "default"}),
    case("allows-merge", [allow("a1", "one"), allow("a2", "two"), allow("a3")], event(),
         {"action": "allow", "reason": "one\n\ntwo", "winners": ("a1", "a2", "a3")}),
    case("deny-without-reason", [deny("quiet")], event(),
         {"action": "deny", "reason": "denied by policy rule 'quiet'"}),
    case("non-matching-rules-ignored", [allow("no", tool="Read"), deny("rm", "no", tool="Read")],
         event(), {"action": "ask", "matched": ()}),
    # routes: the strictest quorum wins, then the first
    case("stricter-route", [ask("t", route="team"), ask("o", route="ops")], event(),
         {"route_name": "ops", "quorum": 2, "deadline_seconds": 60}),
    case("tie-first-route", [ask("t", route="team"), ask("d")], event(),
         {"route_name": "team", "quorum": 1}),
    case("quorum-override-is-strictest", [ask("o", route="ops"), ask("t", route="team", quorum=3)],
         event(), {"route_name": "team", "quorum": 3}),
    # sensitivity: raised by rules, never lowered; `secret` asks on the security route
    case("rule-raises-sensitivity", [ask("creds", route="team", sensitivity="secret")], event(),
         {"route_name": "security", "quorum": 2, "sensitivity": "secret"}),
    case("caller-secret-no-rule", [], event(),
         {"action": "ask", "route_name": "security", "quorum": 2, "sensitivity": "secret"},
         sensitivity="secret"),
    case("override-never-lowers", [ask("low", sensitivity="low")], event(),
         {"sensitivity": "secret", "route_name": "security"}, sensitivity="secret"),
    case("sensitivity-route-keeps-quorum", [ask("b", route="big")], event(),
         {"route_name": "security", "quorum": 3}, sensitivity="secret"),
    case("allow-not-rerouted", [allow("ok")], event(),
         {"action": "allow", "route_name": None, "sensitivity": "secret"}, sensitivity="secret"),
]
# fmt: on


@pytest.mark.parametrize(("rules", "ev", "config", "expected"), EVALUATE)
def test_evaluate(
    rules: list[dict[str, Any]],
    ev: ApprovalEvent,
    config: dict[str, Any],
    expected: dict[str, Any],
) -> None:
    policy = make_policy(rules, sensitivity_routes={"pii": "privacy", "secret": "security"})
    decision = policy.evaluate(ev, ApprovalConfig(**config))
    got = {field: getattr(decision, field) for field in expected}
    assert got == expected
    if decision.action == "ask":
        assert decision.route == policy.routes[decision.route_name or ""]


@pytest.mark.parametrize(
    ("routes", "caller", "expected"),
    [
        ({"pii": "privacy"}, "secret", "privacy"),  # no secret entry: the pii one
        ({"pii": "privacy"}, "low", "default"),
        ({"secret": "security"}, "pii", "default"),
        ({"low": "team", "secret": "security"}, "pii", "team"),
    ],
)
def test_sensitivity_route_lookup(routes: dict[str, str], caller: str, expected: str) -> None:
    policy = make_policy([], sensitivity_routes=routes)
    decision = policy.evaluate(event(), ApprovalConfig.model_validate({"sensitivity": caller}))
    assert decision.route_name == expected


@pytest.mark.parametrize(
    ("route_deadline", "default_deadline", "caller", "expected"),
    [(60, 1800, 5, 60), (None, 1800, 5, 1800), (None, None, 5, 5), (None, None, None, None)],
)
def test_deadline_policy_first_then_caller(
    route_deadline: float | None,
    default_deadline: float | None,
    caller: float | None,
    expected: float | None,
) -> None:
    data = {
        "routes": {"default": {"channel": "C0D", "deadline_seconds": route_deadline}},
        "defaults": {"deadline_seconds": default_deadline},
    }
    policy = parse_policy(data, source="t.yaml")
    decision = policy.evaluate(event(), ApprovalConfig(deadline_seconds=caller))
    assert decision.deadline_seconds == expected


def test_evaluate_without_config_and_on_unchecked_policy() -> None:
    assert make_policy([deny("x", "no")]).evaluate(event()).action == "deny"
    decision = Policy().evaluate(event())
    assert (decision.action, decision.route_name, decision.route) == ("ask", "default", None)


# -- timeouts ------------------------------------------------------------------------------

TIMEOUT_ROUTES: dict[str, Any] = {
    "default": {"channel": "C0D"},
    "first": {
        "channel": "C0A",
        "deadline_seconds": 10,
        "on_timeout": "escalate",
        "escalate_to": "second",
        "max_escalations": 2,
    },
    "second": {
        "channel": "C0B",
        "deadline_seconds": 20,
        "on_timeout": "escalate",
        "escalate_to": "last",
    },
    "last": {"channel": "C0C", "quorum": 1},
    "auto": {"channel": "C0E", "on_timeout": "approve"},
}


@pytest.mark.parametrize(
    ("route", "escalations", "expected"),
    [
        ("first", 0, ("escalate", "second", 20)),
        ("first", 1, ("escalate", "second", 20)),
        ("first", 2, ("deny", None, None)),  # max_escalations reached
        ("second", 1, ("escalate", "last", 99)),  # target without deadline: the default's
        ("last", 2, ("deny", None, None)),
        ("auto", 0, ("approve", None, None)),
        ("default", 0, ("deny", None, None)),
        ("removed-by-reload", 0, ("deny", None, None)),
    ],
)
def test_on_timeout(route: str, escalations: int, expected: tuple[Any, ...]) -> None:
    policy = parse_policy(
        {"routes": TIMEOUT_ROUTES, "defaults": {"deadline_seconds": 99}}, source="t.yaml"
    )
    action = policy.on_timeout(route, escalations)
    assert (action.action, action.route_name, action.deadline_seconds) == expected
    if action.route_name:
        assert action.route == policy.routes[action.route_name]


# -- validation errors: each names the file, the field path and the problem -----------------


def valid() -> dict[str, Any]:
    return {
        "routes": {
            "default": {"channel": "C0DEFAULT"},
            "ops": {"channel": "C0OPS", "reviewers": ["U0ANN", "S0OPS"]},
        },
        "rules": [{"name": "a", "action": "ask", "route": "ops"}],
    }


def with_route(**fields: Any) -> dict[str, Any]:
    data = valid()
    data["routes"]["x"] = {"channel": "C0X", **fields}
    return data


def with_rule(rule: dict[str, Any]) -> dict[str, Any]:
    data = valid()
    data["rules"].append(rule)
    return data


def merged(data: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {**data, **top}


def err(case_id: str, data: dict[str, Any], expected: str) -> Any:
    return pytest.param(data, expected, id=case_id)


CYCLE = {
    "default": {
        "channel": "C0D",
        "on_timeout": "escalate",
        "escalate_to": "b",
        "deadline_seconds": 5,
    },
    "b": {"channel": "C0B", "on_timeout": "escalate", "escalate_to": "c", "deadline_seconds": 5},
    "c": {"channel": "C0C", "on_timeout": "escalate", "escalate_to": "b", "deadline_seconds": 5},
}

# fmt: off
ERRORS = [
    err("unknown-route", with_rule({"name": "b", "action": "ask", "route": "opz"}),
        "rules[1].route: unknown route 'opz' (routes: default, ops)"),
    err("missing-escalate-to", with_route(on_timeout="escalate", deadline_seconds=5),
        "routes.x.escalate_to: required when on_timeout is 'escalate'"),
    err("escalate-to-unknown",
        with_route(on_timeout="escalate", escalate_to="nowhere", deadline_seconds=5),
        "routes.x.escalate_to: unknown route 'nowhere'"),
    err("escalate-to-without-escalate", with_route(escalate_to="ops"),
        "routes.x.escalate_to: only used when on_timeout is 'escalate', not 'deny'"),
    err("escalation-cycle", merged(valid(), routes=CYCLE, rules=[]),
        "routes.b.escalate_to: escalation cycle b -> c -> b"),
    err("escalation-self-cycle",
        with_route(on_timeout="escalate", escalate_to="x", deadline_seconds=5),
        "routes.x.escalate_to: escalation cycle x -> x"),
    err("approve-without-deadline", with_route(on_timeout="approve"),
        "routes.x.on_timeout: 'approve' needs a deadline"),
    err("max-escalations-zero", with_route(max_escalations=0),
        "routes.x.max_escalations: input should be greater than or equal to 1 (got 0)"),
    err("bad-argument-regex",
        with_rule({"name": "b", "action": "deny", "match": {"arguments": {"command": "^("}}}),
        "rules[1].match.arguments.command: invalid regex '^(': missing ), unterminated subpattern"),
    err("bad-tool-regex",
        with_rule({"name": "b", "action": "deny", "match": {"tool": ["Bash", "/[a-/"]}}),
        "rules[1].match.tool: invalid regex '[a-'"),
    err("bad-reviewer-id", with_route(reviewers=["U0ANN", "alice"]),
        "routes.x.reviewers[1]: 'alice' is not a Slack user id (U…, W…) or user-group id (S…)"),
    err("channel-as-reviewer", with_route(reviewers=["C0CHANNEL"]),
        "routes.x.reviewers[0]: 'C0CHANNEL' is not a Slack user id"),
    err("channel-name-not-id", merged(valid(), routes={"default": {"channel": "#approvals"}}),
        "routes.default.channel: '#approvals' is not a Slack channel id"),
    err("unknown-route-field", merged(valid(), routes={"default": {"chanel": "C0D"}}),
        "routes.default.chanel: unknown field; did you mean 'channel'?"),
    err("missing-channel", merged(valid(), routes={"default": {"chanel": "C0D"}}),
        "routes.default.channel: required, but missing"),
    err("unknown-top-field", merged(valid(), rulez=[]),
        "rulez: unknown field; did you mean 'rules'?"),
    err("unknown-match-field",
        with_rule({"name": "b", "action": "allow", "match": {"tools": "Bash"}}),
        "rules[1].match.tools: unknown field; did you mean 'tool'?"),
    err("duplicate-rule-name", with_rule({"name": "a", "action": "allow"}),
        "rules[1].name: duplicate rule name 'a' (also rules[0])"),
    err("missing-rule-name", with_rule({"action": "allow"}),
        "rules[1].name: required, but missing"),
    err("bad-action", with_rule({"name": "b", "action": "alow"}),
        "rules[1].action: input should be 'allow', 'deny' or 'ask' (got 'alow')"),
    err("route-on-deny", with_rule({"name": "b", "action": "deny", "route": "ops"}),
        "rules[1].route: only an 'ask' rule takes route; this rule says 'deny'"),
    err("quorum-on-allow", with_rule({"name": "b", "action": "allow", "quorum": 2}),
        "rules[1].quorum: only an 'ask' rule takes quorum"),
    err("bad-event-kind", with_rule({"name": "b", "action": "ask", "match": {"kind": "choice"}}),
        "rules[1].match.kind[0]: input should be 'tool', 'command', 'file' or 'permissions' "
        "(got 'choice')"),
    err("wrong-type-int", with_route(quorum="two"),
        "routes.x.quorum: input should be a valid integer, unable to parse string as an integer "
        "(got 'two')"),
    err("wrong-type-bool", with_route(allow_for_session="maybe"),
        "routes.x.allow_for_session: input should be a valid boolean"),
    err("bad-caller", with_route(callers=["ci agent"]),
        "routes.x.callers[0]: 'ci agent' is not a principal name (an API token's name) or '*'"),
    err("wrong-type-list", with_route(reviewers="U0ANN"),
        "routes.x.reviewers: input should be a valid list"),
    err("wrong-type-rules", merged(valid(), rules={"name": "a"}),
        "rules: input should be a valid list"),
    err("quorum-zero", with_route(quorum=0),
        "routes.x.quorum: input should be greater than or equal to 1"),
    err("quorum-above-reviewers", with_route(reviewers=["U0ANN", "U0BOB"], quorum=3),
        "routes.x.quorum: quorum 3 needs at least 3 reviewers; 2 listed"),
    err("unknown-sensitivity-route", merged(valid(), sensitivity_routes={"secret": "vault"}),
        "sensitivity_routes.secret: unknown route 'vault'"),
    err("bad-sensitivity-level", merged(valid(), sensitivity_routes={"top": "ops"}),
        "sensitivity_routes.top: input should be 'low', 'pii' or 'secret' (got 'top')"),
    err("bad-default", merged(valid(), defaults={"deadline_seconds": -1}),
        "defaults.deadline_seconds: input should be greater than 0"),
    err("no-default-route", merged(valid(), routes={"ops": {"channel": "C0OPS"}}),
        "routes: no 'default' route: define one, or give a default channel"),
]
# fmt: on


@pytest.mark.parametrize(("data", "expected"), ERRORS)
@pytest.mark.parametrize("suffix", [".yaml", ".toml"])
def test_validation_error_names_file_field_and_problem(
    tmp_path: Path, data: dict[str, Any], expected: str, suffix: str
) -> None:
    path = write(tmp_path / f"policy{suffix}", data)
    with pytest.raises(PolicyError) as caught:
        load_policy(path)
    assert isinstance(caught.value, InvalidRequest)
    lines = str(caught.value).splitlines()
    assert all(line.startswith(f"{path}: ") for line in lines), lines
    assert any(line.startswith(f"{path}: {expected}") for line in lines), lines


def test_every_problem_listed_one_per_line(tmp_path: Path) -> None:
    data = valid()
    data["routes"]["ops"]["reviewers"] = ["bob"]
    data["routes"]["ops"]["quorum"] = "many"
    data["rules"] = [{"name": "a", "action": "maybe", "match": {"tool": "/(/"}}]
    path = write(tmp_path / "policy.yml", data)
    with pytest.raises(PolicyError) as caught:
        load_policy(path)
    assert sorted(caught.value.problems) == sorted(str(caught.value).splitlines())
    assert [line.split(": ")[1] for line in caught.value.problems] == [
        "routes.ops.reviewers[0]",
        "routes.ops.quorum",
        "rules[0].match.tool",
        "rules[0].action",
    ]


def test_cross_reference_problems_all_listed() -> None:
    data = valid()
    data["rules"] += [
        {"name": "a", "action": "ask", "route": "x1"},
        {"name": "c", "action": "ask", "route": "x2"},
    ]
    with pytest.raises(PolicyError) as caught:
        parse_policy(data, source="p.yaml")
    assert caught.value.problems == [
        "p.yaml: rules[1].name: duplicate rule name 'a' (also rules[0])",
        "p.yaml: rules[1].route: unknown route 'x1' (routes: default, ops)",
        "p.yaml: rules[2].route: unknown route 'x2' (routes: default, ops)",
    ]


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        (
            "p.yaml",
            "routes:\n  ops: {channel: C0A}\n  ops: {channel: C0B}\n",
            "invalid YAML: line 3: duplicate key 'ops'",
        ),
        ("p.yaml", "routes: [\n", "invalid YAML: line 2:"),
        ("p.yaml", "- a\n- b\n", "the top level must be a mapping (routes, rules, …), not list"),
        ("p.toml", "[routes\n", "invalid TOML:"),
        ("p.json", "{}", "unsupported file type '.json'; use .yaml, .yml or .toml"),
        ("missing.yaml", None, "cannot read the file:"),
    ],
)
def test_unreadable_files(tmp_path: Path, name: str, text: str | None, expected: str) -> None:
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    with pytest.raises(PolicyError) as caught:
        load_policy(path)
    assert str(caught.value).startswith(f"{path}: {expected}")


# -- loading ------------------------------------------------------------------------------


def write(path: Path, data: dict[str, Any]) -> Path:
    if path.suffix == ".toml":
        path.write_text(to_toml(data))
    else:
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def to_toml(data: dict[str, Any], prefix: str = "") -> str:
    """A tiny TOML writer for test data (tables, arrays of tables, scalars, inline lists)."""

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{" + ", ".join(f'"{k}" = {value(x)}' for k, x in v.items()) + "}"
        return repr(v)

    scalars = [
        f'"{k}" = {value(v)}'
        for k, v in data.items()
        if v is not None
        and not (isinstance(v, dict) or (isinstance(v, list) and v and isinstance(v[0], dict)))
    ]
    out = "\n".join(scalars) + "\n"
    for key, v in data.items():
        name = f'{prefix}"{key}"'
        if isinstance(v, dict):
            out += f"[{name}]\n" + to_toml(v, name + ".")
        elif isinstance(v, list) and v and isinstance(v[0], dict):
            for item in v:
                out += f"[[{name}]]\n" + to_toml(item, name + ".")
    return out


FULL: dict[str, Any] = {
    "defaults": {"deadline_seconds": 600, "grant_ttl_seconds": 3600},
    "routes": {
        "default": {"channel": "C0DEFAULT", "reviewers": ["S0ALL"]},
        "ops": {
            "channel": "C0OPS",
            "reviewers": ["U0ANN", "W0BOB"],
            "quorum": 2,
            "on_timeout": "escalate",
            "escalate_to": "oncall",
            "max_escalations": 1,
            "allow_for_session": True,
            "dm_reviewers": True,
        },
        "oncall": {
            "channel": "G0ONCALL",
            "reviewers": ["S0ONCALL"],
            "deadline_seconds": 60,
            "on_timeout": "approve",
        },
    },
    "sensitivity_routes": {"secret": "ops"},
    "rules": [
        {"name": "reads", "action": "allow", "match": {"tool": ["Read", "mcp__github__get_*"]}},
        {
            "name": "rm",
            "action": "deny",
            "reason": "no",
            "match": {"kind": ["tool", "command"], "arguments": {"command": r"^rm\s+-rf"}},
        },
        {
            "name": "deploys",
            "action": "ask",
            "route": "ops",
            "quorum": 2,
            "sensitivity": "pii",
            "match": {
                "tool": "/^deploy_/",
                "agent": "ci-*",
                "session": "s-*",
                "sensitivity": ["low", "pii"],
            },
        },
    ],
}


@pytest.mark.parametrize("suffix", [".yaml", ".yml", ".toml"])
def test_yaml_and_toml_load_the_same_policy(tmp_path: Path, suffix: str) -> None:
    policy = load_policy(write(tmp_path / f"policy{suffix}", FULL))
    assert policy.model_dump() == parse_policy(copy.deepcopy(FULL), source="x").model_dump()
    assert policy.routes["ops"].escalate_to == "oncall"
    assert policy.rules[1].match.arguments == {"command": r"^rm\s+-rf"}
    decision = policy.evaluate(event("shell", kind="command", command="rm -rf /"))
    assert (decision.action, decision.winners) == ("deny", ("rm",))
    deploy = event("deploy_web", agent="ci-main", session_id="s-1")
    decision = policy.evaluate(deploy)
    assert (decision.action, decision.route_name, decision.quorum, decision.sensitivity) == (
        "ask",
        "ops",
        2,
        "pii",
    )


def test_toml_written_by_hand(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(
        '[routes.default]\nchannel = "C0D"\nreviewers = ["U0ANN"]\n\n'
        '[[rules]]\nname = "rm"\naction = "deny"\nreason = "no"\n'
        '[rules.match]\ntool = "Bash"\narguments = { command = "^rm -rf" }\n'
    )
    policy = load_policy(path)
    assert policy.evaluate(event(arguments={"command": "rm -rf /"})).action == "deny"
    assert policy.evaluate(event(arguments={"command": "ls"})).action == "ask"


def test_default_route_from_start_up_defaults(tmp_path: Path) -> None:
    path = write(tmp_path / "p.yaml", {"rules": [{"name": "r", "action": "ask"}]})
    policy = load_policy(path, default_channel="C0ENV", default_reviewers=["U0ANN", "S0GRP"])
    assert policy.routes["default"].channel == "C0ENV"
    assert policy.routes["default"].reviewers == ["U0ANN", "S0GRP"]
    assert policy.evaluate(event()).route_name == "default"

    own = write(tmp_path / "own.yaml", {"routes": {"default": {"channel": "C0FILE"}}})
    assert load_policy(own, default_channel="C0ENV").routes["default"].channel == "C0FILE"

    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing yet\n")
    assert load_policy(empty, default_channel="C0ENV").routes["default"].channel == "C0ENV"

    with pytest.raises(PolicyError) as caught:
        load_policy(path, default_channel="#general")
    assert str(caught.value).startswith(
        f"{path}: routes.default (from the start-up defaults): channel: '#general' is not a "
        "Slack channel id"
    )


def test_policy_default() -> None:
    policy = default_policy("C0APPROVALS", ["U0ANN"])
    decision = policy.evaluate(event("anything"))
    assert (decision.action, decision.route_name, decision.quorum) == ("ask", "default", 1)
    assert decision.route is not None
    assert (decision.route.channel, decision.route.reviewers) == ("C0APPROVALS", ["U0ANN"])
    assert default_policy("C0APPROVALS").routes["default"].reviewers == []
    with pytest.raises(PolicyError, match=r"^default policy: routes.default .*reviewers\[0\]"):
        default_policy("C0APPROVALS", ["alice"])


def test_example_file_loads_and_says_what_it_claims() -> None:
    policy = load_policy(EXAMPLE)
    assert {"default", "payments", "payments-oncall", "docs", "security"} <= set(policy.routes)
    routes = policy.routes
    assert routes["payments"].on_timeout == "escalate" and routes["docs"].on_timeout == "approve"
    assert routes["payments"].allow_for_session and routes["payments"].dm_reviewers
    assert {r.action for r in policy.rules} == {"allow", "deny", "ask"}

    def decide(ev: ApprovalEvent, **config: Any) -> tuple[Any, ...]:
        d = policy.evaluate(ev, ApprovalConfig(**config))
        return d.action, d.route_name, d.quorum

    assert decide(event("Read", arguments={"file_path": "a"})) == ("allow", None, 1)
    assert decide(event(arguments={"command": "rm -rf build"})) == ("deny", None, 1)
    assert decide(event(kind="command", command="ls && rm -fr /")) == ("deny", None, 1)
    assert decide(event(kind="command", command="git status && ls | head")) == ("allow", None, 1)
    assert decide(event(arguments={"command": "make release"}))[0] == "deny"
    assert decide(event(arguments={"command": "git push origin main"}))[0] == "deny"
    assert decide(event("mcp__stripe__create_refund")) == ("ask", "payments", 2)
    assert decide(event("Edit", agent="billing-bot")) == ("ask", "payments", 3)
    assert decide(event("mcp__github__merge", session_id="nightly-20250101"))[0] == "allow"
    assert decide(event("Write", kind="file", arguments={"path": "app/.env"})) == (
        "ask",
        "security",
        2,
    )
    assert decide(event("Bash", arguments={"command": "ls"}), sensitivity="pii") == (
        "ask",
        "default",
        2,
    )
    assert decide(event("Write", arguments={"file_path": "docs/guide.md"})) == ("ask", "docs", 1)
    assert policy.on_timeout("payments").route_name == "payments-oncall"
    assert policy.on_timeout("payments", escalations=2).action == "deny"
    assert policy.on_timeout("docs").action == "approve"
    assert policy.may_name("docs", "docs-bot") and not policy.may_name("docs", "ci-agent")
    # Named by docs-bot, a shell call is asked on docs but never approved by its timeout (a
    # read-only one, `ls`, is allowed at once by the read-only rule: no route at all).
    shell_call = event("Bash", arguments={"command": "make deploy"})
    named = policy.evaluate(shell_call, requested_route="docs")
    assert (named.route_name, named.floor) == ("docs", RouteFloor(route="default", quorum=1))


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


def test_field_errors_and_route_references_are_reported_together(tmp_path: Path) -> None:
    bad = tmp_path / "policy.yaml"
    bad.write_text(
        "routes:\n"
        "  default: {channel: C0A, quorum: 0}\n"
        "  ops: {channel: C0B, on_timeout: escalate, deadline_seconds: 60}\n"
        "rules:\n"
        "  - {name: r, action: ask, route: nowhere, match: {tool: x}}\n"
    )
    with pytest.raises(PolicyError) as found:
        load_policy(bad)
    lines = found.value.message.splitlines()
    assert any("routes.default.quorum" in line for line in lines), lines
    assert f"{bad}: routes.ops.escalate_to: required when on_timeout is 'escalate'" in lines
    assert any(line.startswith(f"{bad}: rules[0].route: unknown route 'nowhere'") for line in lines)


def test_only_an_explicit_approve_approves_on_timeout() -> None:
    """Fail closed in the code, not only in the file check: a route escalating nowhere (an
    unchecked policy) or an `on_timeout` this version does not know denies."""
    nowhere = Route(channel="C0A", on_timeout="escalate")
    unknown = Route.model_construct(channel="C0B", on_timeout="approve-later")
    policy = Policy(routes={"nowhere": nowhere, "unknown": unknown})
    assert policy.on_timeout("nowhere").action == "deny"
    assert policy.on_timeout("unknown").action == "deny"
    assert Policy(routes={"a": Route(channel="C0A", on_timeout="approve")}).on_timeout(
        "a"
    ).action == ("approve")
