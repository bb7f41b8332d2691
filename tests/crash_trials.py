"""Crash trials of apply and revert: a SIGKILL, SIGTERM, SIGHUP, a double SIGINT or a full disk at
each step of a commit and of its rollback (aimed by the transaction's fault plan,
PATCHKIT_FAULT_AFTER), and at random moments. After each, the next command (status, recover, apply
or revert, in turn) must leave a whole tree (stock, or patched with its guard) and no journal.

The transaction of the scenario deletes a package with a subpackage (directories removed), adds one
(directories created), changes two files, and installs (apply) or removes (revert) the launch guard's
module and dist-info. ReleaseScenario does the same with real files: a cut of vLLM 0.15.0 -> 0.16.0
that deletes vllm/attention/, adds vllm/kernels/helion/ and changes two modules. Each trial is a fork
of this process running the CLI as the console script does (real signals, real exits; no
interpreter start-up per trial).

    python tests/crash_trials.py [--random N] [--seed S]       # the whole aimed sweep + N random
    python tests/crash_trials.py --release [--random N]        # the same kinds on the release diff
"""

from __future__ import annotations

import argparse
import atexit
import functools
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import time
import types
from collections import Counter
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from cli_server import Running, start_patchkit
from helpers import (
    MODEL_PY,
    READ_ONLY_COMMANDS,
    SPEC_PY,
    WRITING_COMMANDS,
    make_patch,
    run_cli_judged,
    sweep_trials,
    write_tree,
)

OLD_PACKAGE = {  # deleted by the patch: three directories go
    "vllm/old/__init__.py": "",
    "vllm/old/impl.py": "IMPL = 1\n",
    "vllm/old/sub/__init__.py": "",
    "vllm/old/sub/deep.py": "DEEP = 2\n",
}
EDITS = {
    "vllm/config/spec.py": SPEC_PY.replace('"qwen"', '"deepseek"'),
    "vllm/models/model.py": MODEL_PY.replace("return x", "return x + 1"),
    "vllm/brand/new/mod.py": "NEW = True\n",
    "vllm/brand/__init__.py": "",
    **dict.fromkeys(OLD_PACKAGE),
}
SIGNALLED = {"kill": signal.SIGKILL, "int": signal.SIGINT, "term": signal.SIGTERM, "hup": signal.SIGHUP}


def fingerprint(root: Path) -> dict[str, bytes | None]:
    """Every file (its bytes) and directory (None) of the tree, but patchkit's records and bytecode."""
    seen: dict[str, bytes | None] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(".patchkit") or "__pycache__" in rel:
            continue
        seen[rel] = None if path.is_dir() else path.read_bytes()
    return seen


@dataclass
class Scenario:
    base: Path
    stock: Path = field(init=False)
    patched: Path = field(init=False)
    patch: Path | None = field(init=False)  # None: the library's set for the tree's release
    guarded: bool = True  # False: applied --no-guard (judged by gate_says alone)
    gates: tuple[str, ...] = ()  # the set's `gates`: stock whenever another file of the change is
    set_files: tuple[str, ...] = ()  # the files of the set the gates are of (empty: every file changed)

    def __post_init__(self) -> None:
        warm_imports()
        self.stock = self.base / "stock"
        diff = self.lay_out_stock()
        self.patch = None if diff is None else self.base / "p.diff"
        if self.patch is not None and diff is not None:
            self.patch.write_bytes(diff)
        self.patched = self.base / "patched"
        shutil.copytree(self.stock, self.patched, symlinks=True)
        code, out = run_cli(["apply", *self.args(self.patched, "apply")])
        assert code == 0, out
        assert (self.patched / "patchkit_guard.py").exists() == self.guarded, "the guard installed, or not"
        self.prints = {"stock": fingerprint(self.stock), "patched": fingerprint(self.patched)}

    def lay_out_stock(self) -> bytes | None:
        """Write the stock tree at self.stock; the diff the trials apply to it (None: the library's)."""
        write_tree(self.stock, files={"vllm/config/spec.py": SPEC_PY, "vllm/models/model.py": MODEL_PY, **OLD_PACKAGE})
        scratch = self.base / "scratch"
        scratch.mkdir()
        return make_patch(scratch, self.stock, EDITS)

    def args(self, tree: Path, command: str = "status") -> list[str]:
        patch = (
            ["--patch", str(self.patch)] if self.patch is not None and command != "recover" else []
        )  # recover: the tree alone
        unguarded = ["--no-guard"] if command == "apply" and not self.guarded else []
        return ["--target", str(tree), *patch, *(["--no-import", *unguarded] if command == "apply" else [])]

    def fresh(self, start: str, where: Path) -> Path:
        shutil.rmtree(where, ignore_errors=True)
        shutil.copytree(self.stock if start == "stock" else self.patched, where, symlinks=True)
        return where

    def whole_vllm(self, tree: Path) -> str | None:
        """ "stock" or "patched" when vllm/'s files are exactly one's (a commit's staged temp files
        and the empty directories it made for them aside: Python imports none), else None."""

        def imported(prints: dict[str, bytes | None]) -> dict[str, bytes | None]:
            return {
                r: d for r, d in prints.items() if r.startswith("vllm/") and ".patchkit-" not in r and d is not None
            }

        now = imported(fingerprint(tree))
        return next((name for name, known in self.prints.items() if imported(known) == now), None)

    def whole(self, tree: Path) -> str | None:
        """ "stock" or "patched" when the tree is exactly one of them, else None."""
        now = fingerprint(tree)
        return next((name for name, known in self.prints.items() if known == now), None)


