"""preflight: a launch command held against the installed vLLM, every finding in one run.

Returns a result and prints nothing (the commands render it). Exit codes come from the errors
raised on the way (a command that cannot be read: 2; a missing model or target: 4) and from the
outcome (a failed finding: 1).
"""

from __future__ import annotations

import codecs
import dataclasses
import importlib.machinery
import json
import os
import shlex
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import Version

from patchkit._target import guard as target_guard
from patchkit.base import hints
from patchkit.base.enums import Outcome, TreeState
from patchkit.base.errors import BadInput, PatchkitError, TargetError, few
from patchkit.base.fsutil import read_regular
from patchkit.base.heads import Heads, naming
from patchkit.base.options import Options
from patchkit.base.values import FrozenValue, Value, frozen
from patchkit.checks import shadow
from patchkit.checks.bytecode import failures, scan
from patchkit.engine.guard import (
    EVERY_CPYTHON,
    MODULE,
    STALE_BYTECODE,
    launch_tags,
    launch_verdict,
    prefixed_bytecode,
    refusal_text,
)
from patchkit.engine.inspection import (
    TreeStatus,
    apply_finishes,
    as_its_fix_leaves,
    found_edit_said,
    inspect,
    local_edit_fix,
    local_edit_said,
    record_of,
    set_drift_fix,
    symlinked_bytecode_fix,
    upgrade_said,
    with_found_judged,
)
from patchkit.engine.resolve import Resolved, cached_stock, gap_fix
from patchkit.launch import toolparsers
from patchkit.launch.bounds import bounds_findings
from patchkit.launch.command import ALIASES, LaunchCommand
from patchkit.launch.context_parallel import context_parallel_findings
from patchkit.launch.drafter_load import drafter_load_format
from patchkit.launch.drafter_quant_files import draft_model_unread
from patchkit.launch.eagle_one import eagle1_findings
from patchkit.launch.engine import LaunchContext, Reader, apply_fix, launch_python_version, set_checks, tree_reader
from patchkit.launch.findings import Finding, cannot_judge
from patchkit.launch.hub_env import hub_findings
from patchkit.launch.interpreter import RefusedByPython, exec_search
from patchkit.launch.late_files import headless_note, late_file_findings, lora_ranks, tool_server_findings
from patchkit.launch.logging_env import import_blocker, logging_findings
from patchkit.launch.method import drafts_from_the_prompt, settled_method
from patchkit.launch.middleware import middleware_findings
from patchkit.launch.models import ModelConfig, offline, offline_model_path, redirected, resolve_model, with_overrides
from patchkit.launch.mtp import mtp_findings
from patchkit.launch.parser_plugin import with_plugin_needs
from patchkit.launch.proposer_start import proposer_findings
from patchkit.launch.quant_match import quantization_findings
from patchkit.launch.ray_nodes import ray_note
from patchkit.launch.relevance import EVERY, LaunchNeeds, launch_needs
from patchkit.launch.remote_code import remote_code_findings
from patchkit.launch.serve_parser import ignored_config
from patchkit.launch.shortcut import as_written, kept_findings
from patchkit.launch.speculative import speculative_findings
from patchkit.launch.speculators import drafter_config, speculator
from patchkit.launch.target_heads import target_heads_findings
from patchkit.launch.target_length import length_findings
from patchkit.launch.validation import BUILD, engine_findings
from patchkit.launch.validation import CHECK as VALIDATION
from patchkit.launch.vllm_env import refused_flags
from patchkit.launch.warnings_env import deprecation_findings
from patchkit.launch.weights import as_findings, target_directory, tokenizer_findings, weight_findings
from patchkit.series import dry_run, library
from patchkit.series.library import PatchSetDef
from patchkit.series.patchfile import touched_paths
from patchkit.store.state import State, read_state
from patchkit.tree.modules import hanging_fix, hanging_modules, hanging_said, unjudged_fix, unjudged_said
from patchkit.tree.target import (
    Launch,
    Target,
    ask_python,
    flag_letters,
    from_interpreter,
    launch_prefix,
    names_of,
    prefix_unanswered,
    startup_code,
)

TREE = "tree-state"
MODELS = "models"
LAUNCH_TARGET = "launch-target"
COMMAND = "command"
ARG_UTILS = "vllm/engine/arg_utils.py"
LORA_CONFIG = "vllm/config/lora.py"  # its MaxLoRARanks: the --max-lora-rank values the release allows
TEMPLATE_LIMIT = 16 << 20  # the bytes of a --chat-template judged; a larger one's tail is not
CHAT_TEMPLATES = "vllm/transformers_utils/chat_templates"  # vLLM's built-in --chat-template files


@dataclass(eq=False, repr=False)
class PreflightResult(Value):
    """A preflight's findings on one launch, and what the run said of them."""

    command: LaunchCommand
    findings: list[Finding] = field(default_factory=list)
    tree_state: str | None = None
    launched: LaunchCommand | None = None  # as written: what vLLM's own parser is asked to read
    fixable: bool = False  # the series, applied, would change the tree
    missing: list[TargetError] = field(default_factory=list)  # a model or drafter found nowhere (exit 4)
    shown: bool = False  # its findings were printed: the missing model among them, not said again
    # the general plugins the launch loads, where vLLM was not asked what they do (--no-import, `run`)
    unjudged_plugins: list[str] = field(default_factory=list)
    # the sets this launch does not need whose state is not as apply leaves it: name -> that state, in words
    unused: dict[str, str] = field(default_factory=dict)
    guard_off: str | None = None  # how the launch turns the guard off, when that is why a drift is only noted
    loader_fails: str | None = None  # an entry_points.txt vLLM's plugin loader would hang or fail on: vLLM not asked
    said: list[str] = field(default_factory=list)  # notes on the launch no check makes (an unused --tool-call-parser)

    @property
    def unused_note(self) -> str | None:
        """One line for the sets this launch does not need (None: nothing to say)."""
        if not self.unused:
            return None
        sets = ", ".join(f"{name} ({state})" for name, state in self.unused.items())
        off = f"; the launch guard is off in it ({self.guard_off})" if self.guard_off else ""
        return f"not used by this launch: {sets}{off}"

    @property
    def notes(self) -> list[str]:
        """What preflight and run say as notes: the sets not used, a needed set --set left out that
        the record shows applied."""
        found = [f.message for f in self.findings if f.note]
        return [note for note in [self.unused_note] if note] + found + self.said

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self.findings)

    @property
    def error(self) -> TargetError | None:
        """A model found nowhere: the worst finding, whose exit code (4) is the run's."""
        return self.missing[0] if self.missing else None

    @property
    def outcome(self) -> Outcome:
        return Outcome.OK if self.ok else Outcome.CHECK_FAILED


def default_options(opts: Options, command: LaunchCommand) -> Options:
    """Without --target/--python: the interpreter of the command's `vllm` script or `python`."""
    if opts.target_dir or opts.python:
        return opts
    missing = _not_on_its_path(command) if exec_search(command.program, command.environ.get("PATH")) is None else None
    if missing is not None:  # the launch's own PATH holds no such program: no Python to ask, and no launch
        raise BadInput(missing.message, hint=missing.fix)
    return dataclasses.replace(opts, python=command.interpreter(), python_of_launch=True)


