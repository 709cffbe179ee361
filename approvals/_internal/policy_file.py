"""Turning a policy file (YAML or TOML) or its parsed data into a checked `Policy`.

Internal to approval-bot (not a stable API); agents import from `approvals`.

Fields are validated by the models in `approvals._internal.policy`; cross-references
(routes named by rules, escalation chains, duplicate rule names) are checked
here once every field is valid. Every problem becomes one line of the
`PolicyError` message: `file: field.path[i]: problem`.
"""

from __future__ import annotations

import difflib
import logging
import tomllib
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from approvals._internal.policy import (
    DEFAULT_ROUTE,
    UNROUTED_CHANNEL,
    Match,
    Policy,
    PolicyDefaults,
    Route,
    Rule,
)
from approvals._internal.shell.matching import CommandMatch
from approvals._internal.shell.matching import warnings as command_warnings
from approvals.errors import InvalidRequest
from approvals.webhooks import CallbackPolicy

log = logging.getLogger(__name__)

SUFFIXES = (".yaml", ".yml", ".toml")
_FIELD_NAMES = sorted(
    {
        field
        for model in (Policy, PolicyDefaults, Route, Rule, Match, CallbackPolicy, CommandMatch)
        for field in model.model_fields
    }
)


class PolicyError(InvalidRequest):
    """A policy that cannot be used; the message holds one `file: path: problem` per line."""

    code = "invalid_policy"

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("\n".join(problems), details=list(problems))
        self.problems = list(problems)


def load_policy(
    path: str | Path,
    *,
    default_channel: str | None = None,
    default_reviewers: Sequence[str] = (),
) -> Policy:
    """Read and check a policy file; raise `PolicyError` naming the file, field and problem.

    A file without a `default` route gets one made of `default_channel` and
    `default_reviewers` (the start-up defaults); with neither, it is an error.
    """
    policy = parse_policy(
        read_policy_data(path),
        source=str(path),
        default_channel=default_channel,
        default_reviewers=default_reviewers,
    )
    log.info(
        "policy loaded file=%s routes=%d rules=%d", path, len(policy.routes), len(policy.rules)
    )
    return policy


def parse_policy(
    data: Any,
    *,
    source: str,
    default_channel: str | None = None,
    default_reviewers: Sequence[str] = (),
) -> Policy:
    """Validate and cross-check parsed policy data; `PolicyError` lists every problem found.

    Every problem is reported at once: the field problems, and beside them the route
    references that can be checked on the raw data; the rest once the fields are valid.
    """
    routes = data.get("routes") if isinstance(data, dict) else None
    if default_channel is not None and isinstance(data, dict) and isinstance(routes, dict | None):
        if DEFAULT_ROUTE not in (routes or {}):
            try:
                default = Route(channel=default_channel, reviewers=list(default_reviewers))
            except ValidationError as e:
                where = f"{source}: routes.default (from the start-up defaults)"
                raise PolicyError(format_errors(where, e)) from e
            data = {**data, "routes": {DEFAULT_ROUTE: default, **(routes or {})}}
    try:
        policy = Policy.model_validate(data)
    except ValidationError as e:
        early = [f"{source}: {problem}" for problem in raw_reference_problems(data)]
        raise PolicyError([*format_errors(source, e), *early]) from e
    problems = reference_problems(policy)
    if problems:
        raise PolicyError([f"{source}: {problem}" for problem in problems])
    return policy


def raw_reference_problems(data: Any) -> list[str]:
    """The route references that can be checked while some fields are still invalid (so one
    `policy check` reports them beside the field errors): rules' and escalations' route
    names, and an `escalate` with nowhere to go. Same lines as `reference_problems`."""
    routes = data.get("routes") if isinstance(data, dict) else None
    if not isinstance(routes, dict):
        return []
    known = ", ".join(str(name) for name in routes) or "none"
    out: list[str] = []
    for name, route in routes.items():
        if not isinstance(route, dict):
            continue
        at, to = f"routes.{name}", route.get("escalate_to")
        if route.get("on_timeout") == "escalate" and to is None:
            out.append(f"{at}.escalate_to: required when on_timeout is 'escalate'")
        elif isinstance(to, str) and to not in routes:
            out.append(f"{at}.escalate_to: unknown route {to!r} (routes: {known})")
    rules = data.get("rules") if isinstance(data, dict) else None
    for i, rule in enumerate(rules if isinstance(rules, list) else []):
        target = rule.get("route") if isinstance(rule, dict) else None
        if isinstance(target, str) and target not in routes:
            out.append(f"rules[{i}].route: unknown route {target!r} (routes: {known})")
    return out