@dataclass
class GatedScenario(Scenario):
    """The scenario's change as a library set that declares vllm/config/spec.py its gate (in the
    middle of the paths' order), applied with no guard: what vLLM starts on is the gate's word."""

    guarded: bool = False
    gates: tuple[str, ...] = ("vllm/config/spec.py",)

    def lay_out_stock(self) -> None:
        from helpers import write_library

        diff = super().lay_out_stock()
        assert diff is not None
        self.library = write_library(self.base / "lib", {"0.16.0": [diff]})
        manifest = self.library / "demo/set.toml"
        declared = "gates = [" + ", ".join(f'"{gate}"' for gate in self.gates) + "]\n" if self.gates else ""
        manifest.write_text(
            manifest.read_text().replace('description = "test set"\n', f'description = "test set"\n{declared}')
        )

    def args(self, tree: Path, command: str = "status") -> list[str]:
        library = ["--patches", str(self.library)] if command != "recover" else []
        return [*super().args(tree, command), *library]


# A real release diff, cut to a few files of each kind: vLLM 0.15.0 -> 0.16.0 deletes the package
# vllm/attention/ (and its subpackage utils/), adds vllm/kernels/helion/, and changes modules.
RELEASE_FROM, RELEASE_TO = "0.15.0", "0.16.0"
RELEASE_GONE = [
    "vllm/attention/__init__.py",
    "vllm/attention/layer.py",
    "vllm/attention/utils/__init__.py",
    "vllm/attention/utils/kv_sharing_utils.py",
    "vllm/attention/utils/kv_transfer_utils.py",
]
RELEASE_NEW = [
    "vllm/kernels/__init__.py",
    "vllm/kernels/helion/__init__.py",
    "vllm/kernels/helion/config_manager.py",
    "vllm/kernels/helion/register.py",
    "vllm/kernels/helion/utils.py",
]
RELEASE_CHANGED = ["vllm/config/speculative.py", "vllm/model_executor/models/deepseek_v2.py"]


@dataclass
class ReleaseScenario(Scenario):
    """The trials on real fetched files: the stock tree is vLLM 0.15.0's files (and dist-info) that
    the diff names, the diff git's own between them and 0.16.0's."""

    def lay_out_stock(self) -> bytes:
        from helpers import lay_out_release, release_diff

        lay_out_release(RELEASE_FROM, [*RELEASE_GONE, *RELEASE_CHANGED], self.stock)
        newer = lay_out_release(RELEASE_TO, [*RELEASE_NEW, *RELEASE_CHANGED], self.base / "newer")
        diff = release_diff(self.stock, newer, self.base / "scratch")
        shutil.rmtree(self.base / "scratch")
        self.newer = {f"vllm/{rel}": data for rel, data in fingerprint(newer / "vllm").items()}
        return diff

    def __post_init__(self) -> None:
        super().__post_init__()
        applied = {rel: data for rel, data in self.prints["patched"].items() if rel.startswith("vllm/")}
        assert applied == self.newer, "the diff applied must give 0.16.0's files"


@dataclass
class Eagle3Scenario(Scenario):
    """patchkit's own transaction on a real release: the eagle3 set of the library on the files of
    vLLM 0.16.0 it patches and checks, with the guard. `only`: that set alone (one commit), not
    every set of the library (a commit each: a kill between two leaves whole sets)."""

    only: str | None = None

    def args(self, tree: Path, command: str = "status") -> list[str]:
        chosen = ["--set", self.only] if self.only and command != "recover" else []
        return [*super().args(tree, command), *chosen]

    def lay_out_stock(self) -> None:
        from helpers import lay_out_release

        from patchkit.releases.files import files_for

        lay_out_release(RELEASE_TO, files_for(RELEASE_TO), self.stock)


def unguarded_eagle3(base: Path, only: str | None = "eagle3") -> Eagle3Scenario:
    """Eagle3Scenario applied with --no-guard, judged by the eagle3 set's own `gates` (its set.toml)
    over its own files (those of its 0.16.0 series); `only` None: every set of the library."""
    from helpers import LIBRARY

    from patchkit.series.library import load_set, select
    from patchkit.series.patchfile import touched_paths
    from patchkit.tree.version import parse

    eagle3 = load_set(LIBRARY / "eagle3")
    files = tuple(touched_paths(select(eagle3, parse(RELEASE_TO, "VERSION")).patches))
    return Eagle3Scenario(base, guarded=False, gates=eagle3.gates, set_files=files, only=only)