def launch_target_finding(resolved: Resolved, command: LaunchCommand) -> Finding | None:
    """Whether the command's own `vllm` (or `python`), in the launch's environment and working
    directory, imports the tree checked. None when it does, or when the program is not found at all
    (its exec fails by itself)."""
    try:
        python, options = command.launch_python()
    except RefusedByPython as exc:  # the launch fails at once
        return Finding(LAUNCH_TARGET, False, exc.message, exc.hint)
    except TargetError as exc:
        if exec_search(command.program, command.environ.get("PATH")) is None:
            return _not_on_its_path(command)
        opts = hints.current()
        if opts.python and not opts.python_of_launch:  # its hint ("give --python") was followed already
            why = f"the launch's {command.program} is a wrapper patchkit cannot follow ({exc.message})"
            fix = f"check that --python {shlex.quote(str(opts.python))} is the interpreter it runs"
            return cannot_judge(LAUNCH_TARGET, why, fix)
        return cannot_judge(LAUNCH_TARGET, f"{exc.message}: not compared with {resolved.target.found_by}", exc.hint)
    first_path = command.first_path()
    own_setting = (
        _own_import_setting(command)
        or bool(options)
        or _may_hold_vllm(first_path)
        or _relative_import_path(command.environ)
    )
    if _same_venv(python, resolved.target.python) and not own_setting:
        return None  # found by this very interpreter, in patchkit's environment: the launch's
    try:
        found = from_interpreter(
            python, env=command.environ, first_path=first_path, options=options, cwd=command.working_directory()
        )
        runs = found.root
    except TargetError as exc:  # the hint of a --python given is not this one's: the launch's program is
        slow = _slow_start_fix(resolved, command, python, options) if getattr(exc, "timed_out", False) else None
        fix = slow or (
            f"launch with the interpreter of the venv whose vLLM this is (`-- /path/to/venv/bin/{os.path.basename(command.program)} ...`),"
            " or activate that venv"
        )
        return Finding(LAUNCH_TARGET, False, f"the command's {command.program} runs {python}: {exc.message}", fix)
    if _same_directory(runs, resolved.target.root):
        return None
    how = " (in the launch's environment and working directory)" if own_setting else ""
    runs_as = f"{python} {' '.join(options)}" if options else python
    message = (
        f"{resolved.target.found_by} names vLLM in {resolved.target.root}, but the command's {command.program} "
        f"runs {runs_as}, which imports vLLM from {runs}{how}: the launch runs that tree, not the one checked"
    )
    if own_setting:
        fix = (
            f"check the tree the launch imports (--target {shlex.quote(str(runs))}), or launch without the environment or "
            "working directory that puts it first"
        )
    else:
        fix = f"check the tree the command runs (--python {shlex.quote(str(python))}), or launch the checked tree's own vllm"
    return Finding(LAUNCH_TARGET, False, message, fix)


def _slow_start_fix(resolved: Resolved, command: LaunchCommand, python: str, options: list[str]) -> str | None:
    """The fix when the launch's Python did not answer in time: the start-up code the launch's
    environment adds (a sitecustomize on its PYTHONPATH, a user site's .pth), which runs before
    anything is asked; None when it adds none (the interpreter itself is slow, or not Python)."""
    added = startup_code(
        resolved.target.root, python, command.environ, command.working_directory(), flag_letters(options)
    )
    if not added:
        return None
    return (
        f"the launch's environment adds start-up code ({', '.join(added[:3])}) that runs in every process "
        "of its Python before anything else: make it finish promptly, or launch without it"
    )


def _not_on_its_path(command: LaunchCommand) -> Finding | None:
    """The launch's program is on no directory of its PATH. Where the command sets that PATH itself
    (`env -i`, `env -u PATH`, `env PATH=...`), the launch fails wherever it runs; else its PATH is
    the shell's or the unit's that starts it, which patchkit does not see: not judged (None)."""
    if not command.sets_search_path:
        return None
    path = command.environ.get("PATH")
    name = os.path.basename(command.program)
    if path is None:
        where = f"the launch's env has no PATH, so execvp looks in {os.defpath} only, where there is"
    else:
        where = f"the launch's PATH ({path}) holds"
    message = f"{where} no executable {command.program}: env exits 127 and vLLM never starts"
    ours = exec_search(command.program, os.environ.get("PATH"))
    script = os.path.abspath(ours) if ours else f"/path/to/venv/bin/{name}"
    fix = f"name it by its path in the launch (`env ... {script} ...`), or give env PATH=DIR"
    return Finding(LAUNCH_TARGET, False, message, fix)


def runs_python_vllm(target: Target, command: LaunchCommand, another: str) -> bool:
    """Whether the launch runs the vLLM --python imports where that is not --target's (`another`:
    another_vllm() of the tree, told once): the command's program is --python's own (one venv), and
    nothing of the launch's puts another vLLM first."""
    if not another:
        return False
    try:
        python, options = command.launch_python()
    except TargetError:  # not found: its exec fails by itself
        return False
    own_setting = (
        _own_import_setting(command)
        or bool(options)
        or _may_hold_vllm(command.first_path())
        or _relative_import_path(command.environ)
    )
    return _same_venv(python, target.python) and not own_setting


def _own_import_setting(command: LaunchCommand) -> bool:
    """Whether the launch's environment differs from patchkit's where Python's import path is made:
    PYTHON* variables and HOME (the user's site-packages), cleared or unset ones, another directory."""
    changed = [*command.env, *command.unset]
    return command.clean_env or bool(command.cwd) or any(k.startswith("PYTHON") or k == "HOME" for k in changed)


def _relative_import_path(environ: dict[str, str]) -> bool:
    """Whether PYTHONPATH has an entry Python resolves against the launch's working directory (a
    relative or an empty one: `PYTHONPATH=.`, `/x:`): the tree imported then depends on where it runs."""
    given = environ.get("PYTHONPATH")
    return given is not None and any(not os.path.isabs(entry) for entry in given.split(os.pathsep))


def _may_hold_vllm(directory: str | None) -> bool:
    """Whether a directory first on the launch's sys.path holds what Python could import as vllm."""
    modules = tuple(importlib.machinery.all_suffixes())
    try:
        return directory is not None and any(
            (entry.name == "vllm" and entry.is_dir())
            or (entry.name.startswith("vllm.") and entry.name.endswith(modules))
            for entry in os.scandir(directory)
        )
    except OSError:
        return False


def _same_venv(python: str, other: str | None) -> bool:
    """Two paths of one interpreter in one directory (a venv's python and python3): the same
    site-packages. Not os.path.samefile alone: every venv's python links to the same base."""
    if other is None:
        return False
    try:
        return _same_directory(Path(python).parent, Path(other).parent) and os.path.samefile(python, other)
    except OSError:
        return False


def _same_directory(one: Path, other: Path) -> bool:
    try:
        return os.path.samefile(one, other)
    except OSError:
        return False


def preflight(
    resolved: Resolved,
    command: LaunchCommand,
    *,
    no_import: bool = False,
    status: TreeStatus | None = None,
    kept: bool = False,
    needs: LaunchNeeds = EVERY,
    not_asked: str = "--no-import",
    another: str,
) -> PreflightResult:
    """Every finding but vLLM's own validation (vllm_validation). `status`: the tree's, when already known (`run`'s fast path: from its record);
    `kept`: the launch's findings from the cache where they answer for it (patchkit/launch/shortcut.py);
    `needs`: which sets the launch needs (one it does not: its state a note, its launch checks not run);
    `not_asked`: why vLLM is not asked when `no_import` (the option, or `run`, which never asks);
    `another`: another_vllm() of the tree, told once per command."""

    if status is None:
        status = inspect(resolved, check_upstream=False, import_probe=False)
    status = with_found_judged(resolved, status)  # a lost record over an edit: apply refuses to record it
    status = for_launch_prefix(resolved.target.root, status, command)
    # launched: the command as written, what vLLM's own parser is asked to read
    result = PreflightResult(command, tree_state=str(status.state), launched=command)
    needed = needs.needs(resolved.set_name)
    result.findings += tree_findings(resolved, status, needs, result)
    result.findings = _with_prefix_judged(resolved, status, command, result.findings, needed or needs.guard_runs)
    result.findings += _parser_findings(resolved, command)
    try:
        target, drafter, served, command = _models(command, result.missing)
    except TargetError as exc:  # the model found nowhere: nothing else to hold against it
        result.missing.insert(0, exc)  # after the drafter _models still looked for: every model missing is named
        result.findings += [_model_finding(missing) for missing in result.missing]
        return result
    result.command = command
    result.findings += _found_models_findings(result.missing, served, (target, drafter), command, resolved.target.root)
    result.findings += _after_load_findings(command, resolved, (target, drafter), result)  # never kept: not tree files
    planned = _Planned.of(resolved, status) if needed else _Planned()
    result.fixable = planned.fixable
    context = LaunchContext(
        command,
        target,
        drafter,
        resolved.target.root,
        resolved.vllm_version,
        resolved.selection.patch_set if needed else None,  # a set the launch does not need: no launch checks
        read_planned=planned.read,
        planned_fix=planned.fix,
        pending_fix=planned.pending_fix,
        python=None if no_import or another else resolved.target.python,
        not_asked=not_asked if no_import else another or "no interpreter known for this target (give --python)",
    )
    _judge_plugin_files(context, result)  # before vLLM is asked anything: its loader reads them first
    if kept and context.read_planned is None:
        result.findings += kept_findings(context, launch_findings)
        return result
    commands = command_findings(context)  # launch_findings' order: the command's, then the set's
    own = set_checks(context)
    result.findings = _as_stock_accepts(resolved, status, result.findings, own) + commands + own
    return result


