"""The Literal tables of the tree's vllm/config/speculative.py, read once a file: its methods
(SpeculativeMethod) and the model types it serves as mtp (MTPModelTypes; 0.11's MTP_MODEL_TYPES tuple)."""

from __future__ import annotations

import ast

from patchkit.checks.parsed import python_tree

MTP_TYPES = "MTPModelTypes"
OLD_MTP_TYPES = "MTP_MODEL_TYPES"  # 0.11's: a tuple


def mtp_model_types(source: bytes | None) -> set[str] | None:
    """The model types vLLM serves as mtp (a method given as one is renamed mtp; a drafter of one is
    served as mtp); None where the file does not hold the table whole."""
    tables = literal_tables(source)
    return tables.get(MTP_TYPES, tables.get(OLD_MTP_TYPES))


def literal_tables(source: bytes | None) -> dict[str, set[str]]:
    """Each module-level `NAME = Literal[...]` of `source`, its strings with the Literals it names
    resolved (SpeculativeMethod names EagleModelTypes, which names MTPModelTypes)."""
    tree = python_tree(source)
    if tree is None:
        return {}
    raw: dict[str, list[ast.expr]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            members = _literal_members(node.value)
            if members is not None:
                raw[node.targets[0].id] = members
    return {name: values for name in raw if (values := _resolved(name, raw, set())) is not None}


def _literal_members(value: ast.expr) -> list[ast.expr] | None:
    if isinstance(value, ast.Tuple) and value.elts and all(isinstance(e, ast.Constant) for e in value.elts):
        return list(value.elts)  # 0.11's MTP_MODEL_TYPES: a tuple of strings
    if not (isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name) and value.value.id == "Literal"):
        return None
    inner = value.slice
    return list(inner.elts) if isinstance(inner, ast.Tuple) else [inner]


def _resolved(name: str, raw: dict[str, list[ast.expr]], seen: set[str]) -> set[str] | None:
    """The strings of Literal `name`; None when a member is neither a string nor a Literal of the
    module (the set is then not known whole)."""
    if name in seen or name not in raw:
        return None
    values: set[str] = set()
    for member in raw[name]:
        if isinstance(member, ast.Constant) and isinstance(member.value, str):
            values.add(member.value)
            continue
        inner = _resolved(member.id, raw, seen | {name}) if isinstance(member, ast.Name) else None
        if inner is None:
            return None
        values |= inner
    return values
