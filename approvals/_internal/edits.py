"""Approve with edits: which requests may be edited, checking an edit, and its version.

Internal to approval-bot (not a stable API).

`edits_offered` says whether a request may be edited, `check_edit` checks an edit (a JSON
object passing the agent's `arguments_schema`, with `jsonschema`), `version_of` gives its
version, which binds every vote (docs/ARCHITECTURE.md, "A yes applies to what was shown"), and
`check_arguments_schema` refuses a schema at creation (HTTP 422). Every check is bounded (RE2,
canonical `uniqueItems`, no `$ref` loops): docs/ARCHITECTURE.md, "Approve with edits".
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote

import jsonschema
import re2
from jsonschema.exceptions import SchemaError, ValidationError
from referencing.exceptions import Unresolvable

from approvals.errors import InvalidRequest
from approvals.models import MAX_EVENT_BYTES, ApprovalRequest

#: Agents that cannot run an edited call: Codex's PreToolUse has no `updatedInput`, and the
#: OpenAI Agents SDK's `approve` runs the call as the model made it. No Edit button for them.
NO_EDIT_AGENTS = frozenset({"codex", "openai-agents"})
#: Event kinds whose arguments are what the agent runs (a permissions ask has none).
EDITABLE_KINDS = frozenset({"tool", "command", "file"})


def edits_offered(request: ApprovalRequest) -> bool:
    """Whether a reviewer may approve `request` with edited arguments."""
    return (
        request.config.kind == "approval"
        and request.config.allow_edits
        and request.event.kind in EDITABLE_KINDS
        and (request.event.agent or "") not in NO_EDIT_AGENTS
        # The Agents SDK adapter shows the SDK agent's name as `agent`; it marks its source.
        and str(request.metadata.get("source", "")) not in NO_EDIT_AGENTS
    )


def current_arguments(request: ApprovalRequest) -> dict[str, Any]:
    """What a vote on `request` approves now: the proposal's arguments, else the agent's."""
    return request.proposal.arguments if request.proposal else request.event.arguments


def current_version(request: ApprovalRequest) -> str:
    """The version votes are bound to: '' for the agent's own arguments."""
    return request.proposal.version if request.proposal else ""