def warm_imports() -> None:
    """Import patchkit's modules here once, so that a forked trial does not import them again."""
    import importlib
    import pkgutil

    import patchkit

    for module in pkgutil.walk_packages(patchkit.__path__, "patchkit."):
        if not module.name.startswith(("patchkit.fleet", "patchkit._target", "patchkit.__main__")):
            with suppress(Exception):  # an optional dependency (ray...): the trial imports what it needs
                importlib.import_module(module.name)


def run_cli(
    args: list[str],
    plan: str = "",
    signals_at: list[tuple[float, int]] | None = None,
    mode: str = "raise",
    from_file: Path | None = None,
    served: bool = False,
) -> tuple[int, str]:
    """patchkit ARGS in a forked child (as the console script runs), with a fault plan and signals
    sent at (delay, signal) from the start; its exit code (-N: killed by signal N) and output.
    `served`: forked from cli_server's warm interpreter (a smaller process: less to copy), for a trial
    that needs nothing of this process's own state (a test's monkeypatch, a signal raised here)."""
    out = tempfile.NamedTemporaryFile(prefix="trial-", delete=False)  # noqa: SIM115
    out.close()
    if served:
        env = {**os.environ, "PATCHKIT_FAULT_AFTER": plan, "PATCHKIT_FAULT_MODE": mode}
        output = os.open(out.name, os.O_WRONLY | os.O_TRUNC)
        try:
            running = start_patchkit(args, env, output)
        finally:
            os.close(output)
        if running is not None:
            code = _signalled(running, signals_at, from_file)
            text = Path(out.name).read_text(errors="replace")
            os.unlink(out.name)
            return code, text
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            _child(args, plan, mode, out.name)
        finally:
            _leave(99)
    ended = None
    while from_file is not None and signals_at and not from_file.exists():  # the delays count from its creation
        reaped, status = os.waitpid(pid, os.WNOHANG)
        if reaped:
            ended = status
            break
        time.sleep(0.0005)
    waited = 0.0
    for delay, number in (signals_at or []) if ended is None else []:
        time.sleep(max(0.0, delay - waited))
        waited = delay
        try:
            os.kill(pid, number)
        except ProcessLookupError:
            break
    code = os.waitstatus_to_exitcode(ended if ended is not None else os.waitpid(pid, 0)[1])
    text = Path(out.name).read_text(errors="replace")
    os.unlink(out.name)
    return code, text


def then(args: list[str]) -> tuple[int, str]:
    """The command after a trial, judged by its exit code, its output and the tree it leaves (no fault plan,
    no signal): status, apply, revert and recover in this process where CONTRIBUTING's rules allow
    (run_cli_judged: a fork costs several times the command here), any other a process served as run_cli's."""
    if args[0] not in (*READ_ONLY_COMMANDS, *WRITING_COMMANDS):
        return run_cli(args, served=True)
    done = run_cli_judged(*args)
    return done.returncode, done.stdout + done.stderr


def _signalled(running: Running, signals_at: list[tuple[float, int]] | None, from_file: Path | None) -> int:
    """run_cli's signals sent to a served command (from `from_file`'s creation, where given); its exit code."""
    while from_file is not None and signals_at and not from_file.exists():  # the delays count from its creation
        ended = running.ended(wait=False)
        if ended is not None:
            return ended
        time.sleep(0.0005)
    waited = 0.0
    for delay, number in signals_at or []:
        time.sleep(max(0.0, delay - waited))
        waited = delay
        if not running.signal(number):
            break
    code = running.ended()
    assert code is not None
    return code


def _child(args: list[str], plan: str, mode: str, out: str) -> None:  # pragma: no cover - runs in the fork
    code = 99
    # As from a terminal: a CI runner's background job or `nohup` may start the tests with these ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        fd = os.open(out, os.O_WRONLY | os.O_TRUNC)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
        from patchkit.cli import main as cli
        from patchkit.engine import transaction

        os.environ["PATCHKIT_FAULT_AFTER"] = plan
        os.environ["PATCHKIT_FAULT_MODE"] = mode  # the mode of a plan's step that names none
        transaction._faults = transaction._Faults()
        sys.argv = ["patchkit", *args]
        try:
            cli.main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    except BaseException as exc:
        print(f"trial child: {type(exc).__name__}: {exc}", file=sys.stderr)
    finally:
        _leave(code)


def _leave(code: int) -> None:  # pragma: no cover - runs in the fork
    """End the trial's child here, whatever signal comes late: one that escaped would run the rest
    of pytest in the child (and its teardown would delete the parent's scenario)."""
    while True:
        try:
            for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(number, signal.SIG_IGN)
            break
        except BaseException:  # a signal as they were being ignored: ignore them again
            continue
    with _quiet():
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


class _quiet:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return True


