from __future__ import annotations

import errno
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from patchkit.base import hints
from patchkit.base.errors import PatchkitError, TargetError, TreeRefused
from patchkit.base.options import Options
from patchkit.cli.commands import make_ui
from patchkit.cli.commands.options import target_options
from patchkit.cli.commands.preflight import LAUNCH_SETTINGS, framed, launch_argument, run_preflight, show
from patchkit.cli.ui.console import UI
from patchkit.launch.command import LaunchCommand, read
from patchkit.launch.engine import few_named
from patchkit.launch.preflight import PreflightResult, default_options, needs_of
from patchkit.launch.validation import CHECK as VALIDATION

WIDTH = 80  # the warning before the exec: one line in a terminal of 80 columns, or a journal's

if TYPE_CHECKING:
    from patchkit.engine.operations import ApplyResult
    from patchkit.engine.several import SetsApplied


@click.command(context_settings=LAUNCH_SETTINGS)
@target_options(sets_repeatable=True)
@click.option(
    "--apply",
    "apply_first",
    is_flag=True,
    help="Apply first each set the launch needs (a set's [needed_by]; of those covering the version, or of --set) "
    "that is not applied, or that the launch guard refuses where its apply is the fix.",
)
@click.option("--no-preflight", is_flag=True, help="Run COMMAND without checking it first.")
@launch_argument
def command(
    opts: Options, quiet: bool, verbose: int, apply_first: bool, no_preflight: bool, launch: tuple[str, ...]
) -> ApplyResult | SetsApplied | PreflightResult | None:
    """Preflight a vLLM launch (static checks), then become it (exec: same PID, signals, exit status).

    When the preflight fails, COMMAND does not run; the exit code says why: 1 a check failed,
    2 a bad launch command, 3 no patch set for this vLLM, 4 the model's config.json or vLLM
    cannot be read. For a systemd ExecStart= or a container entrypoint:
    `patchkit run --apply -- vllm serve MODEL ...`.
    """
    launch_command = framed(launch)
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
    try:
        result = run_preflight(ui, opts, launch_command, no_import=True, shortcut=True)
    except PatchkitError as exc:
        raise _not_launched(ui, exc) from None
    if result.ok:
        if ui.verbose:  # each finding (the sets not used too), what could not be judged, before a long load
            show(ui, result, "text")
            ui.note(f"vLLM's own validation did not run: {_full_preflight(ui, opts, launch_command)} runs it")
        else:
            for note in result.notes:
                ui.note(note)
            _name_unjudged_checks(ui, result)
        if result.unjudged_plugins:  # the hint is built only when said
            _name_unjudged(ui, result.unjudged_plugins, _full_preflight(ui, opts, launch_command))
        return None
    show(ui, result, "text")
    ui.error(
        "not launched: the preflight failed: fix what it found, then run again",
        f"{_full_preflight(ui, opts, launch_command)} checks it in full",
    )
    return result


def _not_launched(ui: UI, error: PatchkitError) -> PatchkitError:
    """A preflight that could not finish (a command vLLM's parser refuses): its error and fix said,
    then that nothing ran, as after a failed preflight; the exit code stays the error's."""
    ui.error(error.message, error.hint)
    # a refusal of the tree's own record or journal: the command may be right, the repair is the tree's
    fix = "the tree needs the repair above first" if isinstance(error, TreeRefused) else "fix the launch command"
    stop = PatchkitError(f"not launched: {fix}, then run it again")
    stop.exit_code = error.exit_code
    return stop


def _full_preflight(ui: UI, opts: Options, launch_command: LaunchCommand) -> str:
    """The preflight of this very launch on the tree it imports, as a command to paste (the launch
    spelled whole: a placeholder would be refused as `not a vLLM launch`) where a line of the
    terminal holds it; else its options, the launch said in words: a command on several lines
    pastes as several commands, the first run alone (a launch without its --speculative-config)."""
    chosen = default_options(opts, launch_command)
    full = hints.command("preflight", "--", *launch_command.argv, chosen=chosen)
    width = ui.err.width if ui.err.is_terminal else None
    if width is None or len(full) + len("hint: ") <= width:
        return full
    options = hints.command("preflight", chosen=chosen)
    if len(options) + len("hint: ") <= width:
        return f"{options} with this launch after `--`"
    return f"{hints.command('preflight', chosen=Options())} with this run's options and launch"


def _name_unjudged_checks(ui: UI, result: PreflightResult) -> None:
    """What the preflight could not judge, said on stderr before the exec (with -q too): a wrapped
    `vllm` runs a tree never compared. Not vLLM's own validation: `run` never
    asks vLLM (-v says so, with the preflight that does)."""
    for finding in result.findings:
        if not finding.judged and finding.check != VALIDATION:
            ui.warn(f"{finding.check}: {finding.message}", finding.fix)


def _name_unjudged(ui: UI, plugins: list[str], full_preflight: str) -> None:
    """The general plugins the launch loads, which the static preflight did not judge (one may
    register another model class, or change vLLM): named on one line before the exec, never silent;
    the hint under it is the full preflight of this launch, which asks vLLM."""
    said = "plugins not judged: "
    ui.warn(said + few_named(plugins, WIDTH - len("warning: " + said)), f"{full_preflight} asks vLLM to judge them")


def _apply_when_not_applied(ui: UI, opts: Options, launch_command: LaunchCommand) -> ApplyResult | SetsApplied | None:
    chosen = default_options(opts, launch_command)
    # lazy: `run`'s fast path never applies: apply's command (the engine's operations) loads for --apply
    from patchkit.cli.commands.apply import apply_for_launch

    with hints.selected(chosen):  # the tree the launch imports: its hints name it
        return apply_for_launch(
            ui, chosen, lambda version, sets, root: needs_of(chosen, sets, read(launch_command, version), version, root)
        )


def _exec(argv: list[str], python: str | None) -> NoReturn:
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        missing = exc.errno == errno.ENOENT and os.sep not in argv[0]
        raise TargetError(
            f"cannot run {argv[0]}: " + ("it is not on PATH" if missing else f"{exc.strerror or exc}"),
            hint=_not_on_path_hint(argv[0], python) if missing else _not_runnable_hint(argv[0], exc),
        ) from None


def _not_runnable_hint(name: str, exc: OSError) -> str | None:
    """What to do when the launch's program is found but cannot run (not executable, say)."""
    if exc.errno != errno.EACCES:
        return None
    found = name if os.sep in name else _first_on_path(name)
    return (
        f"{found or name} is not executable by you: make it so (`{shlex.join(['chmod', '+x', found or name])}`) if it "
        f"is vLLM's script, or give the script's path: `-- VENV/bin/{os.path.basename(name)} ...`"
    )


def _first_on_path(name: str) -> str | None:
    """The first file named `name` in PATH's directories, executable or not (execvp tries them in turn)."""
    for directory in os.environ.get("PATH", os.defpath).split(os.pathsep):
        candidate = os.path.join(directory or ".", name)
        if os.path.isfile(candidate):
            return candidate
    return None


def _not_on_path_hint(name: str, python: str | None) -> str:
    """Where the launch's program is: --python's own script when it has one, else the venv's."""
    script = Path(python).absolute().parent / name if python else None
    if script is not None and script.is_file():
        return f"give --python's script by its path, `-- {script} ...`, or activate that venv"
    return f"activate vLLM's venv, or give the script's path: `-- VENV/bin/{name} ...`"