def version_of(request: ApprovalRequest, arguments: dict[str, Any]) -> str:
    """The version of an edit: a hash of the request's fingerprint and the edited arguments."""
    canonical = json.dumps(
        [request.fingerprint, arguments],
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=True,
        default=str,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def check_edit(request: ApprovalRequest, arguments: Any) -> dict[str, Any]:
    """`arguments` as an edit of `request`, or `InvalidRequest` saying what is wrong (its
    `details` is "arguments"): not offered, not a JSON object, too large, failing the
    agent's `arguments_schema`, or no change."""
    if not edits_offered(request):
        raise InvalidRequest("editing is not offered for this request", details="arguments")
    if not isinstance(arguments, dict):
        kind = "an array" if isinstance(arguments, list) else type(arguments).__name__
        raise InvalidRequest(
            f"the arguments must be a JSON object, not {kind}", details="arguments"
        )
    try:
        size = len(json.dumps(arguments, ensure_ascii=False, allow_nan=False).encode())
    except (TypeError, ValueError) as e:
        raise InvalidRequest("the arguments must be plain JSON", details="arguments") from e
    if size > MAX_EVENT_BYTES:
        raise InvalidRequest(
            f"the arguments are {size} bytes; the limit is {MAX_EVENT_BYTES}", details="arguments"
        )
    schema = request.event.arguments_schema
    if schema is not None:
        try:
            if schema_problem_of(schema) is not None:
                raise SchemaError("checked when the request was created")
            error = jsonschema.exceptions.best_match(_validator(schema).iter_errors(arguments))
        except (SchemaError, RecursionError, Unresolvable, re2.error) as e:
            raise InvalidRequest(
                "the agent's arguments_schema is not a valid JSON Schema; edits cannot be checked",
                details="arguments",
            ) from e
        if error is not None:
            raise InvalidRequest(schema_problem(error), details="arguments")
    if arguments == current_arguments(request):
        raise InvalidRequest(
            "nothing was changed; use Approve to approve the call as it is", details="arguments"
        )
    return arguments


def schema_problem(error: jsonschema.ValidationError) -> str:
    """What a failed schema check says: where, and which rule of the schema it broke — never
    the value itself (a restored masked value must not be echoed back to Slack)."""
    where = "/".join(str(p) for p in error.absolute_path) or "the arguments"
    rule = error.validator_value
    if error.validator == "type":
        text = f"must be of type {json.dumps(rule)}"
    elif error.validator in ("enum", "const"):
        text = f"must be {'one of ' if error.validator == 'enum' else ''}{json.dumps(rule)}"
    elif error.validator == "required":
        missing = [name for name in rule if isinstance(error.instance, dict)]
        missing = [name for name in missing if name not in error.instance]
        text = f"is missing required {', '.join(json.dumps(m) for m in missing)}"
    elif error.validator == "additionalProperties" and rule is False:
        text = "has properties the schema does not allow (additionalProperties)"
    else:
        text = f"does not satisfy the schema's {error.validator!r}: {json.dumps(rule, default=str)}"
    return f"{where}: {text}"[:500]


# ---------------------------------------------------------------- the agent's schema, bounded


def check_arguments_schema(schema: dict[str, Any] | None) -> None:
    """`InvalidRequest` (HTTP 422, `details` naming `arguments_schema`) when `schema` is not
    one whose checks are bounded: not a valid JSON Schema, a regular expression RE2 cannot
    run, a `$ref` outside the schema or pointing nowhere, or a loop of `$ref`s."""
    if schema is None:
        return
    problem = schema_problem_of(schema)
    if problem is not None:
        raise InvalidRequest(
            f"invalid arguments_schema: {problem}",
            details=[{"loc": ["arguments_schema"], "msg": problem, "type": "value_error"}],
        )


def schema_problem_of(schema: dict[str, Any]) -> str | None:
    """What is wrong with an agent's `arguments_schema` (None: nothing)."""
    try:
        validator_class = jsonschema.validators.validator_for(schema)
        validator_class.check_schema(schema)
    except SchemaError as e:
        where = "/".join(str(p) for p in e.absolute_path) or "the schema"
        return f"not a valid JSON Schema at {where}: {e.message}"[:500]
    except RecursionError:
        return "nested too deeply"
    nodes: dict[str, Any] = {}
    anchors: dict[str, str] = {}
    for pointer, node in _subschemas(schema):
        nodes[pointer] = node
        if isinstance(node.get("$anchor"), str):
            anchors[node["$anchor"]] = pointer
        for pattern in _patterns(node):
            try:
                _re2(pattern)
            except re2.error as e:
                why = e.args[0].decode(errors="replace") if e.args else "not supported"
                return (
                    f"the regular expression {pattern[:100]!r} at {pointer or '/'} cannot be "
                    f"matched in linear time (RE2: {why[:100]})"
                )
        if "unevaluatedProperties" in node and _has_pattern_properties(schema):
            return "unevaluatedProperties with patternProperties is not supported"
    edges: dict[str, list[str]] = {}
    for pointer, node in nodes.items():
        targets = []
        for key in ("$ref", "$dynamicRef", "$recursiveRef"):
            ref = node.get(key)
            if not isinstance(ref, str):
                continue
            if not ref.startswith("#"):
                return f"the $ref {ref[:100]!r} at {pointer or '/'} is not within the schema"
            target = anchors.get(ref[1:]) if ref[1:2] not in ("", "/") else unquote(ref[1:])
            if target is None or target not in nodes:
                return f"the $ref {ref[:100]!r} at {pointer or '/'} points nowhere in the schema"
            targets.append(target)
        for key in ("allOf", "anyOf", "oneOf"):
            items = node.get(key)
            if isinstance(items, list):
                targets += [f"{pointer}/{key}/{i}" for i in range(len(items))]
        for key in ("not", "if", "then", "else"):
            if isinstance(node.get(key), dict):
                targets.append(f"{pointer}/{key}")
        dependent = node.get("dependentSchemas")
        if isinstance(dependent, dict):
            targets += [f"{pointer}/dependentSchemas/{_escape(k)}" for k in dependent]
        edges[pointer] = [t for t in targets if t in nodes]
    loop = _loop(edges)
    if loop is not None:
        path = " → ".join(p or "#" for p in loop)[:300]
        return f"its $refs loop without reading deeper into the arguments ({path})"
    return None


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _subschemas(schema: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """(JSON pointer, subschema) of every object in `schema`, as `$ref`s name them. Its own
    stack, no recursion: a deep schema cannot exhaust Python's."""
    stack: list[tuple[str, Any]] = [("", schema)]
    while stack:
        pointer, node = stack.pop()
        if isinstance(node, dict):
            yield pointer, node
            stack += [(f"{pointer}/{_escape(str(k))}", v) for k, v in node.items()]
        elif isinstance(node, list):
            stack += [(f"{pointer}/{i}", v) for i, v in enumerate(node)]


def _patterns(node: dict[str, Any]) -> list[str]:
    found = [node["pattern"]] if isinstance(node.get("pattern"), str) else []
    if isinstance(node.get("patternProperties"), dict):
        found += [str(k) for k in node["patternProperties"]]
    return found


def _has_pattern_properties(schema: dict[str, Any]) -> bool:
    return any(isinstance(n.get("patternProperties"), dict) for _, n in _subschemas(schema))


def _loop(edges: dict[str, list[str]]) -> list[str] | None:
    """A cycle in `edges` (as the pointers along it), or None. Iterative depth-first search."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for root in edges:
        if state.get(root):
            continue
        path: list[str] = []
        stack: list[tuple[str, Iterator[str]]] = [(root, iter(edges[root]))]
        state[root] = 1
        path.append(root)
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                path.pop()
                state[node] = 2
            elif state.get(child) == 1:
                return [*path[path.index(child) :], child]
            elif not state.get(child):
                state[child] = 1
                path.append(child)
                stack.append((child, iter(edges.get(child, ()))))
    return None


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False


@functools.lru_cache(maxsize=256)
def _re2(pattern: str) -> Any:
    return re2.compile(pattern, _RE2_OPTIONS)


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _re2(pattern).search(instance):
        yield ValidationError(f"the value does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: dict[str, Any], instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _re2(pattern).search(key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = [_re2(p) for p in schema.get("patternProperties", {})]
    extras = [k for k in instance if k not in properties and not any(p.search(k) for p in patterns)]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        yield ValidationError(f"additional properties are not allowed ({len(extras)} unexpected)")


def _canonical(value: Any) -> Any:
    """A hashable form of a JSON value, equal where JSON Schema's equality says equal (1 and
    1.0 alike, true and 1 not)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return (type(value).__name__, value)
    if isinstance(value, int | float):
        return ("number", value)
    if isinstance(value, list):
        return ("array", tuple(_canonical(v) for v in value))
    if isinstance(value, dict):
        return ("object", frozenset((k, _canonical(v)) for k, v in value.items()))
    return ("other", repr(value))


def _unique_items(
    validator: Any, unique: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if unique and validator.is_type(instance, "array"):
        forms = [_canonical(v) for v in instance]
        if len(set(forms)) != len(forms):
            yield ValidationError("the array has non-unique elements")


@functools.lru_cache(maxsize=16)
def _bounded(validator_class: Any) -> Any:
    """`validator_class` with its unbounded keywords replaced by the linear ones above."""
    return jsonschema.validators.extend(
        validator_class,
        {
            "pattern": _pattern,
            "patternProperties": _pattern_properties,
            "additionalProperties": _additional_properties,
            "uniqueItems": _unique_items,
        },
    )


def _validator(schema: dict[str, Any]) -> Any:
    """The bounded validator for an agent's schema (checked by `schema_problem_of` first)."""
    validator_class = jsonschema.validators.validator_for(schema)
    return _bounded(validator_class)(schema)