def fast_scratch() -> str | None:
    """/dev/shm when there is one: the trials measure crash safety, not the disk's fsync."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


NEXT = ("status", "recover", "apply", "revert")
EXPECTED_CODES = {"kill": {-signal.SIGKILL}, "exit": {70}, "raise": {4}, "int": {130}, "term": {143}, "hup": {129}}


@dataclass
class Tally:
    trials: Counter = field(default_factory=Counter)
    outcomes: Counter = field(default_factory=Counter)  # what each trial left: exit code, tree, journal
    failures: list[str] = field(default_factory=list)

    def report(self) -> str:
        lines = [f"{sum(self.trials.values())} trials, {len(self.failures)} failed"]
        lines += [f"  {key}: {count}" for key, count in sorted(self.trials.items())]
        lines += ["left by the trial, before the next command:"]
        lines += [f"  {key}: {count}" for key, count in sorted(self.outcomes.items())]
        lines += [f"  FAILED {text}" for text in self.failures[:20]]
        return "\n".join(lines)


def trial(
    scn: Scenario, work: Path, op: str, plan: str, kind: str, tally: Tally, turn: int, signals_at=None, in_commit=False
) -> int:
    """One trial: `op` (apply from stock, revert from patched) with `plan`; then the next command.
    Returns the trial's exit code (0: it got through, the plan's faults were past its end)."""
    start, goal = ("stock", "patched") if op == "apply" else ("patched", "stock")
    tree = scn.fresh(start, work)
    journal_file = tree / ".patchkit/journal.json" if in_commit else None
    code, out = run_cli([op, *scn.args(tree, op)], plan, signals_at, from_file=journal_file, served=True)
    tally.trials[f"{op} {kind}"] += 1
    where = f"{op} plan={plan!r} signals={signals_at}"
    last = plan.rsplit(":", 1)[-1] if plan else None
    if code != 0 and last in EXPECTED_CODES and code not in EXPECTED_CODES[last] | _first_codes(plan):
        tally.failures.append(f"{where}: exit {code}: {out.strip()[-300:]}")
    if (code == 70 and last != "exit") or out.count("Traceback") > out.count(_SWALLOWED) + _in_start_up(out):
        tally.failures.append(f"{where}: internal error: {out.strip()[-300:]}")
    state = scn.whole(tree)
    journal = (tree / ".patchkit/journal.json").exists()
    tally.outcomes[f"{op} exit {code}: {state or 'mixed'}{', journal' if journal else ''}"] += 1
    if "Aborted!" in out and state != start:  # click's word for a Ctrl-C before the command ran
        tally.failures.append(f"{where}: exit {code} 'Aborted!' but the tree is {state}")
    if code in (4, 129, 130, 143) and "journal is kept" not in out:  # rolled back whole, or in place: and said so
        in_place = "in place" in out
        if journal or state != (goal if in_place else start):
            tally.failures.append(
                f"{where}: exit {code}, said in_place={in_place}, the tree is {state}, journal={journal}: {out.strip()[-200:]}"
            )
    launch_says(scn, tree, where, "the trial", tally)
    following = NEXT[turn % len(NEXT)]
    again, said = then([following, *scn.args(tree, following)])
    state = scn.whole(tree)
    launch_says(scn, tree, where, f"`{following}`", tally)
    if (tree / ".patchkit/journal.json").exists():
        tally.failures.append(f"{where}: `{following}` left the journal (exit {again}): {said.strip()[-300:]}")
    expected = {"apply": {"patched"}, "revert": {"stock"}}.get(following, {"stock", "patched"})
    if state not in expected:
        tally.failures.append(
            f"{where}: after `{following}` (exit {again}) the tree is mixed/{state}: {said.strip()[-300:]}"
        )
    if following in ("apply", "revert", "recover") and again != 0:
        tally.failures.append(f"{where}: `{following}` exit {again}: {said.strip()[-300:]}")
    # patchkit's own crash: every file recovery replaces or removes is the very one its commit staged
    if (tree / ".patchkit/saved").exists() or "kept, not written by it" in out + said:
        tally.failures.append(f"{where}: a file kept aside or as it was: {(out + said).strip()[-300:]}")
    if "is not sealed with this user's key" in out + said:  # its own marker, sealed: never refused
        tally.failures.append(f"{where}: its own journal refused as unsealed: {(out + said).strip()[-300:]}")
    return code


def installed_guard(tree: Path) -> object | None:
    """The guard module the tree holds, as vLLM's general-plugins hook would load it (its file and
    its dist-info's entry point both there), loaded from the tree; None: no guard would run."""
    import importlib.util

    module = tree / "patchkit_guard.py"
    points = list(tree.glob("patchkit_guard-*.dist-info/entry_points.txt"))
    if not module.is_file() or not points or "vllm.general_plugins" not in points[0].read_text():
        return None
    spec = importlib.util.spec_from_file_location(f"trial_guard_{os.getpid()}", module)
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    if sys.dont_write_bytecode and not os.path.exists(importlib.util.cache_from_source(str(module))):
        exec(_guard_code(str(module), module.read_bytes()), loaded.__dict__)  # what exec_module runs here
    else:  # the loader reads the bytecode there, or writes it
        spec.loader.exec_module(loaded)
    return loaded


@functools.lru_cache(maxsize=8)
def _guard_code(path: str, source: bytes) -> types.CodeType:
    """The guard's code as its loader compiles it from a tree with no bytecode (source_to_code): the same
    bytes at the same path give the same code, and the trials' trees have the same path (~13 ms a compile)."""
    return compile(source, path, "exec", dont_inherit=True)


