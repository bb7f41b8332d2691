"""All terminal output, and only here. Rich tables and colour in a terminal; plain text when piped
(tables aligned; lines and the plan's tab-separated rows written without importing rich); no colour
when NO_COLOR is set, which rich honours; JSON on stdout where asked, one document per run, written
when the CLI knows the run's exit code (see run.Run).

    text        what may reach a terminal, the styles of states, plain writes to stdout
    findings    failures first (file:line, a caret, the fix), then one verdict line
    matrix      releases by set (verify --format markdown, list)
    console     UI: lines, notes, errors, tables and progress on stdout and stderr
    screen      what plan and reports need of the console (a Protocol: the console imports them)
    plan        the plan table
    header      where vLLM is, its version, the set and its series, the notes
    reports     a target's status, checks and releases
    json_views  the plan, the target and its status as JSON
    junit       JUnit XML
    run         the run's one document on stdout
    steps       an operation's steps (the plan, the checks) shown as they happen

Nothing is re-exported here: each caller imports the modules it uses, so that a command loads only
what it shows (`run`'s fast path shows no table, no report and no plan). Two are named through
this package where the one use of a module is rare: `views.reports` (the checks' table: a quiet
dry run that passes shows none) and `views.junit` (a failed run's JUnit document).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from types import ModuleType

    from patchkit.cli.ui import junit  # (reports not: it imports run, which names this package)

_ON_FIRST_USE = {"junit", "reports"}


def __getattr__(name: str) -> ModuleType:
    if name not in _ON_FIRST_USE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return import_module(f"{__name__}.{name}")


__all__ = ["junit", "reports"]
