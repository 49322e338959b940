"""A griffe extension: the Sphinx roles of dagagent's docstrings as links of the site.

dagagent's docstrings cross-reference with Sphinx roles (``:class:`RunResult```,
``:func:`~dagagent.store.locate_store```, ``:meth:`Registry.tool```). mkdocstrings reads
docstrings as Markdown, where such a role would show as it is written. Once the whole
package is loaded, this extension rewrites each role as an autorefs cross-reference:

- the target is resolved as Sphinx resolves it, from the object whose docstring holds it
  outwards (its own members, its class, its module, the package), so that ``RunResult``
  written in ``dagagent.run`` is ``dagagent.results._run.RunResult``;
- a target found in dagagent becomes a link to where the site documents it, or plain code
  when the site does not document it (a private helper);
- a target outside dagagent (``anyio.Event``, ``dict``) is plain code;
- a target that names nothing is a warning, so ``mkdocs build --strict`` fails on it.

``~`` shows the last part of the name only, ``!`` never links, ``title <target>`` shows the
title; functions and methods get ``()``, as Sphinx writes them.
"""

from __future__ import annotations

import builtins
import functools
import html
import re
from typing import Any

import griffe

_ROLE = re.compile(
    r":(?:py:)?(?P<role>class|func|meth|attr|mod|exc|data|obj|const|type):`(?P<body>[^`]+)`"
)
_TITLED = re.compile(r"^(?P<title>.+?)\s*<(?P<target>[^<>]+)>$")
_PACKAGE = "dagagent"
_logger = griffe.get_logger("dagagent.docs.sphinx_roles")


class SphinxRoles(griffe.Extension):
    """Rewrite Sphinx roles in every docstring of the package once it is loaded."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **_: Any) -> None:
        if pkg.name != _PACKAGE:
            return
        collection = loader.modules_collection
        for obj in _objects(pkg):
            docstring = obj.docstring
            if docstring is not None and ":" in docstring.value:
                docstring.value = _ROLE.sub(
                    functools.partial(_reference, where=obj, collection=collection),
                    docstring.value,
                )


def _objects(module: griffe.Module) -> list[griffe.Object]:
    """The module and every object defined in it or in its submodules (not imported names)."""
    found: list[griffe.Object] = []
    todo: list[griffe.Object] = [module]
    while todo:
        obj = todo.pop()
        found.append(obj)
        for member in obj.members.values():
            if not member.is_alias and isinstance(member, griffe.Object):
                todo.append(member)
    return found


def _reference(match: re.Match[str], where: griffe.Object, collection: Any) -> str:
    role, body = match["role"], match["body"].strip()
    titled = _TITLED.match(body)
    if titled:
        title, target = titled["title"], titled["target"].strip()
    else:
        title = target = "".join(body.split())  # a name may be broken across lines
    link = True
    if target.startswith("!"):
        link, target = False, target[1:]
        title = title[1:] if title.startswith("!") else title
    if target.startswith("~"):
        target = target[1:]
        if not titled:
            title = target.rsplit(".", 1)[-1]
    target = target.lstrip(".").removesuffix("()")
    if role in ("func", "meth") and not titled and not title.endswith(")"):
        title = f"{title}()"
    code = f"`{title}`"
    if not link:
        return code
    resolved = _resolve(target, where, collection)
    if resolved is None:
        if _outside(target):
            return code
        _logger.warning(
            "%s: %s names nothing in dagagent (%s)",
            where.path,
            match.group(0),
            _location(where),
        )
        return code
    if resolved == "":
        return code  # found, but outside dagagent (an import of another library)
    return f'<autoref identifier="{html.escape(resolved)}" optional>{code}</autoref>'


def _resolve(target: str, where: griffe.Object, collection: Any) -> str | None:
    """The canonical path of ``target`` seen from ``where``; ``""`` for an object of another
    library; ``None`` when it names nothing."""
    scopes: list[str] = []
    scope: griffe.Object | None = where
    while scope is not None:
        if scope.is_module or scope.is_class:
            scopes.append(scope.path)
        scope = scope.parent
    candidates = [f"{s}.{target}" for s in scopes]
    candidates += [target, f"{_PACKAGE}.{target}"]
    for path in candidates:
        try:
            obj = collection[path]
        except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            continue
        try:
            final = obj.final_target if obj.is_alias else obj
        except (griffe.AliasResolutionError, griffe.CyclicAliasError):
            return ""  # an import from a library that is not loaded
        path_of = final.canonical_path
        return path_of if path_of.split(".", 1)[0] == _PACKAGE else ""
    return None


def _outside(target: str) -> bool:
    """Whether ``target`` names something outside dagagent: a builtin or another package."""
    head = target.split(".", 1)[0]
    return head != _PACKAGE and ("." in target or hasattr(builtins, head))


def _location(obj: griffe.Object) -> str:
    return f"{obj.relative_filepath}:{obj.lineno}" if obj.lineno else str(obj.relative_filepath)