def reference_problems(policy: Policy) -> list[str]:
    """Cross-reference problems of a field-valid policy, one `field.path: problem` each."""
    out: list[str] = []
    routes = policy.routes
    known = ", ".join(routes) or "none"

    def check_route(path: str, name: str) -> None:
        if name not in routes:
            out.append(f"{path}: unknown route {name!r} (routes: {known})")

    if DEFAULT_ROUTE not in routes:
        out.append("routes: no 'default' route: define one, or give a default channel")
    for name, route in routes.items():
        at, how = f"routes.{name}", route.on_timeout
        if how == "escalate" and route.escalate_to is None:
            out.append(f"{at}.escalate_to: required when on_timeout is 'escalate'")
        elif route.escalate_to is not None and how != "escalate":
            out.append(f"{at}.escalate_to: only used when on_timeout is 'escalate', not {how!r}")
        elif route.escalate_to is not None:
            check_route(f"{at}.escalate_to", route.escalate_to)
        if how != "deny" and policy.deadline_for(route) is None:
            out.append(
                f"{at}.on_timeout: {how!r} needs a deadline: set deadline_seconds "
                "on the route or in defaults"
            )
        people = set(route.reviewers)
        if people and all(r[0] in "UW" for r in people) and len(people) < route.quorum:
            out.append(
                f"{at}.quorum: quorum {route.quorum} needs at least {route.quorum} "
                f"reviewers; {len(people)} listed"
            )
    out += _escalation_cycles(policy)
    for level, name in policy.sensitivity_routes.items():
        check_route(f"sensitivity_routes.{level}", name)
    first: dict[str, int] = {}
    for i, rule in enumerate(policy.rules):
        at = f"rules[{i}]"
        if rule.name in first:
            out.append(
                f"{at}.name: duplicate rule name {rule.name!r} (also rules[{first[rule.name]}])"
            )
        first.setdefault(rule.name, i)
        if rule.action == "ask" and rule.route is not None:
            check_route(f"{at}.route", rule.route)
        target = routes.get(rule.route or DEFAULT_ROUTE)
        if rule.action == "ask" and rule.quorum is not None and target is not None:
            people = set(target.reviewers)
            if people and all(r[0] in "UW" for r in people) and len(people) < rule.quorum:
                out.append(
                    f"{at}.quorum: quorum {rule.quorum} needs at least {rule.quorum} reviewers; "
                    f"route {rule.route or DEFAULT_ROUTE!r} lists {len(people)}"
                )
        for field in ("route", "sensitivity", "quorum") if rule.action != "ask" else ():
            if getattr(rule, field) is not None:
                out.append(
                    f"{at}.{field}: only an 'ask' rule takes {field}; "
                    f"this rule says {rule.action!r}"
                )
    return out


def rule_warnings(policy: Policy) -> list[str]:
    """Rules that can never (or almost never) match, one `rules[i] (name): why` each.
    Warnings, not errors: the policy still loads."""
    out: list[str] = []
    for i, rule in enumerate(policy.rules):
        match = rule.match
        for problem in command_warnings(rule.action, match.command, match.risks, match.kind):
            out.append(f"rules[{i}] ({rule.name}): {problem}")
    return out


def _escalation_cycles(policy: Policy) -> list[str]:
    """Each escalation loop once, reported at the route where it closes."""
    out: list[str] = []
    reported: set[frozenset[str]] = set()
    for start in policy.routes:
        chain = [start]
        while (step := policy.escalates_to(chain[-1])) is not None:
            if step in chain:
                loop = [*chain[chain.index(step) :], step]
                if frozenset(loop) not in reported:
                    reported.add(frozenset(loop))
                    out.append(
                        f"routes.{step}.escalate_to: escalation cycle {' -> '.join(loop)}; "
                        "a chain must end at a route that does not escalate"
                    )
                break
            chain.append(step)
    return out


def format_errors(source: str, error: ValidationError) -> list[str]:
    """One `source: field.path[i]: problem` line per pydantic validation error."""
    lines: list[str] = []
    for err in error.errors():
        if err["type"] == "extra_forbidden":
            close = difflib.get_close_matches(str(err["loc"][-1]), _FIELD_NAMES, n=1)
            message = "unknown field" + (f"; did you mean {close[0]!r}?" if close else "")
        elif err["type"] == "value_error":
            message = str((err.get("ctx") or {}).get("error"))
        elif err["type"] == "missing":
            message = "required, but missing"
        else:
            message = err["msg"][:1].lower() + err["msg"][1:]
            if isinstance(err["input"], str | int | float | bool):
                message += f" (got {err['input']!r})"
        lines.append(f"{source}: {_path(err['loc'])}: {message}")
    return lines


def _path(loc: tuple[int | str, ...]) -> str:
    """`('rules', 2, 'match', 'tool')` → `rules[2].match.tool`."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part != "[key]":
            out += f".{part}" if out else part
    return out or "(top level)"


class _StrictLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (YAML keeps the last)."""


def _mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Hashable] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if isinstance(key, Hashable):
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
    return loader.construct_mapping(node)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def read_policy_data(path: str | Path) -> dict[str, Any]:
    """The file's top-level mapping; `PolicyError` for a missing, unreadable or malformed file."""
    source, path = str(path), Path(path)
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise PolicyError(
            [f"{source}: unsupported file type {suffix or '(none)'!r}; use .yaml, .yml or .toml"]
        )
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise PolicyError([f"{source}: cannot read the file: {e}"]) from e
    if suffix == ".toml":
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise PolicyError([f"{source}: invalid TOML: {e}"]) from e
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as e:
        where = f"line {e.problem_mark.line + 1}: " if e.problem_mark else ""
        raise PolicyError([f"{source}: invalid YAML: {where}{e.problem}"]) from e
    except yaml.YAMLError as e:
        raise PolicyError([f"{source}: invalid YAML: {e}"]) from e
    if data is None:
        return {}
    if not isinstance(data, dict):
        kind = type(data).__name__
        raise PolicyError(
            [f"{source}: the top level must be a mapping (routes, rules, …), not {kind}"]
        )
    return data


def build_policy(
    policy_file: str | Path | None,
    default_channel: str | None = None,
    reviewers: Sequence[str] = (),
) -> Policy:
    """The policy a bot with these settings uses: the file (its `default` route made from
    the start-up defaults when it has none), else ask everything on the default route."""
    channel = default_channel or UNROUTED_CHANNEL
    if policy_file:
        return load_policy(policy_file, default_channel=channel, default_reviewers=reviewers)
    return default_policy(channel, reviewers)


def default_policy(channel: str, reviewers: Sequence[str] = ()) -> Policy:
    """The policy when no file is configured: ask everything on one default route."""
    return parse_policy(
        {}, source="default policy", default_channel=channel, default_reviewers=reviewers
    )
