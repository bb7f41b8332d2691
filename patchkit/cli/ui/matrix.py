"""The compatibility matrix: releases by set, each cell applied / upstream / conflict / failed.
`verify --all --format markdown` prints it from real releases (CI writes it to the job summary);
`list` shows it from what the library declares, nothing fetched."""

from __future__ import annotations

import re
from contextlib import suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from patchkit.base.enums import ReleaseOutcome, StrEnum
from patchkit.cli.ui.text import write_plainly

if TYPE_CHECKING:  # pragma: no cover
    from patchkit.releases.check import ReleaseResult


class LibraryPatchState(StrEnum):
    """A patch file of the library as `list` reports it."""

    OK = "ok"  # its sha256 is the one the series records
    UNRECORDED = "unrecorded"  # the series records no sha256 for it
    DAMAGED = "damaged"  # unreadable, or its sha256 differs from the recorded one


class MatrixCell(StrEnum):
    """A cell of the compatibility matrix: a release (or a library range) for one set."""

    APPLIED = "applied"
    UPSTREAM = "upstream"
    CONFLICT = "conflict"
    FAILED = "failed"
    UNSUPPORTED = "unsupported"  # in the set's range without a series
    NOT_COVERED = "-"  # outside the set's range


_OUTCOME_CELLS = {
    ReleaseOutcome.PATCHED: MatrixCell.APPLIED,
    ReleaseOutcome.UPSTREAM: MatrixCell.UPSTREAM,
    ReleaseOutcome.CONFLICT: MatrixCell.CONFLICT,
    ReleaseOutcome.CHECK_FAILED: MatrixCell.FAILED,
    ReleaseOutcome.UNSUPPORTED: MatrixCell.UNSUPPORTED,
}


@dataclass
class Matrix:
    """Rows (releases, or the library's version ranges) by columns (sets)."""

    sets: list[str]
    cells: dict[str, dict[str, MatrixCell]] = field(default_factory=dict)  # row -> set -> cell

    def put(self, row: str, set_name: str, cell: MatrixCell) -> None:
        self.cells.setdefault(row, {})[set_name] = cell

    def rows(self) -> list[list[str]]:
        ordered = sorted(self.cells, key=_order)
        return [[row, *(self.cells[row].get(s, MatrixCell.NOT_COVERED) for s in self.sets)] for row in ordered]

    def columns(self) -> list[str]:
        return ["vLLM", *self.sets]


def _order(row: str) -> tuple[Version, str]:
    """A release, or a range by the lowest version it names (`>=0.18.0` after 0.17.1)."""
    named = [Version(v) for v in re.findall(r"\d+(?:\.\d+)*", row)]
    return min(named, default=Version("0")), row


def _readable(versions: str) -> str:
    """A release's specifier as a row: a pinned release its version, a range its lower bound first."""
    parts = sorted(versions.split(","), key=lambda part: not part.startswith(">"))
    return ",".join(parts).removeprefix("==")


def release_cell(result: ReleaseResult) -> MatrixCell:
    """A verified release's cell: failed too for an upstream regression or a revert not byte-identical."""
    if result.failed and result.outcome != ReleaseOutcome.CONFLICT:
        return MatrixCell.FAILED
    return _OUTCOME_CELLS[result.outcome]


def from_releases(set_name: str, results: list[ReleaseResult]) -> Matrix:
    """From `verify`'s results for one set: a row per release."""
    matrix = Matrix([set_name])
    for r in results:
        matrix.put(str(r.version), set_name, release_cell(r))
    return matrix


def from_library(described: list[dict[str, Any]]) -> Matrix:
    """From `list`'s description of each set: a row per release the library names (a pinned
    release, a bound of a range) and one for the releases after the last, each cell what that set
    holds for it: applied where a series covers it (failed where a patch of it is damaged),
    upstream in its upstream range, else `-`. Never a set's range as a row: another set's cell
    there would speak for releases it holds differently (`>=0.11.1,<0.13.0  -` beside eagle3's
    applied 0.11.1)."""
    matrix = Matrix([s["name"] for s in described])
    held = {s["name"]: _held(s) for s in described}
    versions = sorted({v for s in described for spec in _specifiers(s) for v in _named(spec)})
    for version in versions:
        for name, ranges in held.items():
            matrix.put(_release(version), name, _cell(ranges, version))
    if versions:  # the releases after the last named: one row, when some set holds them
        after = Version(f"{versions[-1]}.1")
        cells = {name: _cell(ranges, after) for name, ranges in held.items()}
        if any(cell != MatrixCell.NOT_COVERED for cell in cells.values()):
            last = _release(versions[-1])
            row = f">{last}"
            if matrix.cells[last] == cells:  # the last named release holds as those after it: one row
                del matrix.cells[last]
                row = f">={last}"
            for name, cell in cells.items():
                matrix.put(row, name, cell)
    return matrix


def _release(version: Version) -> str:
    """A release as vLLM numbers them: `<0.17` bounds at 0.17.0."""
    padded = Version(".".join(map(str, (*version.release, 0, 0)[:3])))
    return str(padded) if padded == version and len(version.release) < 3 else str(version)


def _held(described: dict[str, Any]) -> list[tuple[SpecifierSet, MatrixCell]]:
    """A set's ranges in the order they decide a release: its series, then its upstream range."""
    ranges = []
    for release in described["releases"]:
        damaged = any(p["state"] == LibraryPatchState.DAMAGED for p in release["patches"])
        ranges.append((SpecifierSet(release["versions"]), MatrixCell.FAILED if damaged else MatrixCell.APPLIED))
    if described["upstream"]:
        ranges.append((SpecifierSet(described["upstream"]), MatrixCell.UPSTREAM))
    return ranges


def _specifiers(described: dict[str, Any]) -> list[str]:
    return [r["versions"] for r in described["releases"]] + ([described["upstream"]] if described["upstream"] else [])


def _named(specifier: str) -> list[Version]:
    """The releases a specifier names: each clause's version (a wildcard's and an exclusion's aside)."""
    named = []
    for clause in SpecifierSet(specifier):
        if clause.operator != "!=" and not clause.version.endswith(".*"):
            with suppress(ValueError):
                named.append(Version(clause.version))
    return named


def _cell(ranges: list[tuple[SpecifierSet, MatrixCell]], version: Version) -> MatrixCell:
    return next((cell for spec, cell in ranges if spec.contains(version, prereleases=True)), MatrixCell.NOT_COVERED)


def markdown(matrix: Matrix) -> str:
    """One GitHub-flavoured Markdown table."""
    lines = ["| " + " | ".join(matrix.columns()) + " |", "|" + " --- |" * len(matrix.columns())]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in matrix.rows()]
    return "\n".join(lines) + "\n"


def write_markdown(matrix: Matrix) -> None:
    """The matrix as the whole of stdout (`verify --format markdown`), written also with -q."""
    write_plainly(lambda stdout: stdout.write(markdown(matrix)))