def _judge_plugin_files(context: LaunchContext, result: PreflightResult) -> None:
    """An entry_points.txt vLLM's plugin loader cannot read fails the launch, and vLLM is then not
    asked (its loader would read it in patchkit's worker too); else the general plugins the launch
    loads, where vLLM is not asked what they do; and, vLLM not asked, the --middleware modules the
    launch's Python cannot find."""
    unread = _plugin_file_finding(context)
    if unread is not None:
        result.findings.append(unread)
        result.loader_fails = context.not_asked = unread.message
        context.python = None
    result.unjudged_plugins = context.general_plugins() if context.python is None and unread is None else []
    asked = context.python is not None and not result.missing  # vLLM's validation imports them
    if not asked and not context.command.headless:  # a headless node builds no app
        result.findings += middleware_findings(context.command, COMMAND)


def _plugin_file_finding(context: LaunchContext) -> Finding | None:
    """An entry_points.txt on the launch's sys.path that vLLM's plugin loader, which reads every
    distribution's at start, would read without end, block on or raise on: the launch fails before
    the model loads (or never starts), and patchkit must not ask vLLM either."""
    unread = context.plugin_files().unreadable
    if not unread:
        return None
    path, what = unread[0]
    more = f" (and {len(unread) - 1} more such file{'s' * (len(unread) > 2)})" if len(unread) > 1 else ""
    fix = f"remove it ({hints.remove_files([path])}) or reinstall the distribution it belongs to"
    return Finding(LAUNCH_TARGET, False, f"{path} is {what}{more}", fix)


def for_launch_prefix(root: Path, status: TreeStatus, command: LaunchCommand) -> TreeStatus:
    """`status` with the guard's bytecode refusals as the launch meets them: status judged bytecode
    where patchkit's own environment reads it, and the launch reads it under its own pycache prefix
    alone, or in __pycache__ alone without one. The guard judges every recorded file (each set's, a
    patched wheel's), so its own judging, with the launch's prefix, says which."""
    launch, own, mode = command_prefix(root, command) or "", launch_prefix(root), command.hash_pycs_mode()
    if launch == (os.path.abspath(own) if own else "") and mode != "always":
        return status
    judged = launch_verdict(root, status.record, prefix=launch, mode=mode).problems
    kept = [problem for problem in status.guard if STALE_BYTECODE not in problem]
    guard = kept + [problem for problem in judged if STALE_BYTECODE in problem]
    return status if guard == status.guard else dataclasses.replace(status, guard=guard)


def _as_stock_accepts(
    resolved: Resolved, status: TreeStatus, findings: list[Finding], own: list[Finding]
) -> list[Finding]:
    """`findings` with the set's "not applied" a pass where the launch needs nothing it changes:
    on the stock files, the set's every launch check passes, judged (vLLM's own whitelist takes a
    llama target for EAGLE-3, say). A check that could not judge leaves the failure standing."""
    if status.state != TreeState.NOT_APPLIED or not own or not all(f.ok and f.judged for f in own):
        return findings
    said = (
        f"the {resolved.set_name} series is not applied to vLLM {resolved.vllm_version}, and this launch "
        "needs nothing it changes: the set's launch checks pass on the stock files"
    )
    not_applied = f"the {resolved.set_name} series is not applied to vLLM {resolved.vllm_version}"
    return [Finding(TREE, True, said) if f.check == TREE and f.message == not_applied else f for f in findings]


def command_prefix(root: Path, command: LaunchCommand) -> str:
    """The pycache prefix the launch of `root` reads bytecode under ("": __pycache__): the one its
    interpreter's start-up sets, asked in the launch's environment (`env VAR=...`, `env -i`, `-C DIR`)
    and with its options (a .pth line may read any variable it gives), else the command's (-X
    pycache_prefix, PYTHONPYCACHEPREFIX)."""
    return launch_prefix(root, _launch_of(command))


def _launch_of(command: LaunchCommand) -> Launch:
    """The launch as far as the pycache prefix it reads bytecode under goes (tree/target.py's Launch)."""
    given = command.pycache_prefix()
    try:
        python, options = command.launch_python()
    except TargetError:  # not found: its exec fails by itself, and no start-up of it is asked
        return Launch(None, {}, [], "", None, False, given)
    changed = command.clean_env or bool(command.env or command.unset or command.cwd)
    cwd, first = command.working_directory(), command.first_path()
    return Launch(python, command.environ, options, cwd, first, changed, given)


def _with_prefix_judged(
    resolved: Resolved, status: TreeStatus, command: LaunchCommand, findings: list[Finding], judged: bool
) -> list[Finding]:
    """The tree findings with the bytecode under the launch's pycache prefix judged, where the launch needs
    the set or the guard runs (`judged`): stale bytecode there in place of the passing ones, or a prefix
    its Python did not say in time as "cannot judge"."""
    if not judged:
        return findings
    stale = prefix_findings(resolved, status, command) if all(f.ok for f in findings) else []
    unasked = None if stale else prefix_unasked(resolved, command)
    return stale or findings + ([unasked] if unasked is not None else [])


def prefix_unasked(resolved: Resolved, command: LaunchCommand) -> Finding | None:
    """Cannot judge the bytecode under a pycache prefix the launch's start-up may set, when its Python,
    asked which, did not answer in time (the prefix was then taken from the static scan of its site)."""
    launch = _launch_of(command)
    why = prefix_unanswered(resolved.target.root, launch)
    if why is None or launch.python is None:
        return None
    said = (
        f"the launch's Python, asked which pycache prefix its start-up code sets, gave no answer ({why}): stale "
        "bytecode under a prefix that code sets is not judged (the launch runs the same start-up)"
    )
    fix = _slow_start_fix(resolved, command, launch.python, launch.options)
    gives = (
        fix or "make the start-up code of the launch's Python (its site's .pth files, sitecustomize) finish promptly"
    )
    return cannot_judge(TREE, said, gives)


def prefix_findings(resolved: Resolved, status: TreeStatus, command: LaunchCommand) -> list[Finding]:
    """Stale unchecked-hash bytecode of the set's files under the launch's pycache prefix
    (PYTHONPYCACHEPREFIX, -X pycache_prefix): Python reads it there instead of __pycache__ and runs
    it without reading the patched source, the guard refuses it, and apply does not look there.
    Under --check-hash-based-pycs never, stale checked-hash bytecode too, wherever the launch reads
    it: status judges the default mode, where Python re-validates it."""
    paths, root = sorted(_series_paths(resolved, status)), resolved.target.root
    paths += [MODULE] if (root / MODULE).is_file() else []  # the guard's own runs in its place too
    prefix, mode = command_prefix(root, command), command.hash_pycs_mode()
    if not prefix and mode != "never":
        return []
    found: dict[str, str] = {}  # at the tree's real path and each it was named by (a symlinked site: Python keys it so)
    for site in (str(root), *names_of(root)):
        try:
            places = target_guard.stale_places(site, paths, EVERY_CPYTHON, prefix or "", mode)
        except target_guard.TreeChanged as exc:  # a planted symlink: never followed, refused as the guard does
            fix = symlinked_bytecode_fix(root, str(exc)) or f"run {hints.command('status')}: it names the fix"
            return [Finding(TREE, False, str(exc), fix)]
        for _rel, said, pyc in places:
            if prefixed_bytecode([said]) or target_guard.STALE_CHECKED in said:
                found.setdefault(said[1:] if said.startswith("/__pycache__/") else said, pyc)
    fix = f"run {hints.remove_files(list(dict.fromkeys(found.values())))} (Python compiles the source again)"
    return [Finding(TREE, False, "; ".join(found), fix)] if found else []


def _parser_findings(resolved: Resolved, command: LaunchCommand) -> list[Finding]:
    """The tool and reasoning parsers the command names, judged whether or not the models are found:
    vLLM refuses the parsers before it reads them."""
    root = resolved.target.root
    same_python = launch_python_version(command, root) == f"{sys.version_info[0]}.{sys.version_info[1]}"
    # a headless node runs no validate_api_server_args and builds no tool parser; the engine's reasoning parser stays
    options = {k: v for k, v in command.options.items() if k != toolparsers.TOOL.needs or not command.headless}
    return toolparsers.findings(
        COMMAND, options, resolved.vllm_version, tree_reader(root), root, same_python=same_python
    )


