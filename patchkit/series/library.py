"""The patch library: named sets, each with versioned patch series per vLLM release.

    <root>/<set>/set.toml             name, description, supported, upstream, probe, contract, launch,
                                      behaviour, behaviour_reads, gates, [needed_by], [[releases]]
    <root>/<set>/<dir>/series         patch file names in apply order, each with its sha256
                                      ("0001-x.patch sha256:<hex>"; '#' starts a comment)
    <root>/<set>/<dir>/NNNN-name.patch  DEP-3 header, then a git-style unified diff

A release entry maps a `packaging` specifier to a directory, so releases whose files are
identical share one directory.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import sys
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.version import Version

from patchkit.base import fsutil, hints, remembered
from patchkit.base.enums import Holder, SelectionKind
from patchkit.base.errors import BadInput, NoPatchSet, quoted
from patchkit.base.fsutil import atomic_write, unsafe_reason
from patchkit.base.values import FrozenValue, Value, frozen
from patchkit.series.patchfile import DEFAULT_ROOTS, Patch, read_patch
from patchkit.series.requirements import parse_requirements
from patchkit.tree.version import in_range, release_version, specifier

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

if TYPE_CHECKING:
    from collections.abc import Iterable

    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    from patchkit.series.requirements import Requirement  # imported where a set's contract is read: --patch reads none

MANIFEST = "set.toml"
LIBRARY_MANIFEST = "library.toml"  # at the root: the order the sets apply in
SERIES = "series"
SHA_PREFIX = "sha256:"

PATCH = SelectionKind.PATCH
UPSTREAM = SelectionKind.UPSTREAM
UNSUPPORTED = SelectionKind.UNSUPPORTED


LIBRARY_ENV = "PATCHKIT_LIBRARY"
FROM_OPTION = "--patches"
INSTALLED = "installed"


@frozen
class Location(FrozenValue):
    """Which library root a command uses, and what chose it (--patches, PATCHKIT_LIBRARY or installed)."""

    path: Path
    source: str

    def to_json(self) -> dict[str, str]:
        return {"path": str(self.path), "source": self.source}


def locate(option: str | Path | None) -> Location:
    """The library root, in this order: --patches DIR, then $PATCHKIT_LIBRARY, then the installed one."""
    if option:
        return Location(Path(option).resolve(), FROM_OPTION)
    from_env = os.environ.get(LIBRARY_ENV)
    if from_env:
        path = Path(from_env).resolve()
        if not path.is_dir():
            raise BadInput(
                f"{LIBRARY_ENV}={from_env} is not a directory",
                hint=f"point {LIBRARY_ENV} at a library root, or unset it to use the installed library",
            )
        return Location(path, LIBRARY_ENV)
    return Location(default_root(), INSTALLED)


PACKAGE_DIR = Path(__file__).resolve().parents[1]  # patchkit/: a wheel puts the library in it


def installed_copy_hint(command: list[str], package: Path | None = None) -> str:
    """How to work on the library installed with patchkit without writing into it (a reinstall of
    patchkit undoes what refresh writes there): a copy in a directory that is not there yet (`cp -r`
    into one that is would nest it), then `patchkit COMMAND --patches COPY` (`command`: its words)."""
    installed = (package or PACKAGE_DIR) / "_library"
    copy = free_name("patches")
    return (
        f"work on a copy: `{shlex.join(['cp', '-r', str(installed), copy])}`, "
        f"then `{shlex.join(['patchkit', *command, '--patches', copy])}`"
    )


def free_name(name: str) -> str:
    """`name`, else `name-2`, `name-3`...: the first that names nothing in the working directory."""
    number = 1
    while os.path.lexists(name if number == 1 else f"{name}-{number}"):
        number += 1
    return name if number == 1 else f"{name}-{number}"


def refuse_the_installed(directory: Path, command: list[str]) -> None:
    """A maintainer tool that would write into the library installed with patchkit is refused
    before it does anything (`patchkit refresh` would write there, and a reinstall of patchkit
    undoes it); its hint runs the same `command` on a copy."""
    installed = (PACKAGE_DIR / "_library").resolve()
    if directory.resolve().is_relative_to(installed):
        raise BadInput(
            "the library installed with patchkit is not to be edited: `patchkit refresh` would write into it, "
            "and a reinstall or upgrade of patchkit undoes that",
            hint=installed_copy_hint(command),
        )


def default_root() -> Path:
    """The library installed with patchkit: patchkit/_library inside a wheel (beside the package's
    modules: importlib.resources says the same of a package on disk, at the cost of its imports);
    patches/ beside the package in a checkout or an editable install."""

    packaged = PACKAGE_DIR / "_library"
    if packaged.is_dir():
        return packaged.resolve()
    return Path(__file__).resolve().parents[2] / "patches"


@frozen
class Release(FrozenValue):
    """A release entry of a set: the versions it covers and its series' directory."""

    versions: SpecifierSet
    directory: Path
    written: str = field(default="", compare=False)  # the range as set.toml writes it (SpecifierSet re-orders)

    def said(self) -> str:
        """The range as set.toml writes it (`>=0.13.0,<0.19.0`)."""
        return self.written or str(self.versions)

    def covers(self, version: Version) -> bool:
        """Whether this series is for `version` (judged as its release: version.release_version)."""
        return in_range(self.versions, version)

    def series(self) -> list[tuple[str, str | None]]:
        """(patch file name, recorded sha256 or None) in apply order."""
        path = self.directory / SERIES
        try:
            text = fsutil.read_regular(path, SERIES_LIMIT).decode("utf-8")
        except OSError as exc:
            raise BadInput(f"cannot read {path}: {exc.strerror or exc}") from exc
        except UnicodeDecodeError as exc:
            raise BadInput(f"cannot read {path}: {exc}") from exc
        entries = []
        for line in text.splitlines():
            fields = line.split("#", 1)[0].split()
            if not fields:
                continue
            _check_entry(path, fields[0])
            digest = next((f[len(SHA_PREFIX) :] for f in fields[1:] if f.startswith(SHA_PREFIX)), None)
            entries.append((fields[0], digest))
        return entries

    def read_patches(self, roots: tuple[str, ...]) -> list[Patch]:
        """The series' patches, each checked against the sha256 the library records for it."""
        patches = []
        for name, digest in self.series():
            patch = read_patch(self.directory / name, roots)
            if digest and patch.sha256 != digest:
                raise BadInput(
                    f"{self.directory / name} does not match the sha256 recorded in its series "
                    "(corrupted, truncated or edited)",
                    hint="restore it, or run `patchkit refresh` if the edit is intended",
                )
            patches.append(patch)
        return patches


