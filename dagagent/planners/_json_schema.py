"""JSON Schema rewrites for constrained output, used to build the plan schema
(:mod:`dagagent.planners.schema`): a ``${id.path}`` reference allowed wherever a literal value
is, a tool's ``$defs`` renamed apart from other tools', and a schema brought into OpenAI's
strict subset (or told why it cannot be). Pure functions over JSON Schema dicts."""

from __future__ import annotations

from typing import Any

__all__ = [
    "REFERENCE_PATTERN",
    "allow_refs",
    "nullable",
    "rename_refs",
    "strictify",
]

REFERENCE_PATTERN = r'^\$\{@?[A-Za-z0-9_][A-Za-z0-9_-]*(\.[^.}"\\\x00-\x20]+)*\}$'
r"""A string that is exactly one ``${id}`` / ``${id.path}`` reference (or, in a map task,
``${@item}`` / ``${@item.path}`` / ``${@index}``: the current element).

Written in the regex subset every guided decoder translates: llama.cpp and Ollama copy a
pattern into a GBNF grammar, whose character classes know no ``\s``/``\d``/``\w`` (the
server then rejects the request), and the pattern is matched inside a JSON string, so a
path segment excludes ``"``, ``\`` and control characters as well as spaces."""

_REF_SCHEMA: dict[str, Any] = {
    "type": "string",
    "pattern": REFERENCE_PATTERN,
    "description": "a ${task_id} or ${task_id.path} reference to an upstream output",
}
# Keywords dropped in strict mode: annotations, and constraints pydantic checks after parsing.
_STRICT_DROP = frozenset(
    {
        "title",
        "default",
        "examples",
        "minLength",
        "maxLength",
        "uniqueItems",
        "minProperties",
        "maxProperties",
    }
)
# Keywords strict mode cannot express at all.
_STRICT_UNSUPPORTED = frozenset(
    {
        "oneOf",
        "allOf",
        "not",
        "prefixItems",
        "patternProperties",
        "if",
        "then",
        "else",
        "dependentRequired",
        "dependentSchemas",
        "propertyNames",
        "unevaluatedProperties",
        "unevaluatedItems",
        "contains",
    }
)


# ---------------------------------------------------------------------------- references


def _is_plain_string(node: dict[str, Any]) -> bool:
    return node.get("type") == "string" and not (
        {"enum", "const", "pattern", "format"} & node.keys()
    )


def _with_ref(node: dict[str, Any]) -> dict[str, Any]:
    """``node`` or a reference string; annotations move to the wrapper."""
    if "anyOf" in node:
        return {**node, "anyOf": [*node["anyOf"], _REF_SCHEMA]}
    inner = dict(node)
    wrapper: dict[str, Any] = {}
    for key in ("description", "default", "title"):
        if key in inner:
            wrapper[key] = inner.pop(key)
    wrapper["anyOf"] = [inner, _REF_SCHEMA]
    return wrapper


def allow_refs(node: Any) -> Any:
    """Let every non-string position of an argument schema hold a whole reference."""
    if not isinstance(node, dict) or not node:
        return node  # {} accepts anything, references included
    node = dict(node)
    if "anyOf" in node:
        node["anyOf"] = [_strip_ref_branch(allow_refs(b)) for b in node["anyOf"]]
        if any(isinstance(b, dict) and _is_plain_string(b) for b in node["anyOf"]):
            return node
        return _with_ref(node)
    if "$ref" in node:
        return _with_ref(node)
    kind = node.get("type")
    if kind == "string":
        return node if _is_plain_string(node) else _with_ref(node)
    if kind == "array" and isinstance(node.get("items"), dict):
        node["items"] = allow_refs(node["items"])
    if kind == "object" and isinstance(node.get("properties"), dict):
        node["properties"] = {k: allow_refs(v) for k, v in node["properties"].items()}
    if kind is None and not ({"enum", "const"} & node.keys()):
        return node  # an annotation-only schema: accepts anything
    return _with_ref(node)


def _strip_ref_branch(node: Any) -> Any:
    """Inside an ``anyOf`` branch, the reference alternative is added once, at the top."""
    if isinstance(node, dict) and "anyOf" in node and _REF_SCHEMA in node["anyOf"]:
        branches = [b for b in node["anyOf"] if b is not _REF_SCHEMA and b != _REF_SCHEMA]
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        if len(branches) == 1 and isinstance(branches[0], dict):
            return {**branches[0], **rest}
        return {**rest, "anyOf": branches}
    return node


# ---------------------------------------------------------------------------- $defs


def rename_refs(node: Any, prefix: str) -> Any:
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str) and v.startswith("#/$defs/"):
                out[k] = "#/$defs/" + prefix + v[len("#/$defs/") :]
            else:
                out[k] = rename_refs(v, prefix)
        return out
    if isinstance(node, list):
        return [rename_refs(v, prefix) for v in node]
    return node


# ---------------------------------------------------------------------------- strict mode


def strictify(node: Any, where: str, problems: list[str]) -> Any:
    """Rewrite a schema node for OpenAI strict mode; record what cannot be expressed."""
    if not isinstance(node, dict):
        return node
    if not node or ("type" not in node and not ({"anyOf", "$ref", "enum", "const"} & node.keys())):
        problems.append(f"{where} accepts any JSON value (strict mode needs a type)")
        return node
    bad = sorted(_STRICT_UNSUPPORTED & node.keys())
    if bad:
        problems.append(f"{where} uses {', '.join(bad)}")
    out: dict[str, Any] = {}
    for k, v in node.items():
        if k in _STRICT_DROP:
            continue
        if k == "const":
            if "enum" not in node:
                out["enum"] = [v]
            continue
        if k == "anyOf":
            out[k] = [strictify(b, where, problems) for b in v]
        elif k == "items":
            out[k] = strictify(v, f"{where}[]", problems)
        elif k == "properties":
            out[k] = {p: strictify(s, f"{where}.{p}", problems) for p, s in v.items()}
        else:
            out[k] = v
    kinds = node.get("type")
    if kinds == "object" or (isinstance(kinds, list) and "object" in kinds):
        props = node.get("properties")
        extra = node.get("additionalProperties", True)
        if isinstance(extra, dict) and extra:
            problems.append(f"{where} is a mapping with free keys (strict mode needs names)")
        elif not props and extra is not False:
            problems.append(f"{where} is a free-form object (strict mode needs its properties)")
        else:
            missing = sorted(set(props or {}) - set(node.get("required", ())))
            if missing:
                problems.append(
                    f"{where} has optional fields ({', '.join(missing)}) inside a nested object"
                )
            out["additionalProperties"] = False
            out["required"] = list(props or {})
    return out


def nullable(node: dict[str, Any]) -> dict[str, Any]:
    null = {"type": "null"}
    if "anyOf" in node:
        branches = node["anyOf"]
        if null in branches:
            return node
        return {**node, "anyOf": [*branches, null]}
    wrapper: dict[str, Any] = {}
    inner = dict(node)
    if "description" in inner:
        wrapper["description"] = inner.pop("description")
    wrapper["anyOf"] = [inner, null]
    return wrapper