def _found_models_findings(
    missing: list[TargetError],
    served: Finding | None,
    models: tuple[ModelConfig, ModelConfig | None],
    command: LaunchCommand,
    root: Path,
) -> list[Finding]:
    """With the target found: a drafter found nowhere, the speculator note, architectures vLLM refuses,
    a config vLLM reads only with --trust-remote-code,
    a model directory where vLLM's loader would find no weights (the drafter's as the tree at `root` loads it),
    a tokenizer path that holds none."""
    found = [_model_finding(exc) for exc in missing]
    found += [served] if served is not None else []
    found += [f for f in (_architectures_finding(m) for m in models) if f is not None]
    read = tree_reader(root)
    method = settled_method(command, models[1], read)
    return (
        found
        + target_heads_findings(command, models[0])
        + remote_code_findings(command, models, read)
        + weight_findings(command, models[0], MODELS, drafter_load_format(command, read, method))
        + as_findings(MODELS, tokenizer_findings(command))
    )


@dataclass(eq=False, repr=False)
class _Planned(Value):
    """What the series would leave of the tree for the launch checks to read, and the fix that
    leaves it so (see LaunchContext); empty where the launch does not need the set."""

    read: Reader | None = None
    fixable: bool = False
    fix: str | None = None
    pending_fix: str | None = None

    @classmethod
    def of(cls, resolved: Resolved, status: TreeStatus) -> _Planned:
        """Judged where the series applies whole (a partial tree with no conflict too: a file put back
        to stock by hand; apply finishes it), or a conflict as its fix (the stock files, apply) leaves it."""
        leaves = as_its_fix_leaves(resolved, status)
        if leaves is not None:
            read, drifted = leaves
            return cls(read, fixable=not drifted, fix=set_drift_fix(resolved, status) if drifted else None)
        if status.state != TreeState.CONFLICT:
            return cls()
        as_fixed = _as_its_conflict_fix_leaves(resolved, status.edited_in_hunks)
        root, edited = resolved.target.root, status.edited_in_hunks
        fix = local_edit_fix(root, resolved.vllm_version, edited, resolved.set_name, status.in_the_way)
        if as_fixed is None:  # the stock files not cached: not judged
            return cls(pending_fix=fix)
        return cls(as_fixed, fix=fix)


def needs_of(
    opts: Options, sets: dict[str, PatchSetDef] | None, command: LaunchCommand, version: Version | None, root: Path
) -> LaunchNeeds:
    """Which of the library's sets (`sets`, else loaded; every set, whatever --set narrows the checks
    to: the guard refuses for any recorded one) the launch as vLLM serves it needs, its method read
    from the tree at `root`. `version`: the tree's, when known: a set whose rule names the launch
    counts as named only where it has a series, or is in its range without one (a launch that needs
    it cannot be made safe)."""
    if sets is None and not opts.adhoc:
        sets = library.load_library(library.locate(opts.library).path)
    served, architectures, drafter = as_served(command)
    read = tree_reader(root)
    method = settled_method(served, drafter, read)
    refused = toolparsers.tool_parser_refused(served.options, read)  # the command finding says so
    needs = launch_needs((sets or {}).values(), served, method, architectures, version, parser_refused=refused)
    needs = with_plugin_needs(needs, sets or {}, served, version, read)
    if version is None or sets is None:
        return needs
    named = {name: said for name, said in needs.named.items() if library.to_judge(sets[name], version)}
    return dataclasses.replace(needs, named=named)


def left_out(
    needs: LaunchNeeds, root: Path, version: Version | None, *, one_set: bool = False, recorded: State | None = None
) -> Finding | None:
    """The tree-state finding for the sets whose rule names this launch that --set leaves out, judged
    from the tree's record (never dropped in silence): a pass when each is recorded applied to this
    vLLM with every file as written (said in the finding, which preflight and run show as a note);
    else a failure naming them. None when --set leaves none out. `one_set`: the command takes one
    --set (preflight): the fix runs it once per set, not with another --set added. `recorded`: the
    record as recorded_state read it (run's fast path), else None: read here."""
    left = [name for name in needs.named if name not in needs.judged]
    if not left:
        return None
    whole = recorded_whole(root, version, recorded)
    if all(name in whole for name in left):
        sets = ", ".join(f"{name} ({needs.named[name]})" for name in left)
        message = f"this launch needs {sets}, left out by --set: its record says applied, no drift"
        return Finding(TREE, True, message, note=True)
    left = [name for name in left if name not in whole]
    sets = "; ".join(f"{name} ({needs.named[name]})" for name in left)
    adds = " ".join(f"--set {name}" for name in left)
    message = f"this launch needs {sets}, which --set leaves out: not judged"
    add = f"run it again with `{adds}` instead" if one_set else f"add `{adds}`"
    return Finding(TREE, False, message, f"{add}, or give no --set (every set the launch needs is judged)")


def recorded_whole(root: Path, version: Version | None, recorded: State | None = None) -> set[str]:
    """The sets the tree's record holds applied to `version`, when every file it records is as the
    last set to write it left it (none: the record cannot say, or a file differs). `recorded`: the
    record recorded_state already read and found as written, else None: read and held here."""
    if version is None:
        return set()
    if recorded is None:
        try:
            recorded = read_state(root)
        except PatchkitError:  # damaged: the tree's own finding says so
            return set()
        if not as_written(root, recorded):
            return set()
    return {entry.set_name for entry in recorded.entries if entry.vllm_version == str(version)}


def as_served(command: LaunchCommand) -> tuple[LaunchCommand, list[str], ModelConfig | None]:
    """The command as vLLM serves it (a speculators-format model's own speculative config in place),
    its target model's architectures and its drafter's config; as written, none and None, when a
    model cannot be read (the preflight names that first)."""
    try:
        target, drafter, _, served = _models(command)
    except (TargetError, BadInput):
        return command, [], None
    return served, target.architectures, drafter


def launch_findings(context: LaunchContext) -> list[Finding]:
    """The command's findings against the installed files, then the set's launch script's."""
    return command_findings(context) + set_checks(context)


def whose_vllm_fix(target: object) -> str:
    """The fix when --python imports another vLLM than --target's: the launch runs that one, so apply
    there; or judge the tree by its files alone."""
    there = hints.command("apply", chosen=dataclasses.replace(hints.current(), target_dir=None))
    return f"the launch runs --python's vLLM: apply to it ({there}), or leave out --python to judge {target} alone"


def one_apply(findings: list[Finding], names: list[str]) -> list[Finding]:
    """`findings` with one fix where several apply a set each (of `names`, the sets judged) or every
    set: `apply --set A --set B`, the sets the launch needs and lacks, and no set it does not use."""
    if len({f.fix for f in findings if f.fix and not f.ok}) < 2:
        return findings  # no hint built for a launch with nothing to fix (`run`'s passing path builds none)
    per_set = {apply_fix(_NeededSet(name)): name for name in names}
    restoring = _restoring_apply(
        findings, {name for fix, name in per_set.items() if any(f.fix == fix for f in findings)}
    )
    if restoring is not None:  # a set's own apply would drop the other sets' records: one apply of them all
        return [dataclasses.replace(f, fix=restoring) if f.fix in per_set else f for f in findings]
    every = apply_fix()
    if every not in per_set and any(f.check == TREE and f.fix == every for f in findings):
        # apply of every set is needed anyway (a set every launch needs lacks, or the guard's files are
        # stock again): it does what each --set fix does, so it is the one line
        return [dataclasses.replace(f, fix=every) if f.fix in per_set else f for f in findings]
    sets = [name for fix, name in per_set.items() if any(f.fix == fix for f in findings)]
    applying = [f for f in findings if f.fix in per_set or f.fix == every]
    if not sets or len({f.fix for f in applying}) < 2:
        return findings
    words = [word for name in sets for word in ("--set", name)]
    one = f"run {hints.command('apply', *words, chosen=hints.for_set(None))}"
    return [dataclasses.replace(f, fix=one) if f in applying else f for f in findings]