SERIES_LIMIT = 1 << 20


def _check_entry(series: Path, name: str) -> None:
    """A series names patch files beside it: a plain file name, never a path (no '/', no '..')."""
    reason = unsafe_reason(name) or ("names another directory" if "/" in name else None)
    if reason:
        raise BadInput(
            f"{series}: the entry {quoted(repr(name))} {reason}: a series lists patch file names in its own directory",
            hint="repair the series file (patchkit refresh rewrites it)",
        )


def write_series(directory: Path, names: list[str]) -> None:
    """Rewrite a series file, recording each patch file's sha256 beside its name."""

    lines = [f"{name} {SHA_PREFIX}{hashlib.sha256((directory / name).read_bytes()).hexdigest()}" for name in names]
    comments = []
    series = directory / SERIES
    if series.is_file() and not series.is_symlink():
        comments = [line for line in series.read_text(encoding="utf-8").splitlines() if line.startswith("#")]
    # A new file in place of the old (never written through a symlink planted there).
    atomic_write(series, ("\n".join(comments + lines) + "\n").encode())


# set.toml's [needed_by]: which launches need the set, by what the launch command names (a key alone
# is enough); each [[needed_by.when]] entry: a launch that matches every key it gives, on the vLLM
# releases its `versions` range holds (a file the series patches on some releases only)
NEEDED_BY = {
    "speculative_methods": "--speculative-config method",
    "tool_call_parsers": "--tool-call-parser",
    "target_architectures": "target architecture",
}
WHEN = "when"
VERSIONS = "versions"


@frozen
class LaunchFacts(FrozenValue):
    """What a launch names, as vLLM serves it, for the rule: its speculative method (as vLLM settles
    it), its --tool-call-parser, its target model's architectures (config.json's, overrides applied)."""

    speculative_method: str | None = None
    tool_call_parser: str | None = None
    target_architectures: tuple[str, ...] = ()
    version: Version | None = None  # the tree's vLLM; None: not known (a `versions` range then holds)

    def within(self, versions: SpecifierSet | None) -> bool:
        return versions is None or self.version is None or in_range(versions, self.version)

    def matches(self, key: str, names: tuple[str, ...]) -> bool:
        if key == "target_architectures":
            return any(arch in names for arch in self.target_architectures)
        return getattr(self, key[: -len("s")]) in names


@frozen
class LaunchRule(FrozenValue):
    """Which launches need the set (set.toml's [needed_by]): one that names any entry of a key here
    (its speculative method as vLLM settles it, --tool-call-parser, target architecture), or that
    matches every key of one `when` entry (on the releases of its `versions`, when it gives them). A
    set without the table: every launch."""

    speculative_methods: tuple[str, ...] = ()
    tool_call_parsers: tuple[str, ...] = ()
    target_architectures: tuple[str, ...] = ()
    when: tuple[LaunchRule, ...] = ()
    versions: SpecifierSet | None = None  # a `when` entry's vLLM releases (None: every one)

    def needs(self, launch: LaunchFacts) -> bool:
        alone = any(launch.matches(key, getattr(self, key)) for key in NEEDED_BY if getattr(self, key))
        return alone or any(entry.needs_all(launch) for entry in self.when)

    def needs_all(self, launch: LaunchFacts) -> bool:
        keys = all(launch.matches(key, getattr(self, key)) for key in NEEDED_BY if getattr(self, key))
        return keys and launch.within(self.versions)

    def described(self) -> str:
        """What the rule serves, in the launch's words: `--tool-call-parser kimi_k2`."""
        alone = [self._part(key) for key in NEEDED_BY if getattr(self, key)]
        together = [" with ".join(e._part(key) for key in NEEDED_BY if getattr(e, key)) + e._on() for e in self.when]
        return " or ".join(alone + together)

    def _on(self) -> str:
        return f" on vLLM {self.versions}" if self.versions is not None else ""

    def _part(self, key: str) -> str:
        return f"{NEEDED_BY[key]} {'/'.join(getattr(self, key))}"


@frozen
class PatchSetDef(FrozenValue):
    """A patch set as its set.toml declares it."""

    name: str
    description: str
    directory: Path
    supported: SpecifierSet | None
    upstream: SpecifierSet | None
    releases: tuple[Release, ...]
    roots: tuple[str, ...] = DEFAULT_ROOTS
    probe: Path | None = None  # a script run in the target's interpreter after import (checks/probe.py)
    contract: tuple[Requirement, ...] = ()  # what must hold in the patched code (checks/contract.py)
    launch: Path | None = None  # the set's launch checks, run by `patchkit preflight` (patchkit/launch)
    behaviour: Path | None = None  # the set's behaviour test, run by `patchkit verify` (checks/behaviour.py)
    # release files the behaviour test reads besides those it judges (fetched with them; absent: skipped)
    behaviour_reads: tuple[str, ...] = ()
    needed_by: LaunchRule | None = None  # which launches need it (preflight, run); None: every launch
    # the files vLLM reads at start, before the model loads, that admit what the set enables (eagle3's
    # whitelist): an apply writes them last, a revert first, so a commit cut short leaves them stock
    gates: tuple[str, ...] = ()
    pending_fix: str | None = None  # [upstream_fix]'s pull request while its state is "pending"