def guard_says(scn: Scenario, tree: Path, where: str, after: str, tally: Tally) -> None:
    """What a `vllm serve` started now would meet (review38 B6): a tree some of whose files the
    change wrote and some not must hold a guard that refuses it, saying to recover; a journal is
    always refused where a guard is; a whole tree with no journal is passed (its record holds)."""
    guard = installed_guard(tree)
    journal = (tree / ".patchkit/journal.json").exists()
    state = scn.whole_vllm(tree)
    problems = guard.find_problems(str(tree)) if guard is not None else []  # type: ignore[attr-defined]
    unfinished = guard is not None and problems == [guard.UNFINISHED]  # type: ignore[attr-defined]
    tally.outcomes[f"guard after {after}: {'none' if guard is None else 'refuses' if problems else 'passes'}"] += 1
    if state is None and not unfinished:
        tally.failures.append(f"{where}: after {after} vllm/ is mixed, yet the guard {guard and problems}")
    elif journal and guard is not None and not unfinished:
        tally.failures.append(f"{where}: after {after} a journal, yet the guard says {problems}")
    elif not journal and state is not None and problems:
        tally.failures.append(f"{where}: after {after} the tree is {state}, yet the guard refuses: {problems}")


def launch_says(scn: Scenario, tree: Path, where: str, after: str, tally: Tally) -> None:
    """What a `vllm serve` started now would meet: the guard's verdict (guard_says), and with no
    guard the gates' word (gate_says)."""
    if scn.guarded:
        guard_says(scn, tree, where, after, tally)
    if scn.gates:
        gate_says(scn, tree, where, after, tally)


_ABSENT = b"\0absent"


def gate_says(scn: Scenario, tree: Path, where: str, after: str, tally: Tally) -> None:
    """A tree some of whose changed files are stock must have its gates stock too: vLLM then refuses
    the launch at start (eagle3's whitelist), never admits it to fail after the model's load."""
    now, stock, patched = fingerprint(tree), scn.prints["stock"], scn.prints["patched"]
    files = [
        rel
        for rel in sorted({*stock, *patched})
        if rel.startswith("vllm/") and (isinstance(stock.get(rel), bytes) or isinstance(patched.get(rel), bytes))
        if not scn.set_files or rel in scn.set_files
        if stock.get(rel, _ABSENT) != patched.get(rel, _ABSENT)
    ]
    stock_now = [rel for rel in files if rel not in scn.gates and now.get(rel, _ABSENT) == stock.get(rel, _ABSENT)]
    patched_now = [rel for rel in files if rel not in scn.gates and now.get(rel, _ABSENT) == patched.get(rel, _ABSENT)]
    mixed = ", others mixed" if stock_now and patched_now else ""
    for gate in scn.gates:
        gate_stock = now.get(gate, _ABSENT) == stock.get(gate, _ABSENT)
        tally.outcomes[f"gate after {after}: {'stock' if gate_stock else 'patched'}{mixed}"] += 1
        if stock_now and not gate_stock:
            tally.failures.append(f"{where}: after {after} the gate {gate} is patched, yet {stock_now[0]} is stock")


# Python ignores an exception a signal handler raises inside a weakref callback or finalizer (it
# prints this and goes on): that signal is lost, the run goes on whole, and the checks above hold.
_SWALLOWED = "Exception ignored in"
TRACEBACK = "Traceback (most recent call last):"


def _in_start_up(out: str) -> int:
    """The tracebacks of a Ctrl-C the interpreter took in its own start-up (site's .pth files, runpy finding
    patchkit's __main__): no frame of patchkit's own, so no program could catch it (a fresh interpreter's
    trial times its signals from its exec)."""
    blocks = out.split(TRACEBACK)[1:]
    return sum(b.rstrip().endswith("KeyboardInterrupt") and "patchkit" not in b.replace(TRACEBACK, "") for b in blocks)


def _first_codes(plan: str) -> set[int]:
    """A double fault: the first one's code counts too (its signal raised after the deferred rollback)."""
    modes = [item.partition(":")[2] for item in plan.split(",")]
    return set().union(*(EXPECTED_CODES.get(m, set()) for m in modes))


def commit_steps(scn: Scenario, work: Path, op: str) -> int:
    """How many steps the commit of `op` has: the last N at which a SIGKILL still stops it."""
    return last_stopped(lambda n: _killed(scn, work, op, f"{n}:kill"), 1, 1024)


def last_stopped(killed: Callable[[int], bool], low: int, high: int) -> int:
    """The last step in [low, high) a kill still stops, `killed` telling for a step (a kill at `low` lands,
    at `high` comes after the end): a bisection, between two steps a shared sweep tried."""
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if killed(middle) else (low, middle)
    return low


def _killed(scn: Scenario, work: Path, op: str, plan: str) -> bool:
    tree = scn.fresh("stock" if op == "apply" else "patched", work)
    return run_cli([op, *scn.args(tree, op)], plan, served=True)[0] == -signal.SIGKILL