def _restoring_apply(findings: list[Finding], sets: set[str]) -> str | None:
    """The guard's fix after a vLLM upgrade (an apply of every recorded set), when it applies each
    of `sets` too: the one fix that restores what was applied."""
    for finding in findings:
        if finding.ok or finding.check != TREE or finding.restores is None:
            continue
        if not finding.restores or sets <= set(finding.restores):
            return finding.fix
    return None


@frozen
class _NeededSet(FrozenValue):
    """A set as apply_fix names it when a launch needs it: with --set."""

    name: str
    needed_by: tuple[str, ...] = ()


def another_vllm(target: Target) -> str:
    """Why vLLM is not asked about the tree: --python imports a vLLM of its own that is not --target's,
    so what it answers (its validation, supports_eagle3()) is about those files ("": it is the tree's)."""
    if not target.python_imports_another:
        return ""
    return f"--python {target.python} imports vLLM from {target.python_vllm}, not from the --target tree {target.package_dir}"


def vllm_validation(resolved: Resolved, result: PreflightResult, another: str) -> list[Finding]:
    """vLLM's own create_engine_config() on the launch as written (a worker importing vLLM: the
    caller runs it without the tree's lock, which a concurrent `run` or `apply` waits for). `another`:
    another_vllm() of the tree. Then, when vLLM accepts it and it names a drafter model, vLLM's
    own build of that drafter (drafter-build)."""

    if resolved.target.python is None:  # a --target tree: no model found later would let it run
        gives = "give --python PATH, the interpreter of the venv whose vLLM you launch (vLLM is asked there about its own files)"
        also = ", once the models above are found" if result.missing else ""
        return [cannot_judge(VALIDATION, "not run: no interpreter known for this target", gives + also)]
    if another:  # its answer would be about another vLLM's files
        return [cannot_judge(VALIDATION, f"not run: {another}", whose_vllm_fix(resolved.target.package_dir))]
    if result.loader_fails:  # asked, vLLM would read that file too: the finding above names it
        return [cannot_judge(VALIDATION, f"not run: {result.loader_fails}", "fix the launch-target finding above")]
    scan = hanging_modules(resolved.target.root, launch_tags(resolved.target.root))
    if scan:  # vLLM's import would (or may) wait on it: the tree-state finding names it and its fix
        hangs = f"would hang on {scan.paths[0]}" if scan.paths else f"may hang on {scan.unjudged[0]} (not looked at)"
        return [cannot_judge(VALIDATION, f"not run: importing vLLM {hangs}", "fix the tree-state finding above")]
    if result.missing:  # vLLM would look for the model on the hub: patchkit never downloads
        return [
            cannot_judge(
                VALIDATION,
                "not run: a model, drafter or tokenizer above is not on this machine",
                "put it where the models finding looked, then run preflight again",
            )
        ]
    launched = result.launched or result.command
    blocker = import_blocker(launched.environ, launched.working_directory())
    if blocker:  # an import of vLLM with it would block or fill memory: the vllm-environment finding names it
        return [cannot_judge(VALIDATION, f"not run: {blocker}", "fix the vllm-environment finding above")]
    return engine_findings(resolved.target.python, launched, fix=apply_fix() if result.fixable else None)


def _model_finding(missing: TargetError) -> Finding:
    """A model not found, or in a form patchkit cannot read (GGUF, params.json): a failed finding
    (exit 4) whose text says it is counted as failed, not only that it could not be judged."""
    reason = missing.message.removeprefix("cannot judge: ")
    said = reason if reason == missing.message else f"failed, as patchkit cannot judge it: {reason}"
    return Finding(MODELS, False, said, missing.hint)


# The order a person gets a launch going in: the command as written, the models it names, the tree
# it imports, that tree's patches (and the checks they settle), then vLLM's own validation.
_FIX_ORDER = {COMMAND: 0, MODELS: 1, LAUNCH_TARGET: 2, TREE: 3, VALIDATION: 5, BUILD: 6}


def in_fix_order(findings: list[Finding]) -> list[Finding]:
    """Failures first, then what could not judge (with what gives it), then the passes; each in
    the order the user acts on them (_FIX_ORDER; the set's checks after the tree's state)."""
    return sorted(findings, key=lambda f: (0 if not f.ok else 1 if not f.judged else 2, _FIX_ORDER.get(f.check, 4)))


def _models(
    command: LaunchCommand, missing: list[TargetError] | None = None
) -> tuple[ModelConfig, ModelConfig | None, Finding | None, LaunchCommand]:
    """(target, drafter, a note when the model is a speculator, the command as vLLM serves it): the
    configs vLLM reads, a speculators-format model served as its verifier's drafter. A drafter found
    nowhere is added to `missing` (the target's checks still run; without it, raised as the target
    found nowhere is)."""
    revision = command.optional_text("revision")
    config_format = _text(command.options.get("config-format")) or "auto"
    environ = command.environ
    _refuse_modelscope(environ)
    config_path = command.optional_text("hf-config-path")
    # vLLM's order: offline, EngineArgs takes MODEL (and the tokenizer) as a path or a cached snapshot
    # first; the speculators check reads that model's own config.json; then each ModelConfig
    # redirects its model and --hf-config-path (VLLM_MODEL_REDIRECT_PATH)
    try:
        model = _engine_model(command, revision, missing)
        own = resolve_model(model, environ, role="model", revision=revision, config_format=config_format)
    except TargetError:
        if missing is not None:  # a drafter found nowhere too is said in the same run
            _spec_drafter(command, missing, config_format)
        raise
    served = speculator(own)
    served_name = served.verifier if served is not None else model
    name = redirected(served_name, environ, command.cwd)
    if config_path or name != own.name:
        source = redirected(config_path, environ, command.cwd) if config_path else None
        role = "verifier" if served is not None else "model"
        target = resolve_model(
            name, environ, role=role, revision=revision, config_path=source, config_format=config_format
        )
    else:
        target = own
    if served is not None:
        options = {**command.options, "speculative-config": served.speculative_config, "tokenizer": served.verifier}
        command = dataclasses.replace(command, model=served.verifier, options=options)
        own_drafter: ModelConfig | None = served.drafter
        if redirected(own.name, environ, command.cwd) != own.name:  # the drafter's ModelConfig redirects it too
            found = _found(missing, own.name, command, None, config_format)
            own_drafter = drafter_config(found) if found is not None else None
        note = (
            f"{own.name} is a speculators-format model: vLLM serves its verifier {served.verifier} with it as "
            f"the {served.speculative_config['method']} drafter (the command's --speculative-config is dropped)"
        )
        return with_overrides(target, command.hf_overrides), own_drafter, Finding(COMMAND, True, note), command
    drafter = _spec_drafter(command, missing, config_format)
    drafter = drafter_config(drafter) if drafter is not None else None
    return with_overrides(target, command.hf_overrides), drafter, None, command


def _architectures_finding(model: ModelConfig | None) -> Finding | None:
    """A failed `models` finding when config.json's architectures list holds other than names: vLLM's
    ModelConfig refuses it (pydantic: a string is expected) in create_engine_config, before any load."""
    archs = None if model is None else model.config.get("architectures")
    if model is None or not isinstance(archs, list) or all(isinstance(a, str) for a in archs):
        return None
    odd = next(a for a in archs if not isinstance(a, str))
    message = f"{model.path}: its architectures hold {json.dumps(odd)[:40]}, not a name: vLLM refuses the model"
    return Finding(MODELS, False, message, "give config.json's architectures as class names (strings) only")


def _after_load_findings(
    command: LaunchCommand,
    resolved: Resolved,
    models: tuple[ModelConfig, ModelConfig | None],
    result: PreflightResult,
) -> list[Finding]:
    """Failed `command` findings for the files and servers vLLM opens only once the model has
    loaded (or its front end as it starts), and the mtp drafter it builds then (patchkit/launch/mtp.py);
    what is not judged of them said in `result.said`."""
    target = models[0]
    root, architectures = resolved.target.root, target.architectures
    adapters = command.options.get("lora-modules") or command.options.get("default-mm-loras")
    ranks = lora_ranks(tree_reader(root)(LORA_CONFIG)) if adapters else None
    late = late_file_findings(command, COMMAND, lambda: launch_text_encoding(command), ranks, architectures)
    directory = _model_directory(command, target)
    servers, noted = tool_server_findings(command, COMMAND, resolved.vllm_version, architectures, directory)
    headless, ray = headless_note(command, architectures), ray_note(command, root)
    result.said += [note for note in (headless, ray) if note] + noted
    read = tree_reader(root)
    drafted = mtp_findings(command, *models, read, settled_method(command, models[1], read))
    return _chat_template_findings(command, root) + late + servers + drafted