@dataclass(eq=False, repr=False)
class Selection(Value):
    """What the library says about one vLLM version."""

    set_name: str
    kind: SelectionKind
    version: Version | None
    patches: list[Patch] = field(default_factory=list)
    release: Release | None = None
    note: str | None = None
    patch_set: PatchSetDef | None = None  # None for ad-hoc --patch diffs
    # upstream because the tree's files already hold the series' change (no apply of patchkit's recorded)
    in_stock: bool = False
    holder: Holder | None = None  # who put that change there, as far as anything proves it
    local: str = ""  # the build's own local label (+corp) whose RECORD lists the files: no release's stock files
    gap: bool = False  # unsupported, though in the set's range: it has no series for the version (resolve.no_series)


# set.toml's fields: the TOML types each may have, and whether it must be there
_MANIFEST_FIELDS: dict[str, tuple[tuple[type, ...], bool]] = {
    "name": ((str,), True),
    "releases": ((list,), True),
    "description": ((str,), False),
    "supported": ((str,), False),
    "upstream": ((str,), False),
    "roots": ((list,), False),
    "probe": ((str,), False),
    "contract": ((str, list), False),
    "launch": ((str,), False),
    "behaviour": ((str,), False),
    "behaviour_reads": ((list,), False),
    "needed_by": ((dict,), False),
    "gates": ((list,), False),
    "upstream_fix": ((dict,), False),  # where upstream's fix stands (issue, pull request): for people to read
}
_TOML_TYPES: dict[type, str] = {str: "a string", list: "an array", dict: "a table"}


def _manifest_problems(data: dict[str, Any]) -> list[str]:
    """What is missing from a set.toml, or of the wrong type (empty: nothing)."""
    missing = [key for key, (_, required) in _MANIFEST_FIELDS.items() if required and not data.get(key)]
    problems = [f"no {' and no '.join(missing)}"] if missing else []
    problems += [_unknown_field(key) for key in data if key not in _MANIFEST_FIELDS]
    for key, (types, _) in _MANIFEST_FIELDS.items():
        if key in data and not isinstance(data[key], types):
            problems.append(f"`{key}` must be {' or '.join(_TOML_TYPES[t] for t in types)}")
    releases = data.get("releases")
    for index, release in enumerate(releases if isinstance(releases, list) else [], 1):
        if not (isinstance(release, dict) and all(isinstance(release.get(k), str) for k in ("versions", "dir"))):
            problems.append(f"[[releases]] entry {index} needs `versions` and `dir`, both strings")
        elif unsafe_reason(release["dir"]):
            problems.append(
                f"[[releases]] entry {index}: `dir` {quoted(repr(release['dir']))} {unsafe_reason(release['dir'])}"
            )
    if isinstance(data.get("name"), str) and data["name"] and fsutil.set_name_problem(data["name"]):
        problems.append(
            f"`name` {quoted(repr(data['name']))} {fsutil.set_name_problem(data['name'])} (a set is named by --set NAME)"
        )
    if isinstance(data.get("roots"), list) and not all(isinstance(r, str) and r for r in data["roots"]):
        problems.append("`roots` must be an array of package names")
    if isinstance(data.get("behaviour_reads"), list):
        problems += _behaviour_reads_problems(data["behaviour_reads"], "behaviour" in data)
    if isinstance(data.get("gates"), list):
        problems += _gates_problems(data["gates"], data.get("roots", DEFAULT_ROOTS))
    for key in ("probe", "launch", "behaviour"):  # a script the set ships, inside its directory
        if isinstance(data.get(key), str) and unsafe_reason(data[key]):
            problems.append(
                f"`{key}` {quoted(repr(data[key]))} {unsafe_reason(data[key])} (name a file in the set's directory)"
            )
    if isinstance(data.get("needed_by"), dict):
        problems += _rule_problems(data["needed_by"])
    if isinstance(data.get("upstream_fix"), dict):
        problems += _upstream_fix_problems(data["upstream_fix"])
    return problems


def _behaviour_reads_problems(paths: list[object], has_behaviour: bool) -> list[str]:
    """`behaviour_reads`: release files (relative POSIX paths, e.g. vllm/parser/utils.py) fetched for
    the set's behaviour test, which it must have."""
    if not has_behaviour:
        return ["`behaviour_reads` names files for a behaviour test: give `behaviour` too"]
    wrong = [p for p in paths if not isinstance(p, str) or unsafe_reason(p)]
    if wrong:
        why = unsafe_reason(wrong[0]) if isinstance(wrong[0], str) else "is not a string"
        return [f"`behaviour_reads` entry {quoted(repr(wrong[0]))} {why} (give paths like vllm/parser/utils.py)"]
    return []