def aimed_commit(scn: Scenario, work: Path, op: str, mode: str, tally: Tally, limit: int = 200) -> int:
    """A fault of `mode` at each step of the commit of `op` in turn (a share of them under the fast
    profile: sweep_trials); how many steps it has."""
    tried = sweep_trials(range(1, limit))
    for before, n in zip([0, *tried], tried, strict=False):
        if trial(scn, work, op, f"{n}:{mode}", f"commit {mode}", tally, n) == 0:
            return last_stopped(lambda m: _killed(scn, work, op, f"{m}:kill"), before, n)
    raise AssertionError(f"{op} never got through")


def rollback_lengths(scn: Scenario, work: Path, op: str, tally: Tally, steps: list[int]) -> dict[int, int]:
    """For a failure (ENOSPC) at each commit step n in `steps`, a SIGKILL at each step m of the
    rollback it starts (a share of them under the fast profile); n -> the number of steps that rollback has."""
    lengths = {}
    for n in steps:
        tried = sweep_trials(range(n + 1, n + 500))
        for before, m in zip([n, *tried], tried, strict=False):
            if trial(scn, work, op, f"{n}:raise,{m}:kill", "rollback raise+kill", tally, m) != -signal.SIGKILL:
                last = last_stopped(lambda k, n=n: _killed(scn, work, op, f"{n}:raise,{k}:kill"), before, m)
                lengths[n] = last - n  # the kill came after the rollback's last step
                break
    return lengths


def aimed_rollback(
    scn: Scenario, work: Path, op: str, first: str, second: str, tally: Tally, lengths: dict[int, int]
) -> None:
    """A first fault at commit step n, then a second at each step of the rollback it starts (a share of
    them under the fast profile)."""
    for n, length in lengths.items():
        for m in sweep_trials(range(n + 1, n + length + 1)):
            trial(scn, work, op, f"{n}:{first},{m}:{second}", f"rollback {first}+{second}", tally, m)


def random_trials(scn: Scenario, work: Path, op: str, count: int, rng: random.Random, tally: Tally) -> None:
    """Signals at random moments of a whole run, or (every other trial) of its transaction, from
    the moment its journal exists: one SIGKILL, SIGTERM or SIGHUP; a double SIGINT; a SIGTERM
    then a SIGKILL a moment later (inside the rollback it started)."""
    tree = scn.fresh("stock" if op == "apply" else "patched", work)
    started = time.monotonic()
    code, out = run_cli([op, *scn.args(tree, op)], served=True)
    assert code == 0, out
    full = time.monotonic() - started
    for i in range(count):
        in_commit = bool(i % 2)
        at = rng.uniform(0.0, 0.03 if in_commit else full)
        kind = rng.choice(["kill", "term", "hup", "int2", "term+kill"])
        if kind == "int2":
            sent = [(at, signal.SIGINT), (at + rng.uniform(0, 0.01), signal.SIGINT)]
        elif kind == "term+kill":
            sent = [(at, signal.SIGTERM), (at + rng.uniform(0, 0.01), signal.SIGKILL)]
        else:
            sent = [(at, SIGNALLED[kind])]
        trial(scn, work, op, "", f"random {kind}{' in commit' if in_commit else ''}", tally, i, sent, in_commit)


def console_run(args: list[str], signals_at: list[tuple[float, int]]) -> tuple[int, str, int]:
    """patchkit ARGS as the console script runs it (patchkit.cli.start, to its very exit) in a
    forked child, with signals sent at (delay, signal) from the start: its exit code, its output,
    and how many of the signals reached it before it ended (its last act is timed in the child: a
    signal sent while the kernel tears the process down is not one patchkit could have seen)."""
    out = tempfile.NamedTemporaryFile(prefix="trial-", delete=False)  # noqa: SIM115
    out.close()
    ready, starting = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(ready)
            _console_child(args, out.name, starting)
        finally:
            _leave(99)
    os.close(starting)
    os.read(ready, 1)  # the delays count from the console script's start, not the harness's set-up
    os.close(ready)
    started, sent, status = time.monotonic(), [], None
    for delay, number in signals_at:
        while time.monotonic() - started < delay:
            time.sleep(0.0002)
        reaped, waited = os.waitpid(pid, os.WNOHANG)
        if reaped:
            status = waited
            break
        os.kill(pid, number)
        # timed once the kill has returned: a harness preempted between its clock and its kill
        # (a loaded machine) would count a signal sent after the child's last look as reached
        sent.append(time.monotonic())
    code = os.waitstatus_to_exitcode(status if status is not None else os.waitpid(pid, 0)[1])
    global last_run_seconds
    last_run_seconds = time.monotonic() - started
    text = Path(out.name).read_text(errors="replace")
    os.unlink(out.name)
    text, _, ended = text.rpartition(_ENDED)
    reached = sum(at < float(ended or "inf") for at in sent)
    return code, text, reached


_ENDED = "\ntrial child ended at "
last_run_seconds = 0.0  # console_run's last run, from the console script's start to its exit


