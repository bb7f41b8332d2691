"""One module per command; the options they share are declared once in commands.options."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from patchkit.cli.ui.console import UI
from patchkit.cli.ui.json_views import resolved_json, target_json
from patchkit.engine.resolve import resolve, resolve_target

if TYPE_CHECKING:
    from patchkit.base.options import Options
    from patchkit.engine.resolve import Resolved
    from patchkit.series.library import PatchSetDef


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
