"""Verification: a list of named checks run on the tree as it is or as a plan would leave it.

Each check gets the paths the patch set touches and a way to read their (planned) content, and
returns results; a failing result with level "error" fails `verify` and stops `apply` before
anything is written. A check is a module in this package, listed in registry.default_checks().
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from patchkit.base.enums import CheckLevel, CheckStatus
from patchkit.base.values import FrozenValue, frozen

if TYPE_CHECKING:
    from packaging.version import Version

    from patchkit.series.library import PatchSetDef
    from patchkit.store.state import State

ERROR = CheckLevel.ERROR
WARNING = CheckLevel.WARNING

Reader = Callable[[str], "bytes | None"]

# CPython's compiler and pyflakes hold an AST of ~70 times a file's size: a file larger than this
# (no vLLM source is within a factor of 20 of it) is not parsed; its checks say so (skipped).
LARGEST_PARSED = 8 * 1024 * 1024


@dataclass(frozen=True, eq=False, repr=False)  # not @frozen: ~6,000 a large diff's dry run, each made faster so
class CheckResult(FrozenValue):
    """One check's verdict on one file (or the tree): passed, or why not and how badly."""

    check: str
    path: str | None
    ok: bool
    message: str
    level: CheckLevel = ERROR
    # the source line a syntax error is on, a caret under where it is: shown to a person, not in JSON
    excerpt: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        # a level read back from JSON (a cached result) is a str: the enum's, or ValueError
        object.__setattr__(self, "level", CheckLevel(self.level))

    @property
    def failed(self) -> bool:
        return not self.ok and self.level == ERROR

    @property
    def status(self) -> CheckStatus:
        """pass, fail, warning; skipped for a passing result at warning level (a check that did not run)."""
        if self.ok:
            return CheckStatus.PASS if self.level != WARNING else CheckStatus.SKIPPED
        return CheckStatus.FAIL if self.failed else CheckStatus.WARNING

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        del data["excerpt"]  # the JSON document keeps its keys; the text report shows the excerpt
        return data

    def describe(self) -> str:
        return f"{self.check}: {self.path or '-'}: {self.message}"


def too_large_to_parse(check: str, path: str, data: bytes) -> CheckResult | None:
    """The skipped result for a file beyond LARGEST_PARSED, else None."""
    if len(data) <= LARGEST_PARSED:
        return None
    size, limit = len(data) / 2**20, LARGEST_PARSED // 2**20
    return CheckResult(check, path, True, f"not checked: {size:.0f} MiB is beyond the {limit} MiB parsed", WARNING)


@frozen
class CheckContext(FrozenValue):
    """What a check reads: the paths, their planned, stock and current contents, the tree and set."""

    paths: list[str]  # the files the series touches
    read: Reader  # their content as checked: planned, or as on disk
    python: str | None  # the interpreter that will run vLLM; None: the one running patchkit
    read_stock: Reader | None = None  # their stock content, where known
    read_current: Reader | None = None  # their content on disk, as the plan read it
    root: Path | None = None  # the target tree
    patch_set: PatchSetDef | None = None  # the library's set (None for ad-hoc --patch)
    version: Version | None = None  # the vLLM version checked
    on_disk: bool = False  # True: `read` gives the files as written (an import can see them)
    import_probe: bool = True  # False: --no-import, the probe check does not import vLLM
    state: State | None = None  # the tree's record as the command read it (None: read where needed)


class Check(Protocol):
    name: str

    def run(self, ctx: CheckContext) -> list[CheckResult]: ...
