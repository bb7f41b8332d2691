"""A patch set's contract as declared: the requirements of set.toml (or of the TOML file it names),
validated when the library loads. What each kind means and how it is judged: checks/contract.py.

Below the library, so that loading a set needs nothing from the checks (which use the library).
"""

from __future__ import annotations

import copy
from dataclasses import field
from typing import TYPE_CHECKING, Any

from patchkit.base.errors import BadInput
from patchkit.base.fsutil import unsafe_reason
from patchkit.base.values import FrozenValue, frozen
from patchkit.tree.version import in_range, specifier

if TYPE_CHECKING:  # pragma: no cover
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

ACCESSES = {"load": "reads", "store": "assigns", "any": "references"}


@frozen
class Target(FrozenValue):
    """What a guarded read is judged against: the class of the target and what its object holds."""

    cls: str
    has: tuple[str, ...] = ()
    lacks: tuple[str, ...] = ()


@frozen
class Requirement(FrozenValue):
    """One requirement of a set's contract on a file of vLLM."""

    file: str
    kind: str
    fields: dict[str, Any] = field(hash=False)  # the kind's own fields, as parse_requirements checked them
    versions: SpecifierSet | None = None
    reason: str = ""

    def applies_to(self, version: Version | None) -> bool:
        """Whether the requirement holds for `version` (judged as its release: version.release_version);
        for an unknown version (None), only a requirement for every version does."""
        if self.versions is None:
            return True
        return version is not None and in_range(self.versions, version)

    def __getitem__(self, key: str) -> Any:  # a str or a list of str, as SCHEMA gives the kind's field
        return self.fields.get(key)


STR, STRS, TABLE = "a string", "a list of strings", "a table"

# kind -> (required fields, optional fields), each field -> its type
SCHEMA: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    "base": ({"class": STR, "base": STR}, {}),
    "imported": ({"names": STRS}, {}),
    "methods": ({"class": STR, "methods": STRS}, {}),
    "attribute": ({"attribute": STR, "access": STR}, {"on": STR, "function": STR}),
    "model-types": ({"function": STR, "variable": STR, "model_types": STRS}, {}),
    "guarded-read": ({"attribute": STR, "target": TABLE}, {"on": STR, "function": STR}),
}
COMMON = {"file": STR, "kind": STR, "versions": STR, "reason": STR}


# entries as declared (their spelling, keys in their order) -> their requirements, kept across the commands of a
# process (cli.percommand.KEPT): each load of the library validated the same contract again (~2% of a
# preflight in process). Keyed by the entries themselves, so a changed file is parsed again; bounded.
_PARSED: dict[str, tuple[Requirement, ...]] = {}
_PARSED_MOST = 64


def parse_requirements(entries: object, origin: str) -> tuple[Requirement, ...]:
    """Validate declared entries (a list of tables); a malformed one is BadInput (exit 2)."""
    if not isinstance(entries, list):
        raise BadInput(f"{origin}: the contract must be a list of tables ([[requirement]])")
    key = _key(entries)
    kept = _PARSED.get(key) if key is not None else None
    if kept is not None:
        return kept
    own = entries if key is None else copy.deepcopy(entries)  # what is kept holds nothing the caller may change
    parsed = tuple(_parse_entry(entry, f"{origin}: requirement #{i}") for i, entry in enumerate(own, 1))
    if key is not None:
        if len(_PARSED) >= _PARSED_MOST:
            _PARSED.clear()
        _PARSED[key] = parsed
    return parsed


def _key(entries: list[object]) -> str | None:
    """The entries' own spelling, for entries of TOML's plain values alone (a TOML date, or a tuple given
    in code, is parsed each time): repr tells each type and value of those apart."""
    try:
        return repr(entries) if _plain(entries) else None
    except RecursionError:
        return None


def _plain(value: object) -> bool:
    if type(value) is list:
        return all(_plain(item) for item in value)
    if type(value) is dict:
        return all(type(name) is str and _plain(item) for name, item in value.items())
    return type(value) in (str, int, float, bool)


def _parse_entry(entry: object, where: str) -> Requirement:
    if not isinstance(entry, dict):
        raise BadInput(f"{where} is not a table")
    kind = entry.get("kind")
    if kind not in SCHEMA:
        raise BadInput(f"{where}: kind {kind!r} is not one of {', '.join(SCHEMA)}")
    required, optional = SCHEMA[kind]
    missing = [name for name in ["file", *required] if name not in entry]
    if missing:
        raise BadInput(f"{where} ({kind}): missing field(s) {', '.join(missing)}")
    known = {**COMMON, **required, **optional}
    unknown = sorted(set(entry) - set(known))
    if unknown:
        raise BadInput(f"{where} ({kind}): unknown field(s) {', '.join(unknown)}; it takes {', '.join(sorted(known))}")
    for name, value in entry.items():
        _check_type(value, known[name], f"{where} ({kind}): field {name!r}")
    unsafe = unsafe_reason(entry["file"])
    if unsafe:
        raise BadInput(
            f"{where} ({kind}): file {entry['file']!r} must be a path inside the tree (vllm/...): it {unsafe}"
        )
    fields = {k: v for k, v in entry.items() if k not in COMMON}
    if kind == "attribute" and fields["access"] not in ACCESSES:
        raise BadInput(f"{where} (attribute): access {fields['access']!r} is not one of {', '.join(ACCESSES)}")
    if kind == "guarded-read":
        fields["target"] = _parse_target(fields["target"], f"{where} (guarded-read): target")
    return Requirement(
        file=entry["file"],
        kind=kind,
        fields=fields,
        versions=specifier(entry.get("versions"), where),
        reason=entry.get("reason", ""),
    )


def _check_type(value: object, expected: str, where: str) -> None:
    ok = {
        STR: isinstance(value, str) and value != "",
        STRS: isinstance(value, list) and bool(value) and all(isinstance(v, str) and v for v in value),
        TABLE: isinstance(value, dict),
    }[expected]
    if not ok:
        raise BadInput(
            f"{where} must be {'a non-empty list of strings' if expected == STRS else expected}, not {value!r}"
        )


def _parse_target(table: dict[str, Any], where: str) -> Target:
    unknown = sorted(set(table) - {"class", "has", "lacks"})
    if unknown or "class" not in table:
        raise BadInput(f"{where} takes class (required), has, lacks; got {', '.join(sorted(table)) or 'nothing'}")
    _check_type(table["class"], STR, f"{where}.class")
    for name in ("has", "lacks"):
        if name in table:
            _check_type(table[name], STRS, f"{where}.{name}")
    return Target(table["class"], tuple(table.get("has", ())), tuple(table.get("lacks", ())))
