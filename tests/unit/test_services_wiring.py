"""Typed wiring (issue 16): what components hand each other goes through typed fields of ``Services`` and
its ``Parts`` registry, never a ``dict[str, Any]`` of string keys the type checker cannot see."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field, fields
from typing import Any

import pytest

from switchboard.services import Parts, Services

MAPPINGS = frozenset({"dict", "Dict", "Mapping", "MutableMapping"})
UNTYPED = frozenset({"Any", "object"})


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):  # typing.Dict, typing.Any
        return node.attr
    return None


def loose_mapping(annotation: str) -> bool:
    """True when the annotation holds a mapping whose values are untyped (``dict[str, Any]``, a bare
    ``dict``, ``Mapping[str, object]``...): a bag of string keys the type checker sees nothing of."""
    tree = ast.parse(annotation, mode="eval")
    subscripted = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _name(node.value) in MAPPINGS:
            subscripted.add(id(node.value))
            args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            if len(args) < 2 or any(_name(arg) in UNTYPED for arg in args):
                return True
    bare = [n for n in ast.walk(tree) if isinstance(n, ast.Name | ast.Attribute) and _name(n) in MAPPINGS]
    return any(id(n) not in subscripted for n in bare)


def loose_fields(cls: type) -> list[str]:
    return [f.name for f in fields(cls) if loose_mapping(f.type if isinstance(f.type, str) else repr(f.type))]


def test_services_has_no_untyped_mapping() -> None:
    names = {f.name for f in fields(Services)}
    assert {"settings", "db", "parts", "token_lookups", "on_close"} <= names, "the walk must see Services"
    assert "extras" not in names
    assert loose_fields(Services) == []


def test_the_check_fails_when_services_grows_a_bag_of_string_keys() -> None:
    @dataclass
    class Grown(Services):
        extras: dict[str, Any] = field(default_factory=dict)

    assert loose_fields(Grown) == ["extras"]


@pytest.mark.parametrize(
    ("annotation", "loose"),
    [
        ("dict[str, Any]", True),
        ("dict[str, Any] | None", True),
        ("typing.Dict[str, typing.Any]", True),
        ("Mapping[str, object]", True),
        ("dict", True),
        ("list[dict]", True),
        ("dict[tuple[str, ...], tuple[Validator, Sender]]", False),
        ("list[TokenLookup]", False),
        ("OAuthAuthorizationServerProvider[Any, Any, AccessToken] | None", False),
        ("Any", False),  # a test seam (the resolver), not a mapping
    ],
)
def test_loose_mapping(annotation: str, loose: bool) -> None:
    assert loose_mapping(annotation) is loose


class Alpha:
    pass


class Beta(Alpha):
    pass


def test_parts_are_found_by_class() -> None:
    parts = Parts()
    assert parts.get(Alpha) is None
    with pytest.raises(LookupError, match="no Alpha"):
        parts.need(Alpha)
    beta = Beta()
    parts.add(beta)
    assert parts.get(Beta) is beta
    assert parts.need(Alpha) is beta  # a subclass answers for its base
    with pytest.raises(ValueError, match="already has a Beta"):
        parts.add(Beta())  # one part per class: a second would be ambiguous
    assert parts.get(Beta) is beta