def _model_directory(command: LaunchCommand, target: ModelConfig) -> str | None:
    """Where vLLM's ModelConfig reads the model's own files (modules.json): its local directory or
    offline snapshot, else (a hub id online) the cached snapshot config.json was read from."""
    found = target_directory(command)
    if found is not None:
        return os.path.join(command.working_directory(), found[1])
    return None if command.optional_text("hf-config-path") else str(target.path.parent)


def _chat_template_findings(command: LaunchCommand, root: Path) -> list[Finding]:
    """A failed `command` finding (in a list; else none) when vLLM cannot load --chat-template
    (load_chat_template: a file it opens and reads, whatever its name holds; else text with `{`, `}` or
    a line break taken as the template, else its built-in template of that name, opened and read the same way): it refuses
    the launch once the model loaded. A file larger than patchkit reads: cannot judge its tail."""
    value = command.optional_text("chat-template")
    if value is None or command.headless:
        return _template_at_start(command, value, root) if value is not None else []
    if "\0" in value:  # only a --config YAML escape gives one: open() raises ValueError, no OSError
        message = f"--chat-template {value!r} holds a NUL character: vLLM's open() of it fails once the model loaded"
        return [Finding(COMMAND, False, message, "give a template file's path, or the template itself")]
    path = os.path.join(command.working_directory(), value)
    given = _template_text(path)
    if isinstance(given, str) and not _never_ends(path) and any(c in value for c in "{}\n"):
        return []  # open() fails: vLLM takes the value as the template itself
    if isinstance(given, bytes):
        return _undecodable_template(value, given, command, path)
    if _never_ends(path):  # vLLM's open() or read() waits, with no OSError: no built-in template stands in
        message = (
            f"--chat-template {value}: {given}: vLLM would wait on it or read it without end once the model loaded"
        )
        return [Finding(COMMAND, False, message, "give a template file's path, as the launch's directory sees it")]
    builtin = str(root / CHAT_TEMPLATES / value)  # an absolute value: that path again
    fallback = _template_text(builtin)
    if isinstance(fallback, bytes):
        return _undecodable_template(value, fallback, command, builtin)
    if not os.path.isdir(root / CHAT_TEMPLATES):  # a fetched tree: vLLM's Python files, not its templates
        reason = f"--chat-template {value}: {given}; this tree holds no {CHAT_TEMPLATES}/ to tell whether vLLM ships it"
        return [cannot_judge(COMMAND, reason, "judge the launch on the installed vLLM: --python PATH")]
    when = "the command as it starts" if not os.path.exists(path) else "the launch once the model has loaded"
    message = (
        f"--chat-template {value}: {given}, nor a template vLLM ships (under {CHAT_TEMPLATES}): vLLM refuses {when}"
    )
    return [Finding(COMMAND, False, message, "give a readable template file's path, as the launch's directory sees it")]


def _template_at_start(command: LaunchCommand, value: str, root: Path) -> list[Finding]:
    """What vLLM's validate_chat_template refuses as it starts, on every node (a headless one loads
    no template): a value with no `{`, `}` or line break that names no path, nor a built-in template."""
    if any(c in value for c in "{}\n") or os.path.exists(os.path.join(command.working_directory(), value)):
        return []
    if not os.path.isdir(root / CHAT_TEMPLATES):  # a fetched tree: vLLM's Python files, not its templates
        reason = (
            f"--chat-template {value}: no such file; this tree holds no {CHAT_TEMPLATES}/ to tell whether vLLM ships it"
        )
        return [cannot_judge(COMMAND, reason, "judge the launch on the installed vLLM: --python PATH")]
    if os.path.exists(root / CHAT_TEMPLATES / value):
        return []
    message = (
        f"--chat-template {value}: no such file, nor a template vLLM ships (under {CHAT_TEMPLATES}): vLLM "
        "refuses the command as it starts (validate_chat_template, on a headless node too)"
    )
    return [Finding(COMMAND, False, message, "give a template file's path, as the launch's directory sees it")]


def _template_text(path: str) -> bytes | str:
    """The bytes of a template file, read as vLLM's open().read() reads it (bounded: a file larger
    than TEMPLATE_LIMIT gives TEMPLATE_LIMIT + 1 bytes); else why it cannot be read (a fifo too:
    vLLM's open() would wait on it; a read that fails, as /proc/self/mem's does)."""
    try:
        return read_regular(path, TEMPLATE_LIMIT + 1, follow_symlinks=True, head=True)
    except OSError as exc:
        if _never_ends(path) and os.stat(path).st_rdev == os.stat(os.devnull).st_rdev:
            return b""  # /dev/null reads as an empty file
        return "no such file" if isinstance(exc, FileNotFoundError) else exc.strerror or str(exc)


def _never_ends(path: str) -> bool:
    """Whether `path` is a fifo or a device: open() waits on the one, read() may never end on the other."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISBLK(mode)


def _undecodable_template(value: str, data: bytes, command: LaunchCommand, path: str) -> list[Finding]:
    """A failed `command` finding when the template's bytes are not text in the encoding vLLM's
    open() reads them in: its UnicodeDecodeError is no OSError, so no built-in template stands in.
    A template larger than patchkit reads whose head decodes: cannot judge (never a pass)."""
    larger = len(data) > TEMPLATE_LIMIT
    if data.isascii() and not larger:  # every codeset a locale names reads ASCII alike: no interpreter to ask
        return []
    encoding = launch_text_encoding(command)
    try:  # incremental: a file cut at the limit may end inside a character
        codecs.getincrementaldecoder(encoding)().decode(data[:TEMPLATE_LIMIT], final=not larger)
    except UnicodeDecodeError as exc:
        message = (
            f"--chat-template {value}: not {exc.encoding} text (byte 0x{data[exc.start]:02x} at offset {exc.start}): "
            "vLLM refuses the launch once the model has loaded"
        )
        return [
            Finding(COMMAND, False, message, f"save the template as {encoding} text (e.g. with iconv -t {encoding})")
        ]
    if not larger:
        return []
    why = (
        f"--chat-template {value} is larger than the {TEMPLATE_LIMIT >> 20} MiB patchkit reads: its first "
        f"{TEMPLATE_LIMIT >> 20} MiB are {encoding} text, the rest is not judged (vLLM reads it whole, after the model loads)"
    )
    check = f"iconv -f {encoding} -t {encoding} {shlex.quote(path)} > /dev/null"
    return [cannot_judge(COMMAND, why, f"check it decodes whole (`{check}` prints no error), or keep it smaller")]


# what open() without an encoding reads text in, as the interpreter decided it at its start
_OPEN_ENCODING = "import os, sys; sys.stdout.write(open(os.devnull).encoding)"


def launch_text_encoding(command: LaunchCommand) -> str:
    """The encoding open() without one reads text in when the launch runs: its own Python asked, with
    the launch's options, environment and directory (a locale that is not installed, UTF-8 mode, -E and
    -X utf8 decide it as only that Python knows); the locale's name read when it cannot be asked."""
    try:
        python, options = command.launch_python()
        options = [*options, *(f"-X{x}" for x in command.xoptions)]
        said = ask_python(python, options, _OPEN_ENCODING, env=command.environ, cwd=command.working_directory())
        return codecs.lookup(said.strip()).name
    except (TargetError, LookupError):
        return locale_text_encoding(command.environ)


def locale_text_encoding(environ: dict[str, str]) -> str:
    """The encoding open() reads text in under `environ`, told from the variables alone: UTF-8 in
    Python's UTF-8 mode (PYTHONUTF8=1, or a C/POSIX locale, which Python coerces), else the codeset
    the locale names (UTF-8 when it names none this Python knows)."""
    if environ.get("PYTHONUTF8") == "1":
        return "utf-8"
    name = environ.get("LC_ALL") or environ.get("LC_CTYPE") or environ.get("LANG") or "C"
    if name in ("C", "POSIX") or "." not in name:
        return "utf-8"
    codeset = name.split(".", 1)[1].split("@", 1)[0]
    try:
        return codecs.lookup(codeset).name
    except LookupError:
        return "utf-8"