def _gates_problems(paths: list[object], roots: object) -> list[str]:
    """`gates`: files the series patches (relative POSIX paths under the set's roots, e.g.
    vllm/config/speculative.py), each named once."""
    wrong = [p for p in paths if not isinstance(p, str) or unsafe_reason(p)]
    if wrong:
        why = unsafe_reason(wrong[0]) if isinstance(wrong[0], str) else "is not a string"
        return [f"`gates` entry {quoted(repr(wrong[0]))} {why} (give paths like vllm/config/speculative.py)"]
    tops = tuple(roots) if isinstance(roots, list) else DEFAULT_ROOTS
    outside = [p for p in paths if isinstance(p, str) and p.split("/", 1)[0] not in tops]
    if outside:
        return [f"`gates` entry {quoted(repr(outside[0]))} is outside the set's roots ({', '.join(map(str, tops))})"]
    twice = [p for p in paths if paths.count(p) > 1]
    return [f"`gates` names {quoted(repr(twice[0]))} twice"] if twice else []


UPSTREAM_FIX = ("state", "issue", "pull_request")  # [upstream_fix]: each a string


def _upstream_fix_problems(table: dict[str, Any]) -> list[str]:
    """What is wrong with an [upstream_fix] table (empty: nothing): known keys, each a string."""
    unknown = [key for key in table if key not in UPSTREAM_FIX]
    if unknown:
        return [f"[upstream_fix] has no key {quoted(repr(unknown[0]))} (it takes {', '.join(UPSTREAM_FIX)})"]
    return [f"[upstream_fix] `{key}` must be a string" for key, value in table.items() if not isinstance(value, str)]


def _unknown_field(key: str) -> str:
    """A key patchkit does not read: a misspelt one (`behavior`, `upstrem`) would drop what it
    declares unsaid, so it is refused, with the field it is closest to."""
    near = _nearest(key, _MANIFEST_FIELDS)
    return f"no field `{key}`" + (
        f" (did you mean `{near}`?)" if near else f" (it takes {', '.join(_MANIFEST_FIELDS)})"
    )