def _console_child(args: list[str], out: str, starting: int) -> None:  # pragma: no cover - runs in the fork
    real_exit = os._exit
    from patchkit.base import signals as patchkit_signals

    looks: list[float] = []
    real_look = patchkit_signals.late_signal

    def timed_look() -> int | None:
        # the console script's last look for a signal is its last chance to say one: a signal sent
        # after it (as the process exits) is one it could not have seen, like one at the exit itself
        looks.append(time.monotonic())
        return real_look()

    patchkit_signals.late_signal = timed_look

    def timed_exit(code: int) -> None:
        with _quiet():
            sys.stdout.flush()
            sys.stderr.write(f"{_ENDED}{looks[-1] if looks else time.monotonic()}")
            sys.stderr.flush()
        real_exit(code)

    os._exit = timed_exit
    atexit._clear()  # the parent's (pytest's temporary directories): the console script's exit runs atexit
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    fd = os.open(out, os.O_WRONLY | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
    from patchkit.cli import start

    sys.argv = ["patchkit", *args]
    code = 98  # start.main returned: it never should, it ends the process
    run = start._run

    def ready_then_run() -> None:
        # said from inside start.main's guard: a signal sent on this word, between it and that
        # guard, was a KeyboardInterrupt of this harness's own code (exit 99), not patchkit's
        os.write(starting, b"!")
        os.close(starting)
        run()

    start._run = ready_then_run
    try:
        start.main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    _leave(code)


def double_ctrl_c_trials(scn: Scenario, work: Path, count: int, rng: random.Random, tally: Tally) -> None:
    """A double Ctrl-C (a second one up to 20 ms after the first) at random moments of a revert run
    as the console script, to its very exit (review 6 L7: sometimes exit 0, nothing said): every
    revert a signal reached ends 130 with patchkit's one line, and the tree is whole (then the next
    command finds it so)."""
    runs = []
    for _ in range(3):
        tree = scn.fresh("patched", work)
        code, out, _ = console_run(["revert", *scn.args(tree, "revert")], [])
        assert code == 0, out
        runs.append(last_run_seconds)
    # timed from the console script's start, as the signals are: with the fork and the harness's
    # set-up counted, and one cold run, 60% of the moments fell after the revert had ended
    full = statistics.median(runs)
    for i in range(count):
        at = rng.uniform(0.0, full * 1.1)
        sent = [(at, signal.SIGINT), (at + rng.uniform(0, 0.02), signal.SIGINT)]
        tree = scn.fresh("patched", work)
        code, out, reached = console_run(["revert", *scn.args(tree, "revert")], sent)
        # a signal patchkit answered (exit 130, its line) reached it, though sent after its last look
        # for a late one: the look times only the signals that come as the process ends
        reached = reached or (code == 130 and "interrupted" in out)
        state = scn.whole(tree)
        tally.trials[f"revert double int, {'reached' if reached else 'after its end'}"] += 1
        tally.outcomes[f"revert exit {code}: {state or 'mixed'}"] += 1
        said = out.count("interrupted")
        in_place = "in place" in out
        where = f"revert signals={sent}"
        if reached and (code != 130 or said != 1 or state != ("stock" if in_place else "patched")):
            tally.failures.append(f"{where}: exit {code}, said {said}x, tree {state}: {out.strip()[-300:]}")
        if not reached and (code != 0 or state != "stock"):
            tally.failures.append(f"{where}: none reached it, yet exit {code}, tree {state}: {out.strip()[-300:]}")
        following = NEXT[i % len(NEXT)]
        again, said_next = then([following, *scn.args(tree, following)])
        if (tree / ".patchkit/journal.json").exists() or scn.whole(tree) is None:
            tally.failures.append(f"{where}: after `{following}` (exit {again}): {said_next.strip()[-300:]}")


def fill(directory: Path, leave: int) -> Path:
    """Fill the file system of `directory` up, then free `leave` bytes: a disk that is full but that."""
    filler = directory / "filler"
    # unbuffered: a buffered writer keeps the bytes a full disk refused and fails again at close
    # (whether any are left depends on how many bytes the tree took: a few more bytes of guard)
    with open(filler, "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * 65536)
        except OSError:
            pass
    size = filler.stat().st_size
    os.truncate(filler, max(0, size - leave))
    return filler


def full_disk_trials(scn: Scenario, mount: Path, tally: Tally, frees: list[int]) -> None:
    """apply and revert on a small tmpfs left with each of `frees` bytes: exit 0 or 4 (never 70),
    a whole tree and no journal; then, space freed, the next command finds it whole."""
    for op, start, goal in (
        ("apply", "stock", "patched"),
        ("revert", "patched", "stock"),
        ("apply", "patched", "patched"),
    ):
        for leave in frees:
            tree = scn.fresh(start, mount / "tree")
            filler = fill(mount, leave)
            code, out = run_cli([op, *scn.args(tree, op)], served=True)
            state, journal = scn.whole(tree), (tree / ".patchkit/journal.json").exists()
            tally.trials[f"{op} of a {start} tree on a full disk, exit {code}"] += 1
            if code not in (0, 4) or journal or state != (goal if code == 0 else start) or "Traceback" in out:
                tally.failures.append(
                    f"{op} with {leave} bytes free: exit {code}, tree {state}, journal {journal}: {out.strip()[-300:]}"
                )
            filler.unlink()
            again, said = then(["status", *scn.args(tree)])
            if scn.whole(tree) != state or (tree / ".patchkit/journal.json").exists():
                tally.failures.append(
                    f"{op} with {leave} bytes free, then status (exit {again}): {said.strip()[-300:]}"
                )


def sweep(base: Path, randoms: int, seed: int, *, aimed: bool = True) -> Tally:
    scn = Scenario(base)
    work = base / "work"
    tally = Tally()
    rng = random.Random(seed)
    for op in ("apply", "revert"):
        if not aimed:
            random_trials(scn, work, op, randoms, rng, tally)
            continue
        steps = {mode: aimed_commit(scn, work, op, mode, tally) for mode in ("kill", "term", "hup", "exit", "raise")}
        lengths = rollback_lengths(scn, work, op, tally, list(range(1, steps["kill"] + 1)))
        some = dict(rng.sample(sorted(lengths.items()), min(10, len(lengths))))
        aimed_rollback(
            scn, work, op, "int", "int", tally, {n: k for n, k in lengths.items() if n % 3 == 0}
        )  # a double Ctrl-C
        aimed_rollback(scn, work, op, "term", "term", tally, some)
        aimed_rollback(scn, work, op, "raise", "raise", tally, some)  # the disk fails the rollback too
        random_trials(scn, work, op, randoms, rng, tally)
    return tally


def release_sweep(
    base: Path,
    randoms: int,
    seed: int,
    *,
    rollback_every: int = 4,
    second_faults_on: int | None = None,
    ops: tuple[str, ...] = ("apply", "revert"),
) -> Tally:
    """The sweep on the real release diff (ReleaseScenario): a SIGKILL, SIGTERM, SIGINT and ENOSPC
    at every commit step; a SIGKILL at every step of the rollbacks that every `rollback_every`-th
    commit step (and the last three: the guard's, the record's) starts; a second SIGINT (the double
    Ctrl-C), a second SIGTERM and a second ENOSPC at every step of those rollbacks (of
    `second_faults_on` of them, when given); then `randoms` random moments per operation."""
    scn = ReleaseScenario(base)
    work = base / "work"
    tally = Tally()
    rng = random.Random(seed)
    for op in ops:
        steps = {mode: aimed_commit(scn, work, op, mode, tally) for mode in ("kill", "term", "int", "raise")}
        _progress(tally, f"{op}: every commit step ({steps['kill']}) under kill, term, int, raise")
        last = steps["kill"]
        chosen = sorted({*range(1, last + 1, rollback_every), *range(last - 2, last + 1)})
        lengths = rollback_lengths(scn, work, op, tally, chosen)
        _progress(tally, f"{op}: a kill at every step of the rollbacks of commit steps {lengths}")
        if second_faults_on is not None:
            lengths = dict(rng.sample(sorted(lengths.items()), min(second_faults_on, len(lengths))))
        for first, second in (("int", "int"), ("term", "term"), ("raise", "raise")):
            aimed_rollback(scn, work, op, first, second, tally, lengths)
            _progress(tally, f"{op}: {first}+{second} at every step of the rollbacks of commit steps {sorted(lengths)}")
        random_trials(scn, work, op, randoms, rng, tally)
        _progress(tally, f"{op}: {randoms} random moments")
    return tally


def _progress(tally: Tally, done: str) -> None:
    print(f"{sum(tally.trials.values())} trials, {len(tally.failures)} failed; done: {done}", flush=True)
    for failure in tally.failures[-3:]:
        print(f"  FAILED {failure[:300]}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--random", type=int, default=100, help="random-moment trials per operation")
    parser.add_argument("--seed", type=int, default=20)
    parser.add_argument("--random-only", action="store_true", help="skip the aimed sweep")
    parser.add_argument("--release", action="store_true", help="on the real release diff (fetches 0.15.0, 0.16.0)")
    parser.add_argument("--rollback-every", type=int, default=4, help="--release: rollbacks of every Nth commit step")
    parser.add_argument("--second-faults-on", type=int, help="--release: second faults in only N of those rollbacks")
    parser.add_argument("--op", choices=["apply", "revert"], help="--release: this operation only")
    parser.add_argument("--dir", default=fast_scratch(), help="where the trees go (default: a tmpfs when there is one)")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="crash-trials-", dir=options.dir) as base:
        started = time.monotonic()
        if options.release:
            tally = release_sweep(
                Path(base),
                options.random,
                options.seed,
                rollback_every=options.rollback_every,
                second_faults_on=options.second_faults_on,
                ops=(options.op,) if options.op else ("apply", "revert"),
            )
        else:
            tally = sweep(Path(base), options.random, options.seed, aimed=not options.random_only)
        print(tally.report())
        print(f"{time.monotonic() - started:.0f} s")
    sys.exit(1 if tally.failures else 0)


if __name__ == "__main__":
    main()