def _spec_drafter(command: LaunchCommand, missing: list[TargetError] | None, config_format: str) -> ModelConfig | None:
    """The config of --speculative-config's drafter model, None when it names none or (added to
    `missing`) it is found nowhere."""
    spec = command.speculative_config or {}
    drafter_name = spec.get("model")
    if not isinstance(drafter_name, str) or not drafter_name:  # another value: the speculative-config finding
        return None
    if drafts_from_the_prompt(command):  # no drafter is loaded
        return None
    return _found(missing, drafter_name, command, _text(spec.get("revision")), config_format)


def _found(
    missing: list[TargetError] | None, name: str, command: LaunchCommand, revision: str | None, config_format: str
) -> ModelConfig | None:
    """The drafter's config, or None with the TargetError (found nowhere) added to `missing`."""
    try:
        return _drafter(name, command, revision, config_format)
    except TargetError as exc:
        if missing is None:
            raise
        missing.append(exc)
        return None


def _engine_model(command: LaunchCommand, revision: str | None, missing: list[TargetError] | None = None) -> str:
    """The model EngineArgs hands on: offline (HF_HUB_OFFLINE), a path or the hub id's cached
    snapshot, found before any redirect; the tokenizer is taken the same way, and vLLM refuses
    the launch when either is neither (a tokenizer found nowhere is added to `missing`, and the
    model still looked for)."""
    model = str(command.model)
    if not offline(command.environ):
        return model
    if command.tokenizer is not None:
        tokenizer_revision = command.optional_text("tokenizer-revision")
        try:
            offline_model_path(command.tokenizer, tokenizer_revision, command.environ, "tokenizer")
        except TargetError as exc:
            if missing is None:
                raise
            missing.append(exc)
    return offline_model_path(model, revision, command.environ)


def _drafter(name: str, command: LaunchCommand, revision: str | None, config_format: str) -> ModelConfig:
    """The drafter's config (in the target's format, as vLLM reads it), its name redirected as vLLM's
    draft ModelConfig redirects it."""
    environ = command.environ
    return resolve_model(
        redirected(name, environ, command.cwd),
        environ,
        role="drafter",
        revision=revision,
        config_format=config_format,
    )


def _refuse_modelscope(environ: dict[str, str]) -> None:
    """VLLM_USE_MODELSCOPE=true: vLLM reads models from ModelScope and its cache, which patchkit does not read."""
    if environ.get("VLLM_USE_MODELSCOPE", "False").lower() == "true":
        raise TargetError(
            "cannot judge: VLLM_USE_MODELSCOPE is true, and vLLM then reads the models from ModelScope's hub "
            "and cache, which patchkit does not read",
            hint="check the launch without VLLM_USE_MODELSCOPE, with the models' local directories",
        )


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def command_findings(context: LaunchContext) -> list[Finding]:
    """What vLLM reads otherwise than the command says: a JSON option it drops, a short option
    (`-sc`) the installed vLLM does not declare (0.16.0 has no `-sc`: its parser refuses the command)."""
    command = context.command
    found = [Finding(COMMAND, False, note, "give the option one way: as JSON or key by key") for note in command.notes]
    if command.config_ignored is not None:  # vLLM starts, without the file's options
        found.append(Finding(COMMAND, False, *ignored_config(command.config_ignored)))
    if not command.exact:
        found.append(_lenient_reading(command, context.version))
    declared = context.read(ARG_UTILS)
    for option in sorted(command.short_options()):
        if declared is not None and f'"{option}"'.encode() not in declared:
            message = f"the installed vLLM has no option {option} ({ARG_UTILS} declares none): it refuses the command"
            found.append(Finding(COMMAND, False, message, f"write --{ALIASES[option[1:]]}"))
    found += bounds_findings(COMMAND, context) + speculative_findings(context) + eagle1_findings(context)
    found += proposer_findings(context) + draft_model_unread(context) + length_findings(COMMAND, context)
    found += quantization_findings(COMMAND, context)
    found += logging_findings(command.environ, command.working_directory(), context.read)
    found += context_parallel_findings(context)
    found += deprecation_findings(command.environ, lambda: command.interpreter_settings()[0], context.read)
    found += hub_findings(command.environ, context.read)
    cwd = command.working_directory()  # a file a variable names is read as text in the launch's own encoding
    return found + refused_flags(command.environ, context.read, cwd, lambda: launch_text_encoding(command))


def _lenient_reading(command: LaunchCommand, version: Version | None) -> Finding:
    """A release without a recorded parser: which release's parser read the command, and, when that
    parser does not know an argument (a speculative option of the newer release?), cannot judge."""
    read_with = f"vLLM {version} has no recorded parser spec: the command was read with {command.release}'s"
    if not command.unread:
        return Finding(COMMAND, True, read_with)
    unknown = ", ".join(a for a in command.unread if a.startswith("-")) or " ".join(command.unread)
    message = f"cannot judge: {read_with}, which does not know {unknown} (vLLM {version} may read them)"
    fix = (
        f"write them as vLLM {command.release} spells them (e.g. --speculative-config JSON), or record vLLM "
        f"{version}'s parser: python -m patchkit.maintainer.serve_spec --python VLLM_PYTHON {version}"
    )
    return Finding(COMMAND, False, message, fix)


def tree_findings(resolved: Resolved, status: TreeStatus, needs: LaunchNeeds, result: PreflightResult) -> list[Finding]:
    """The set's tree-state finding, when the launch needs the set. A set it does not need fails the
    launch only through the guard's refusal (with the guard on, vLLM loads it and it refuses the tree
    for any recorded set); otherwise its state is noted in `result.unused`. A recorded guard that is
    gone fails a launch that would load it: the launch the user guarded runs unchecked."""
    gone = [_guard_gone(status)] if needs.guard_runs and status.guard_missing else []
    root, hanging, unjudged = resolved.target.root, status.hanging, status.unjudged_bytecode
    hangs = [Finding(TREE, False, hanging_said(hanging), hanging_fix(root, hanging))] if hanging else []
    hangs += [Finding(TREE, False, unjudged_said(unjudged), unjudged_fix(root))] if unjudged else []
    return hangs + gone + _set_state_findings(resolved, status, needs, result)


def _guard_gone(status: TreeStatus) -> Finding:
    return Finding(TREE, False, status.guard_missing or "", status.guard_missing_fix)


def _set_state_findings(
    resolved: Resolved, status: TreeStatus, needs: LaunchNeeds, result: PreflightResult
) -> list[Finding]:
    if needs.needs(resolved.set_name):
        met = _guard_for_launch(resolved, status, needs, result)  # what the guard refuses in this launch
        if met.guard and met.symlink_fix:  # a symlink on the way: the hand repair, before what follows from it
            return [_guard_refusal(met)]
        unsaid = _not_said_by_judged(resolved, met, needs) if met.guard else []
        # under a pycache prefix prefix_findings judges the bytecode; under `always` Python checks every hash-based .pyc
        unread = bool(command_prefix(resolved.target.root, result.command))
        unread = unread or result.command.hash_pycs_mode() == "always"
        finding = tree_finding(resolved, dataclasses.replace(met, guard=unsaid), prefixed=unread)
        # its own files' refusals its state does not say (a recorded file a symlink to a copy of its
        # bytes reads as applied): the refusal itself, as vLLM's plugin loader meets it
        own = _not_said_by_judged(resolved, met, needs, but=resolved.set_name) if finding.ok and met.guard else []
        return [_guard_refusal(dataclasses.replace(met, guard=own)) if own else finding]
    if needs.guard_runs and status.guard:
        unsaid = _not_said_by_judged(resolved, status, needs)
        refusal = _guard_refusal(dataclasses.replace(status, guard=unsaid))
        if status.drifted:  # its own files: their fix names the set (apply alone would apply every set)
            chosen = hints.for_set(resolved.set_name)
            revert, apply = hints.command("revert", "--force", chosen=chosen), hints.command("apply", chosen=chosen)
            refusal.fix, refusal.restores = f"run {revert} (it keeps a copy of the edits), then {apply}", None
        return [refusal] if unsaid else []
    words = _state_words(status)
    if words and resolved.set_name in needs.maybe:  # the launch's tool parser plugin may use it
        return [_maybe_used(resolved.set_name, needs.maybe[resolved.set_name], words)]
    if words:
        result.unused[resolved.set_name] = words
        result.guard_off = result.guard_off or (None if needs.guard_runs or not status.drifted else needs.guard_off)
    return []


