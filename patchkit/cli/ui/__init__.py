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
    reports     a target's status, checks and releases
    json_views  the plan, the target and its status as JSON
    junit       JUnit XML
    run         the run's one document on stdout
"""

from patchkit.cli.ui.console import UI
from patchkit.cli.ui.findings import Failure
from patchkit.cli.ui.json_views import plan_json, resolved_json, status_json, target_json
from patchkit.cli.ui.junit import JUnitCase, checks_junit, error_junit, junit, releases_junit, sets_releases_junit
from patchkit.cli.ui.plan import file_rows, hunk_rows, offsets_note, plain_plan, plan_sections
from patchkit.cli.ui.run import SCHEMA_VERSION, Run, begin_run, finish_run, write_junit
from patchkit.cli.ui.text import STATE_STYLES, visible

__all__ = [
    "SCHEMA_VERSION",
    "STATE_STYLES",
    "UI",
    "Failure",
    "JUnitCase",
    "Run",
    "begin_run",
    "checks_junit",
    "error_junit",
    "file_rows",
    "finish_run",
    "hunk_rows",
    "junit",
    "offsets_note",
    "plain_plan",
    "plan_json",
    "plan_sections",
    "releases_junit",
    "resolved_json",
    "sets_releases_junit",
    "status_json",
    "target_json",
    "visible",
    "write_junit",
]
