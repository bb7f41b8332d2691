"""One module per command; the options they share are declared once in commands.options."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from patchkit.cli.ui import UI, resolved_json, target_json
from patchkit.engine.resolve import resolve, resolve_target

if TYPE_CHECKING:
    from patchkit.base.options import Options
    from patchkit.checks import CheckResult
    from patchkit.engine.resolve import Resolved
    from patchkit.series.library import PatchSetDef
    from patchkit.series.plan import Plan


def make_ui(fmt: str = "text", quiet: bool = False, verbose: int = 0) -> UI:
    return UI(fmt=fmt, quiet=quiet, verbose=verbose)


def resolve_telling(
    ui: UI, opts: Options, *, found_by: str | None = None, sets: dict[str, PatchSetDef] | None = None
) -> Resolved:
    """resolve(opts), telling the UI what is found on the way (the target, then its version and
    series): a run that fails afterwards still reports them in its JSON document. `found_by`: how
    the target was chosen, when not by the user's own --target or --python; `sets`: the library's
    sets, when the command has loaded them already."""
    target = resolve_target(opts)
    target = dataclasses.replace(target, found_by=found_by) if found_by else target
    ui.knows(target_json(target))
    resolved = resolve(opts, target=target, sets=sets)
    ui.knows(resolved_json(resolved))
    return resolved


class Shown:
    """An operation's steps shown through the UI as they happen (operations.Watcher)."""

    def __init__(self, ui: UI, *, dry_run: bool = False) -> None:
        self.ui = ui
        self.dry_run = dry_run
        self.tables = 0  # the check tables shown so far

    def warning(self, text: str) -> None:
        self.ui.warn(text)

    def planned(self, plan: Plan) -> None:
        self.ui.plan(plan, dry_run=self.dry_run)

    def checked(self, results: list[CheckResult]) -> None:
        """The checks on the planned files, then (apply) those on the files written. A dry run that
        passes counts them in its last line: its table is for -v."""
        if self.dry_run and not self.ui.verbose and not any(r.failed for r in results):
            return
        self.ui.checks(results, label="checks" if not self.tables else "written")
        self.tables += 1