def _not_said_by_judged(resolved: Resolved, status: TreeStatus, needs: LaunchNeeds, *, but: str = "") -> list[str]:
    """The guard's refusals less those for a file of a set this run judges and the launch needs (`but`
    that one): that set's own tree-state finding names its drift, with its fix (said once, not again
    as the refusal)."""
    said = {n for n in needs.judged if needs.needs(n) and n != but}
    files = [path for e in record_of(resolved.target.root, status).entries if e.set_name in said for path in e.files]
    said_there = naming(status.guard, files)
    return [problem for problem in status.guard if problem not in said_there]


def _maybe_used(name: str, why: str, words: str) -> Finding:
    """Cannot judge whether a set the launch names no parser of is used: its tool parser plugin,
    unread, may build on a parser the set patches (and the set is `words`)."""
    reason = f"{why}, and it may build on a tool parser the {name} set patches, which is {words} here"
    apply = hints.command("apply", chosen=hints.for_set(name))
    return cannot_judge(
        TREE, reason, f"run {apply} (it serves the plugin's parser if built on vLLM's), or check the plugin by hand"
    )


def _state_words(status: TreeStatus) -> str | None:
    """A set's state, when not as apply leaves it, in a few words for a note."""
    if status.state == TreeState.NOT_APPLIED:
        return "not applied"
    if status.state == TreeState.PARTIAL:
        return "partly applied"
    if status.state == TreeState.CONFLICT:
        edited = status.edited_in_hunks
        return f"does not apply: {', '.join(edited)} {'differs' if len(edited) == 1 else 'differ'} from stock (a local edit?)"
    if status.drifted:
        return f"changed after apply: {few(status.drifted, sep=', ')}"
    return status.other_library_said if status.other_library else None


def _guard_for_launch(
    resolved: Resolved, status: TreeStatus, needs: LaunchNeeds, result: PreflightResult
) -> TreeStatus:
    """`status` with the guard's refusals this launch does not meet: with the guard off in it, those
    caused by a file of a set the launch does not need (noted in `result.unused` instead)."""
    if needs.guard_runs or not status.guard or not needs.unneeded:
        return status
    root = resolved.target.root
    owners = {
        path: e.set_name for e in record_of(root, status).entries if not needs.needs(e.set_name) for path in e.files
    }
    kept: list[str] = []
    changed: dict[str, list[str]] = {}
    first = Heads(status.guard).first_named(owners)
    for problem in status.guard:
        path = first.get(problem)
        if path is None:
            kept.append(problem)
        else:
            changed.setdefault(owners[path], []).append(path)
    for name, paths in changed.items():
        result.unused.setdefault(name, f"changed after apply: {', '.join(paths)}")
        result.guard_off = needs.guard_off
    return dataclasses.replace(status, guard=kept)


def _guard_refusal(status: TreeStatus) -> Finding:
    return Finding(
        TREE,
        False,
        refusal_text(upgrade_said(status.guard), status.guard_installed),
        status.guard_fix,
        restores=status.restores,
    )


def tree_finding(resolved: Resolved, status: TreeStatus, *, prefixed: bool = False) -> Finding:
    """The set's tree-state finding; `prefixed`: the launch loads no bytecode from __pycache__ unchecked
    (it reads it under a pycache prefix, where prefix_findings judges it; or it runs with
    --check-hash-based-pycs always)."""
    if status.guard and status.symlink_fix:  # a symlink on the way: what else is found follows from it
        return _guard_refusal(status)
    finding = _state_finding(resolved, status, prefixed=prefixed)
    if finding.ok and status.guard:  # vLLM's plugin loader stops this launch all the same
        return _guard_refusal(status)
    return finding


def _as_its_conflict_fix_leaves(resolved: Resolved, files: list[str]) -> Reader | None:
    """The set's files as the fix of a local edit inside a hunk leaves them (its stock files back,
    then apply): the series on the stock files the fetch cache holds (a check judged
    on the edited files would fail where that fix makes it pass). None: no cached stock, or a conflict."""
    stock = cached_stock(resolved.target.root, resolved.vllm_version, files)
    if not files or stock is None:
        return None
    plan = dry_run(resolved.target.root, resolved.patches, dict(stock))
    return None if plan.conflicts else plan.content


def _state_finding(resolved: Resolved, status: TreeStatus, *, prefixed: bool = False) -> Finding:

    version = resolved.vllm_version
    if status.state == TreeState.UPSTREAM:
        return Finding(TREE, True, f"vLLM {version} ships the {resolved.set_name} change itself (upstream)")
    if status.state == TreeState.UNRECORDED:  # the launch gets the change; the record is what is missing
        held = f"vLLM {version}'s files hold the {resolved.set_name} change with no apply recorded (upstream's or a hand's)"
        return Finding(TREE, True, held)
    if status.state == TreeState.UNSUPPORTED and resolved.selection.gap:  # no series to apply: nothing makes it safe
        said = f"{resolved.selection.note}, and this launch needs it: patchkit cannot patch this tree for it"
        return Finding(TREE, False, said, gap_fix(resolved))
    if status.state == TreeState.UNSUPPORTED:
        return Finding(TREE, False, resolved.selection.note or f"no patch set for vLLM {version}")
    if status.state == TreeState.NOT_APPLIED:
        message = f"the {resolved.set_name} series is not applied to vLLM {version}" + _reinstalled_said(status)
        return Finding(TREE, False, message, apply_fix(resolved.selection.patch_set))
    if status.drifted:  # before partly applied: apply refuses an edited file, its fix is the drift's
        files = few(status.drifted, sep=", ")
        return Finding(TREE, False, f"changed after patchkit wrote them: {files}", set_drift_fix(resolved, status))
    if status.other_library:  # the earlier series: apply replaces it with the library's
        message = f"the {resolved.set_name} series on vLLM {version} was {status.other_library_said}"
        return Finding(TREE, False, message, f"run {status.other_library_fix}")
    if status.state == TreeState.CONFLICT:
        root, edited, there = resolved.target.root, status.edited_in_hunks, status.in_the_way
        message = f"the {resolved.set_name} series does not apply: {local_edit_said(edited, version, root, there)}"
        return Finding(TREE, False, message, local_edit_fix(root, version, edited, resolved.set_name, there))
    if status.state == TreeState.PARTIAL:
        message = f"the {resolved.set_name} series is partly applied to vLLM {version}" + _reinstalled_said(status)
        if apply_finishes(status):
            return Finding(TREE, False, message, apply_fix(resolved.selection.patch_set))
        return Finding(TREE, False, message, f"run {hints.command('status')}, then {hints.command('apply')}")
    if status.found_edited:  # status's words and fix: apply refuses to record the set found applied
        message, fix = found_edit_said(resolved, status.found_edited[0])
        return Finding(TREE, False, f"{message}: apply refuses it", f"run {fix}")
    stale = None if prefixed else _stale_bytecode(resolved, status)
    if stale:
        fix = f"run {hints.command('apply')} (it recompiles or removes the stale .pyc)"  # no --force: nothing to patch
        return Finding(TREE, False, f"stale bytecode: {stale}", fix)
    shadowed = _shadowed(resolved)
    if shadowed:
        return Finding(TREE, False, shadowed, shadow.fix("that file"))
    return Finding(TREE, True, f"the {resolved.set_name} series is applied to vLLM {version}, no drift")


def _reinstalled_said(status: TreeStatus) -> str:
    """Why a recorded set is no longer applied when pip wrote its files (vLLM reinstalled): no edit."""
    if not status.reinstalled:
        return ""
    return f": vLLM was reinstalled (pip wrote {', '.join(status.reinstalled)}: its RECORD lists the bytes)"


def _shadowed(resolved: Resolved) -> str | None:
    """A patched source Python does not import (a package or extension module of its name first)."""
    found = shadow.scan(resolved.target.root, resolved.patches)
    return f"{found[0].path}: {found[0].message}" if found else None


def _series_paths(resolved: Resolved, status: TreeStatus) -> set[str]:
    # an applied tree's state taken from its record has no plan: the series' files are the plan's
    return set(status.plan.touched_paths if status.plan is not None else touched_paths(resolved.patches))


def _stale_bytecode(resolved: Resolved, status: TreeStatus) -> str | None:
    paths = _series_paths(resolved, status)
    results = scan(resolved.target.root, paths, resolved.target.python)
    return failures(results) if any(r.failed for r in results) else None
