"""An operation's steps (its warnings, the plan, the checks) shown through the console as they happen."""

from __future__ import annotations

from typing import TYPE_CHECKING

import patchkit.cli.ui as views
from patchkit.checks import bytecode
from patchkit.cli.ui.plan import show_plan

if TYPE_CHECKING:  # pragma: no cover
    from patchkit.checks import CheckResult
    from patchkit.cli.ui.console import UI
    from patchkit.series.plan import Plan


class Shown:
    """An operation's steps shown through the UI as they happen (operations.Watcher)."""

    def __init__(self, ui: UI, *, dry_run: bool = False, said: set[str] | None = None) -> None:
        self.ui = ui
        self.dry_run = dry_run
        self.tables = 0  # the check tables shown so far
        self.said = said if said is not None else set()  # shared by the sets of one command

    def warning(self, text: str) -> None:
        """A warning, once a command: one about the whole tree (the guard's) is met by every set."""
        if text not in self.said:
            self.said.add(text)
            self.ui.warn(text)

    def planned(self, plan: Plan) -> None:
        show_plan(self.ui, plan, dry_run=self.dry_run)

    def checked(self, results: list[CheckResult]) -> None:
        """The checks on the planned files, then (apply) those on the files written. A dry run that
        passes counts them in its last line: its table is for -v."""
        if self.dry_run and not self.ui.verbose and not any(r.failed for r in results):
            return
        if not self.tables and _bytecode_passed(results) and not self.ui.verbose:  # revert's one check: -v shows it
            return
        views.reports.show_checks(self.ui, results, label="checks" if not self.tables else "written")
        self.tables += 1


def _bytecode_passed(results: list[CheckResult]) -> bool:
    """Only the bytecode fix ran (revert), and it passed: "1 check passed" would say nothing, and its
    label (`bytecode`) is not a word a user knows; revert's own line says the files are stock."""
    return bool(results) and all(r.check == bytecode.NAME and not r.failed for r in results)