def _nearest(word: str, names: Iterable[str]) -> str | None:
    """The name `word` misspells: the nearest within a third of its length in edits (one at least;
    a swap of two letters is one). Not difflib: importing it was ~1 ms of every start-up."""
    distance, name = min((_edits(word, name), name) for name in names)
    return name if distance <= max(1, len(name) // 3) else None


def _edits(a: str, b: str) -> int:
    """Insertions, deletions, substitutions and swaps of neighbours that make `a` into `b`."""
    rows = [list(range(len(b) + 1))]
    for i in range(1, len(a) + 1):
        row = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            row[j] = min(rows[-1][j] + 1, row[j - 1] + 1, rows[-1][j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], rows[-2][j - 2] + 1)
        rows.append(row)
    return rows[-1][-1]


def _rule_problems(table: dict[str, Any]) -> list[str]:
    """What is wrong with a [needed_by] table (empty: nothing): known keys, each a list of names;
    `when`, an array of tables of those keys."""
    entries = table.get(WHEN, [])
    if WHEN in table and not (isinstance(entries, list) and entries and all(isinstance(e, dict) for e in entries)):
        return [f"[needed_by] `{WHEN}` must be an array of tables ([[needed_by.{WHEN}]])"]
    top = {k: v for k, v in table.items() if k != WHEN}
    problems = _keys_problems(top, "[needed_by]", bool(entries), takes=(*NEEDED_BY, f"[[needed_by.{WHEN}]]"))
    for index, entry in enumerate(entries, 1):
        where = f"[[needed_by.{WHEN}]] entry {index}"
        names = {k: v for k, v in entry.items() if k != VERSIONS}
        problems += _keys_problems(names, where, False, takes=(*NEEDED_BY, VERSIONS)) + _versions_problems(entry, where)
    return problems


def _versions_problems(entry: dict[str, Any], where: str) -> list[str]:
    """A `when` entry's `versions`: a version range as [[releases]] writes one."""
    value = entry.get(VERSIONS, "")
    try:
        valid = isinstance(value, str) and (VERSIONS not in entry or bool(specifier(value, where)))
    except BadInput:
        valid = False
    return [] if valid else [f'{where} `{VERSIONS}` must be a version range ("<0.23.0", ">=0.16.0")']


def _keys_problems(
    table: dict[str, Any], where: str, may_be_empty: bool, takes: tuple[str, ...] = tuple(NEEDED_BY)
) -> list[str]:
    unknown = [key for key in table if key not in NEEDED_BY]
    if unknown:
        return [f"{where} has no key {quoted(repr(unknown[0]))} (it takes {', '.join(takes)})"]
    if not table and not may_be_empty:
        return [f"{where} names no launch (give {' or '.join(NEEDED_BY)}; without [needed_by] every launch needs it)"]
    wrong = [
        k for k, v in table.items() if not (isinstance(v, list) and v and all(isinstance(n, str) and n for n in v))
    ]
    return [f"{where} `{key}` must be a non-empty array of names" for key in wrong]


def load_set(directory: Path) -> PatchSetDef:
    manifest = directory / MANIFEST
    data = read_toml(manifest, "manifest")
    problems = _manifest_problems(data)
    if problems:
        raise BadInput(
            f"manifest {manifest}: {'; '.join(problems)}",
            hint="a set.toml names the set (name = ...) and maps versions to series ([[releases]] versions, dir)",
        )
    try:
        entries = data.get("releases", [])
        releases = tuple(
            Release(specifier(r["versions"], manifest), directory / r["dir"], r["versions"].strip()) for r in entries
        )
        upstream = specifier(data.get("upstream"), manifest)
        written = [(r["versions"], release.versions) for r, release in zip(entries, releases, strict=True)]
        _refuse_ranges(manifest, written, data.get("upstream"), upstream)
        return PatchSetDef(
            name=data.get("name", directory.name),
            description=data.get("description", ""),
            directory=directory,
            supported=specifier(data.get("supported"), manifest),
            upstream=upstream,
            releases=releases,
            roots=tuple(data.get("roots", DEFAULT_ROOTS)),
            probe=_probe_script(data.get("probe"), directory, manifest),
            contract=_contract(data.get("contract"), directory, manifest),
            launch=_probe_script(data.get("launch"), directory, manifest, "launch checks"),
            behaviour=_probe_script(data.get("behaviour"), directory, manifest, "behaviour test"),
            behaviour_reads=tuple(data.get("behaviour_reads", ())),
            needed_by=_launch_rule(data.get("needed_by")),
            gates=tuple(data.get("gates", ())),
            pending_fix=_pending_fix(data.get("upstream_fix")),
        )
    except (KeyError, TypeError) as exc:
        raise BadInput(f"manifest {manifest}: missing or wrong field {exc}") from exc


def _refuse_ranges(
    manifest: Path, releases: list[tuple[str, SpecifierSet]], upstream: str | None, shipped: SpecifierSet | None
) -> None:
    """Ranges that hold no version, or that two entries (or `upstream` and an entry) share: the
    first match would win unsaid, and the other entry's series would never be taken."""
    # each range's bounds once: two ranges share a version where the tighter of their bounds still hold one
    ranges = [(i, text, _span(versions)) for i, (text, versions) in enumerate(releases, 1)]
    problems = [
        f"[[releases]] entry {i} `versions` {quoted(repr(text))} holds no version" for i, text, r in ranges if _empty(r)
    ]
    if _any_shared([r for _, _, r in ranges if not _empty(r)]):  # the pairs are named only when one shares
        problems += [
            f"[[releases]] entries {i} and {j} cover the same release ({quoted(repr(a))}, {quoted(repr(b))})"
            for i, a, first in ranges
            for j, b, second in ranges
            if i < j and not _empty(_meet(first, second))
        ]
    if shipped is not None:
        span = _span(shipped)
        problems += [
            f"`upstream` {quoted(repr(upstream))} overlaps [[releases]] entry {i} ({quoted(repr(text))}): upstream wins there"
            for i, text, r in ranges
            if not _empty(_meet(r, span))
        ]
    if problems:
        raise BadInput(
            f"manifest {manifest}: {'; '.join(problems)}",
            hint='give each release one [[releases]] entry, outside `upstream` (e.g. "==0.16.0", ">=0.17.0,<0.19.0")',
        )


def _any_shared(spans: list[tuple[_Bound, _Bound]]) -> bool:
    """Whether two of these (non-empty) ranges share a version, in one pass sorted by low bound: a
    range shares one with an earlier range only if it shares one with the earlier one reaching highest."""
    highest: tuple[_Bound, _Bound] | None = None
    for span in sorted(spans, key=_low_key):
        if highest is not None and not _empty(_meet(highest, span)):
            return True
        if highest is None or _high_key(span) > _high_key(highest):
            highest = span
    return False


def _low_key(span: tuple[_Bound, _Bound]) -> tuple[int] | tuple[int, Version, bool]:
    """A low bound's place, as _meet orders them: none lowest, an excluded version above an included one."""
    low = span[0]
    return (0,) if low is None else (1, low[0], not low[1])


def _high_key(span: tuple[_Bound, _Bound]) -> tuple[int] | tuple[int, Version, bool]:
    """A high bound's place, as _meet orders them: none highest, an included version above an excluded one."""
    high = span[1]
    return (1,) if high is None else (0, high[0], high[1])


def _span(versions: SpecifierSet) -> tuple[_Bound, _Bound]:
    """The range's lowest and highest bound (None: none); what only != or === rules out is left
    alone (never refused on a guess)."""
    span: tuple[_Bound, _Bound] = (None, None)
    for spec in versions:
        span = _meet(span, _bounds(spec.operator, spec.version))
    return span


def _meet(first: tuple[_Bound, _Bound], second: tuple[_Bound, _Bound]) -> tuple[_Bound, _Bound]:
    """The bounds of the versions both ranges hold: the higher low bound (an excluded version above
    an included one) and the lower high one."""
    (low, high), (other_low, other_high) = first, second
    if low is None or (other_low is not None and (other_low[0], not other_low[1]) > (low[0], not low[1])):
        low = other_low
    if high is None or (other_high is not None and (other_high[0], other_high[1]) < (high[0], high[1])):
        high = other_high
    return low, high


def _empty(span: tuple[_Bound, _Bound]) -> bool:
    """Whether the bounds hold no version (`>=0.16.0,<0.16.0`)."""
    low, high = span
    if low is None or high is None:
        return False
    return low[0] > high[0] or (low[0] == high[0] and not (low[1] and high[1]))


_Bound = tuple[Version, bool] | None  # a version and whether the range holds it; None: no bound


def _bounds(operator: str, text: str) -> tuple[_Bound, _Bound]:
    """The lowest and highest version one specifier holds."""
    if text.endswith(".*") and operator == "==":  # ==0.16.*: from 0.16 to before 0.17
        stem = Version(text[:-2])
        return (stem, True), (_next_prefix(stem.release), False)
    if "*" in text or operator not in ("==", ">=", ">", "<=", "<", "~="):
        return None, None
    version = Version(text)
    if operator == "~=":  # ~=0.16.1: from 0.16.1 to before 0.17
        return (version, True), (_next_prefix(version.release[:-1]), False)
    low = (version, operator != ">") if operator in ("==", ">=", ">") else None
    high = (version, operator != "<") if operator in ("==", "<=", "<") else None
    return low, high


def _next_prefix(release: tuple[int, ...]) -> Version:
    """The first version after every one starting with `release` (0.16 -> 0.17)."""
    return Version(".".join(map(str, (*release[:-1], release[-1] + 1))))


def _pending_fix(table: dict[str, Any] | None) -> str | None:
    """The pull request of an upstream fix not yet released (said by `list` and `verify`'s hints)."""
    return table.get("pull_request") if table and table.get("state") == "pending" else None


def _launch_rule(table: dict[str, Any] | None) -> LaunchRule | None:
    """set.toml's [needed_by] (checked by _rule_problems), or None: every launch needs the set."""
    if table is None:
        return None
    when = tuple(_launch_rule(entry) or LaunchRule() for entry in table.get(WHEN, []))
    names = {key: tuple(names) for key, names in table.items() if key not in (WHEN, VERSIONS)}
    return LaunchRule(**names, when=when, versions=specifier(table.get(VERSIONS), f"[needed_by] `{VERSIONS}`"))


def _contract(declared: object, directory: Path, manifest: Path) -> tuple[Requirement, ...]:
    """set.toml's `contract`: inline [[contract]] tables, or a TOML file of [[requirement]] tables."""
    if declared is None:
        return ()
    if not isinstance(declared, str):
        return parse_requirements(declared, str(manifest))
    path = directory / declared
    data = read_toml(path, f"contract (named in {manifest})")
    return parse_requirements(data.get("requirement", []), str(path))


def _probe_script(name: str | None, directory: Path, origin: Path, what: str = "probe script") -> Path | None:
    if name is None:
        return None
    path = directory / name
    if path.is_dir():
        raise BadInput(f"manifest {origin}: {what} {quoted(repr(name))} is a directory ({path}), not a script")
    if not path.is_file():
        raise BadInput(f"manifest {origin}: {what} {path} does not exist")
    return path


_PARSED_TOML = "toml"  # the verdicts cache's directory for parsed TOML files (base.remembered)

# a TOML text -> its parse, kept across the commands of a process (cli.percommand.KEPT): each load of the
# library read the same manifests back from the verdicts cache (~8% of a command in process). Keyed by the
# text itself, never stale; each caller gets its own copy; bounded.
_TOML: dict[str, dict[str, Any]] = {}
_TOML_MOST, _TOML_LARGEST = 32, 1 << 18


def read_toml(path: Path, what: str) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BadInput(f"cannot read the {what} {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise BadInput(f"unreadable {what} {path}: {exc}") from exc
    if text in _TOML:
        kept: dict[str, Any] = _copied(_TOML[text])
        return kept
    data = _parsed_toml(text, path, what)
    if len(text) <= _TOML_LARGEST:
        if len(_TOML) >= _TOML_MOST:
            _TOML.clear()
        _TOML[text] = _copied(data)
    return data


def _copied(value: Any) -> Any:
    """A parsed TOML file's own copy: its tables and arrays new, its values (str, numbers, dates) immutable.
    copy.deepcopy took ~4 times as long (its memo and dispatch), as long as reading the file back."""
    if type(value) is dict:
        return {name: _copied(item) for name, item in value.items()}
    if type(value) is list:
        return [_copied(item) for item in value]
    return value


def _parsed_toml(text: str, path: Path, what: str) -> dict[str, Any]:
    # tomllib is pure Python (~0.4 ms a manifest, six a run): the parse of the same text is kept
    key = remembered.key_of([_PARSED_TOML, tomllib.__name__, sys.version_info[:3], text])
    kept = remembered.recall(_PARSED_TOML, key)
    if isinstance(kept, dict):
        return kept
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(f"unreadable {what} {path}: {exc}") from exc
    with suppress(TypeError, ValueError):  # a TOML date is no JSON: such a file is parsed each time
        remembered.remember(_PARSED_TOML, key, data)
    return data


def load_library(root: Path) -> dict[str, PatchSetDef]:
    """The library's sets in the order they apply: those its library.toml names, in that order,
    then the rest by directory name."""
    if not root.is_dir():
        raise BadInput(f"patch library {root} is not a directory")
    sets = {s.name: s for s in (load_set(d) for d in sorted(root.iterdir()) if (d / MANIFEST).is_file())}
    if not sets:
        raise BadInput(f"patch library {root} holds no patch set (no */{MANIFEST})")
    declared = declared_order(root, sets)
    return {name: sets[name] for name in [*declared, *(n for n in sets if n not in declared)]}


def load_named(root: Path, name: str) -> PatchSetDef:
    """choose_set(load_library(root), name), reading and checking the named set alone: another set
    is known by its set.toml's `name` line and checked by the commands that use it (one whose name
    line does not tell its name is loaded whole). No set of that name: the whole library says why."""
    chosen = None
    if root.is_dir():
        for directory in sorted(root.iterdir()):  # each of that name: the last wins, as in load_library
            if (directory / MANIFEST).is_file() and _name_line(directory / MANIFEST) in (None, name):
                patch_set = load_set(directory)
                chosen = patch_set if patch_set.name == name else chosen
    return chosen if chosen is not None else choose_set(load_library(root), name)


def _name_line(manifest: Path) -> str | None:
    """The set's name from its top-level `name = "..."` line, read without TOML; None where a line
    alone cannot tell it (no such line, a table, an array or a multi-line string before it, an
    escape in it, an unreadable file): then TOML reads the file. No regular expression: compiling
    one costs more than this whole read."""
    try:
        text = manifest.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    for line in text.split("\n"):
        if "[" in line or '"""' in line or "'''" in line:
            return None
        key, equals, value = line.partition("=")
        if equals and key.strip() == "name":
            value = value.strip()
            end = value.find('"', 1)
            said, rest = value[1:end], value[end + 1 :].strip()
            plain = value.startswith('"') and end > 1 and "\\" not in said and "\r" not in said
            return said if plain and (not rest or rest.startswith("#")) else None
    return None


def declared_order(root: Path, sets: dict[str, PatchSetDef]) -> list[str]:
    """library.toml's `order`: the set names in the order they apply (none: [])."""
    path = root / LIBRARY_MANIFEST
    if not path.is_file():
        return []
    data = read_toml(path, "library manifest")
    order = data.get("order", [])
    problem = None
    if unknown := [key for key in data if key != "order"]:
        near = " (did you mean `order`?)" if _nearest(unknown[0], ["order"]) else " (it takes only `order`)"
        problem = f"no key `{unknown[0]}`{near}"
    elif not isinstance(order, list) or not all(isinstance(name, str) for name in order):
        problem = "`order` must be an array of set names"
    elif len(set(order)) != len(order):
        problem = "`order` names a set twice"
    elif unknown := [name for name in order if name not in sets]:
        problem = f"`order` names {', '.join(unknown)}, which the library does not hold (it has: {', '.join(sets)})"
    if problem:
        raise BadInput(f"library manifest {path}: {problem}", hint="order = [set names, in the order they apply]")
    return list(order)


def load_chosen(library: str | Path | None, set_name: str | None) -> PatchSetDef:
    """The named set (or the only one) of the library `locate` chooses."""
    return choose_set(load_library(locate(library).path), set_name)


def choose_set(sets: dict[str, PatchSetDef], name: str | None) -> PatchSetDef:
    if name:
        if name not in sets:
            raise BadInput(f"no patch set {name!r} in the library; it has: {', '.join(sets)}")
        return sets[name]
    if len(sets) == 1:
        return next(iter(sets.values()))
    raise BadInput(f"the library holds several sets ({', '.join(sets)}); choose one with --set")


def refuse_unordered(root: Path, sets: dict[str, PatchSetDef], files: dict[str, set[str]]) -> None:
    """Two sets that change the same file (`files`: set name -> the paths its series change) must
    both be named in library.toml's `order`: which one applies first decides what the other's
    patches meet. Refused otherwise, naming both sets and the file."""
    declared = declared_order(root, sets)
    seen: list[str] = []
    for name in files:
        for earlier in seen:
            common = sorted(files[name] & files[earlier])
            if common and not (name in declared and earlier in declared):
                raise BadInput(
                    f"the sets {earlier} and {name} both change {common[0]}, and the library does not "
                    "declare which applies first",
                    hint=f"name both, in the order they apply, in {root / LIBRARY_MANIFEST}: "
                    f'order = ["{earlier}", "{name}"]',
                )
        seen.append(name)


def choose_sets(sets: dict[str, PatchSetDef], names: tuple[str, ...]) -> list[PatchSetDef]:
    """The named sets (every set without names), in the library's order."""
    unknown = [name for name in names if name not in sets]
    if unknown:
        raise BadInput(f"no patch set {unknown[0]!r} in the library; it has: {', '.join(sets)}")
    return [s for name, s in sets.items() if not names or name in names]


def select(patch_set: PatchSetDef, version: Version) -> Selection:
    """Map a version onto the set: a release's series, upstream, or unsupported. Every range is
    matched by the release the version belongs to (version.release_version)."""

    note = _judged_as(version)
    version = Version(version.public)
    if patch_set.upstream is not None and in_range(patch_set.upstream, version):
        return Selection(patch_set.name, UPSTREAM, version, note=note, patch_set=patch_set)
    for release in patch_set.releases:
        if release.covers(version):
            patches = release.read_patches(patch_set.roots)
            if not patches:
                raise BadInput(f"{release.directory / SERIES} lists no patch")
            return Selection(patch_set.name, PATCH, version, patches, release, note, patch_set)
    if patch_set.supported is not None and not in_range(patch_set.supported, version):
        return Selection(
            patch_set.name,
            UNSUPPORTED,
            version,
            patch_set=patch_set,
            note=f"vLLM {version} is outside the range the set {patch_set.name!r} supports "
            f"({supported_range(patch_set)})",
        )
    dev = (
        f" (judged as release {release_version(version)}: pass --vllm-version with the release it derives from)"
        if release_version(version) != version
        else ""
    )
    nearest = nearest_series(patch_set, version)
    near = f"the releases nearest it with one: {', '.join(nearest)} ({hints.command('list')} shows each); "
    raise NoPatchSet(
        f"the set {patch_set.name!r} has no patch series for vLLM {version}{dev}",
        hint=f"{near if nearest else ''}a maintainer adds one: {port_command(patch_set, version)} (docs/library.md)",
    )


def nearest_series(patch_set: PatchSetDef, version: Version) -> list[str]:
    """The releases nearest `version` (the newest below it, the oldest above it) that the set has a
    series for, as the set names them (`==0.16.0` -> 0.16.0); for a version in its range without one."""
    version = Version(version.public)
    named = sorted(
        {Version(c.version) for r in patch_set.releases for c in r.versions if c.operator in ("==", ">=", "<=")}
    )
    covered = [v for v in named if any(r.covers(v) for r in patch_set.releases)]
    below = [v for v in covered if v < version][-1:]
    above = [v for v in covered if v > version][:1]
    return [str(v) for v in below + above]


def no_series_said(patch_set: PatchSetDef, version: Version) -> str:
    """The set's gap at `version`, in a few words: in its range, no series, the releases nearest."""
    nearest = nearest_series(patch_set, version)
    near = f" (nearest with one: {', '.join(nearest)})" if nearest else ""
    return f"no series of {patch_set.name} for vLLM {Version(version.public)}{near}"


def no_series_fix(patch_set: PatchSetDef, version: Version) -> str:
    """What makes a tree safe for a set that has no series for its version: a release it has one
    for, or a new series (a maintainer's `patchkit port`, docs/library.md)."""
    nearest = nearest_series(patch_set, version)
    release = f"vLLM {' or '.join(nearest)}" if nearest else "a vLLM release it has a series for"
    return (
        f"install {release}, or add a series of it (a maintainer: {port_command(patch_set, version)}, docs/library.md)"
    )


def port_command(patch_set: PatchSetDef, version: Version) -> str:
    """`patchkit port` of the set from the nearest older release with a series to `version` (a
    release; a build between releases: V1 and V2 to fill in)."""
    plain = Version(version.public)
    older = [v for v in nearest_series(patch_set, plain) if Version(v) < plain]
    span = (
        ["--from", older[0], "--to", str(plain)]
        if older and not plain.is_prerelease
        else ["--from", "V1", "--to", "V2"]
    )
    return hints.command("port", *span, chosen=hints.for_set(patch_set.name))


def has_series(patch_set: PatchSetDef, version: Version) -> bool:
    """Whether the set has a series for `version` that vLLM does not ship itself (as select tells)."""
    version = Version(version.public)
    if patch_set.upstream is not None and in_range(patch_set.upstream, version):
        return False
    return any(release.covers(version) for release in patch_set.releases)


def to_judge(patch_set: PatchSetDef, version: Version) -> bool:
    """Whether a launch that needs the set has something of it to judge on `version`: a series, or
    a gap (in its supported range, not upstream, no series: a failure); not upstream, not outside."""
    plain = Version(version.public)
    if patch_set.upstream is not None and in_range(patch_set.upstream, plain):
        return False
    return patch_set.supported is None or in_range(patch_set.supported, plain)


def between_releases(version: Version) -> bool:
    """A nightly or a source checkout's build (0.33.1.dev12+gabc1234): its files are a release's
    plus what came after, so which series fits is for a dry run to say (see newest_first)."""
    return version.dev is not None


def newest_first(patch_set: PatchSetDef, version: Version) -> list[tuple[Release, Version]]:
    """The set's series that may fit a build between releases, newest first: each with the newest
    release at or below the build's base version it covers (the base itself when it covers it)."""
    base = release_version(version)
    found = [(release, newest) for release in patch_set.releases if (newest := _newest_at_or_below(release, base))]
    return sorted(found, key=lambda pair: pair[1], reverse=True)


def _newest_at_or_below(release: Release, base: Version) -> Version | None:
    """The newest version `release` covers that is at most `base` (None: it covers none); a bound
    `<X` stands for the last release before X, ranked just below X."""
    if release.covers(base):
        return base
    uppers = []
    for clause in release.versions:
        bound = Version(clause.version.rstrip(".*"))
        if clause.operator in ("==", "<=", "==="):
            uppers.append(bound)
        elif clause.operator == "<":
            uppers.append(Version(f"{bound.public}.dev0") if bound.dev is None else bound)  # just below X
    newest = min(uppers, default=None)
    if newest is None or newest > base:
        return None
    lowest = [Version(c.version) for c in release.versions if c.operator in (">=", ">")]
    return newest if all(low <= newest for low in lowest) else None


def series_for(patch_set: PatchSetDef, release: Release, version: Version, note: str) -> Selection:
    """The selection of one release's series for `version` (a build between releases), with `note`."""
    patches = release.read_patches(patch_set.roots)
    if not patches:
        raise BadInput(f"{release.directory / SERIES} lists no patch")
    return Selection(patch_set.name, PATCH, version, patches, release, note, patch_set)


def _judged_as(version: Version) -> str | None:
    """The note for a version that is not a plain release: what it is matched as."""
    release = release_version(version)
    if version.local and version.public == str(release):  # a patched wheel keeps the label: never "ignored"
        return f"local version label +{version.local} (a build of {release}): matched as {release}"
    public = Version(version.public)
    if public == release:
        return None
    # a .dev or pre-release build comes before its release, a .post one after it
    built = "a build after release" if public > release else "a build before release"
    if version.local:
        return f"local version label +{version.local}; {version.public} is {built} {release}"
    return f"{version} is {built} {release}: matched as {release}"


def outside_every_range(version: str, sets: list[PatchSetDef]) -> str | None:
    """Several sets none of which supports `version`, said once: each range with the sets that
    share it ("vLLM 0.9.2 is outside the range every set supports (eagle3, ...: >=0.11.0)"); None
    when one set is no such refusal (a gap in its series says why of its own)."""
    if len(sets) < 2 or any(s.supported is None or in_range(s.supported, Version(version)) for s in sets):
        return None
    sharing: dict[str, list[str]] = {}
    for patch_set in sets:
        sharing.setdefault(str(patch_set.supported), []).append(patch_set.name)
    said = "; ".join(f"{', '.join(names)}: {spec}" for spec, names in sharing.items())
    return f"vLLM {version} is outside the range every set supports ({said})"


def supported_range(patch_set: PatchSetDef) -> str:
    parts = [str(patch_set.supported)] if patch_set.supported else []
    if patch_set.upstream:
        parts.append(f"upstream from {patch_set.upstream}")
    return "; ".join(parts) or "any"


def adhoc_selection(paths: list[str], version: Version | None) -> Selection:
    """--patch FILE ...: the given diffs stand in for the library's series."""
    patches = [read_patch(Path(p), follow_symlinks=True) for p in paths]  # any file the user names
    return Selection(adhoc_set_name(patches), PATCH, version, patches)


def adhoc_set_name(patches: list[Patch]) -> str:
    """The set an ad-hoc apply is recorded as: the same diffs always name the same set, other
    diffs another, so undoing one ad-hoc apply never undoes another."""

    digest = hashlib.sha256("\n".join(p.sha256 for p in patches).encode()).hexdigest()
    return f"adhoc-{digest[:12]}"
