from __future__ import annotations

import errno
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from patchkit.base import hints
from patchkit.base.errors import TargetError
from patchkit.cli.commands import Shown, make_ui, resolve_telling
from patchkit.cli.commands.options import target_options
from patchkit.cli.commands.preflight import LAUNCH_SETTINGS, launch_argument, run_preflight, show
from patchkit.cli.ui import UI, target_json
from patchkit.engine.resolve import Chosen, library_sets, resolve_sets, resolve_target, several
from patchkit.launch.command import LaunchCommand, frame
from patchkit.launch.engine import few_named
from patchkit.launch.preflight import PreflightResult, default_options

WIDTH = 80  # the warning before the exec: one line in a terminal of 80 columns, or a journal's

if TYPE_CHECKING:
    from patchkit.base.options import Options
    from patchkit.engine.operations import ApplyResult
    from patchkit.engine.several import SetsApplied


@click.command(context_settings=LAUNCH_SETTINGS)
@target_options(sets_repeatable=True)
@click.option(
    "--apply",
    "apply_first",
    is_flag=True,
    help="Apply first each covering set (or each --set) that is not-applied, or that the launch guard "
    "refuses where apply is the fix.",
)
@click.option("--no-preflight", is_flag=True, help="Run COMMAND without checking it first.")
@launch_argument
def command(
    opts: Options, quiet: bool, verbose: int, apply_first: bool, no_preflight: bool, launch: tuple[str, ...]
) -> ApplyResult | SetsApplied | PreflightResult | None:
    """Preflight a vLLM launch (static checks), then become it (exec: same PID, signals, exit status).

    When a check fails, COMMAND does not run and the exit code is 1. For a systemd ExecStart= or a
    container entrypoint: `patchkit run --apply -- vllm serve MODEL ...`.
    """
    launch_command = frame(list(launch))
    if apply_first or not no_preflight:
        ui = make_ui("text", quiet, verbose)
        result = _checked(ui, opts, launch_command, apply_first=apply_first, preflight=not no_preflight)
        if result is not None:
            return result
    _exec(launch_command.argv, opts.python)


def _checked(
    ui: UI, opts: Options, launch_command: LaunchCommand, *, apply_first: bool, preflight: bool
) -> ApplyResult | SetsApplied | PreflightResult | None:
    """None when COMMAND may run; else the result that stops it (its outcome is the exit code)."""
    if apply_first:
        applied = _apply_when_not_applied(ui, opts, launch_command)
        if applied is not None and applied.error is not None:
            return applied
    if not preflight:
        return None
    result = run_preflight(ui, opts, launch_command, no_import=True, shortcut=True)
    if result.ok:
        _name_unjudged(ui, result.unjudged_plugins)
        return None
    show(ui, result, "text")
    again = hints.command("preflight", "--", "COMMAND", chosen=default_options(opts, launch_command))
    ui.error("not launched: the preflight failed", f"{again} shows the same findings")
    return result


def _name_unjudged(ui: UI, plugins: list[str]) -> None:
    """The general plugins the launch loads, which the static preflight did not judge (one may
    register another model class, or change vLLM): named on one line before the exec, never silent."""
    if plugins:
        said = "plugins not judged: {} (`patchkit preflight` asks vLLM)"
        ui.warn(said.format(few_named(plugins, WIDTH - len("warning: " + said.format("")))))


def _apply_when_not_applied(ui: UI, opts: Options, launch_command: LaunchCommand) -> ApplyResult | SetsApplied | None:
    chosen = default_options(opts, launch_command)
    with hints.selected(chosen):  # the tree the launch imports: its hints name it
        return _apply_to(ui, chosen)


def _apply_to(ui: UI, chosen: Options) -> ApplyResult | SetsApplied | None:
    """Each covering set (or each --set) that needs it applied as `patchkit apply` does; None when none does."""
    # lazy: `run`'s fast path never applies: the engine's apply loads for --apply
    from patchkit.engine.several import SetsApplied, apply_needed, require_order

    sets = library_sets(chosen)
    if several(chosen, sets):
        target = resolve_target(chosen)
        ui.knows(target_json(target))
        covering = resolve_sets(chosen, target)
        require_order(chosen, covering)
    else:
        resolved = resolve_telling(ui, chosen, sets=sets)
        covering = [Chosen(resolved.set_name, resolved)]
    many = len(covering) > 1

    def watch_for(each: Chosen) -> Shown:
        if many and each.resolved is not None:
            ui.header(each.resolved)  # as `patchkit apply` shows each set
        return Shown(ui)

    result = apply_needed(covering, watch_for=watch_for, several=many)
    if result is not None and result.error is None:
        for each in result.sets if isinstance(result, SetsApplied) else []:
            if each.result is not None:
                ui.line(each.result.message)
        ui.line(result.message, style="green")
    return result


def _exec(argv: list[str], python: str | None) -> NoReturn:
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        missing = exc.errno == errno.ENOENT and os.sep not in argv[0]
        raise TargetError(
            f"cannot run {argv[0]}: " + ("it is not on PATH" if missing else f"{exc.strerror or exc}"),
            hint=_not_on_path_hint(argv[0], python) if missing else None,
        ) from None


def _not_on_path_hint(name: str, python: str | None) -> str:
    """Where the launch's program is: --python's own script when it has one, else the venv's."""
    script = Path(python).absolute().parent / name if python else None
    if script is not None and script.is_file():
        return f"give --python's script by its path, `-- {script} ...`, or activate that venv"
    return f"activate vLLM's venv, or give the script's path: `-- VENV/bin/{name} ...`"
