"""The compatibility matrix: releases by set, each cell applied / upstream / conflict / failed.
`verify --all --format markdown` prints it from real releases (CI writes it to the job summary);
`list` shows it from what the library declares, nothing fetched."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

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
    # row -> set -> cell; a library range row's cell over the releases it spans: "applied/upstream"
    cells: dict[str, dict[str, str]] = field(default_factory=dict)

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
    """From `list`'s description of each set: a row per release specifier (a pinned release shows
    its version), applied where a series holds it (failed where a patch of it is damaged), and
    the set's upstream range."""
    matrix = Matrix([s["name"] for s in described])
    ranges: list[tuple[str, SpecifierSet, MatrixCell]] = []  # a set's range rows, held against every release row
    for s in described:
        for release in s["releases"]:
            damaged = any(p["state"] == LibraryPatchState.DAMAGED for p in release["patches"])
            cell = MatrixCell.FAILED if damaged else MatrixCell.APPLIED
            matrix.put(_readable(release["versions"]), s["name"], cell)
            ranges.append((s["name"], SpecifierSet(release["versions"]), cell))
        if s["upstream"]:
            matrix.put(s["upstream"], s["name"], MatrixCell.UPSTREAM)
            ranges.append((s["name"], SpecifierSet(s["upstream"]), MatrixCell.UPSTREAM))
    _fill_covered(matrix, ranges)
    return matrix


def _fill_covered(matrix: Matrix, ranges: list[tuple[str, SpecifierSet, MatrixCell]]) -> None:
    """A row another set declared says what each set holds there, never `-` where the set covers it
    (`-` is only a release the set does not cover): a release row that set's range cell; a range
    row (`>=0.23.0`) the cells over the releases it spans, joined where they change."""
    # the versions rows name: each release, and where each range starts (`>=0.23.0`: 0.23.0)
    named = {Version(row) for row in matrix.cells if _is_release(row)}
    named |= {low for row in matrix.cells if not _is_release(row) for low in _lowest(row)}
    for row, cells in matrix.cells.items():
        spanned = [Version(row)] if _is_release(row) else _spanned(row, named)
        for set_name in matrix.sets:
            held = list(dict.fromkeys(_held(set_name, version, ranges) for version in spanned))
            if set_name not in cells and held and held != [MatrixCell.NOT_COVERED]:
                cells[set_name] = "/".join(held)


def _is_release(row: str) -> bool:
    try:
        Version(row)
    except InvalidVersion:  # a range row
        return False
    return True


def _lowest(row: str) -> list[Version]:
    return [Version(clause.version) for clause in SpecifierSet(row) if clause.operator == ">="]


def _spanned(row: str, named: set[Version]) -> list[Version]:
    """The versions the rows name that a range row spans, in order."""
    return sorted(version for version in named if SpecifierSet(row).contains(version, prereleases=True))


def _held(set_name: str, version: Version, ranges: list[tuple[str, SpecifierSet, MatrixCell]]) -> str:
    """What the set's library holds for `version`: the cell of the first of its ranges that covers it."""
    for name, versions, cell in ranges:
        if name == set_name and versions.contains(version, prereleases=True):
            return cell
    return MatrixCell.NOT_COVERED


def markdown(matrix: Matrix) -> str:
    """One GitHub-flavoured Markdown table."""
    lines = ["| " + " | ".join(matrix.columns()) + " |", "|" + " --- |" * len(matrix.columns())]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in matrix.rows()]
    return "\n".join(lines) + "\n"


def write_markdown(matrix: Matrix) -> None:
    """The matrix as the whole of stdout (`verify --format markdown`), written also with -q."""
    write_plainly(lambda stdout: stdout.write(markdown(matrix)))
