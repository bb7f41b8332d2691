"""patchkit's speed, as ratios against a reference measured in the same run.

    python bench/bench.py [--runs N] [--quick] [--only ROW ...]

1. `patchkit apply --dry-run -q` on the real 0.32.0 -> 0.33.0 diff of every vllm/**/*.py (both
   trees fetched with patchkit's own fetcher): the plan and apply's checks on the planned contents,
   vs the standard tools doing that work in turn, `git apply --check`, then `python -m compileall
   -q -f` and `pyflakes` on the .py files the diff changes; each pair run alternately (2N+1 runs
   each), the wall time and the CPU time of the same runs (goal: <= 1.5x their sum); warm (the
   checks' verdicts remembered from an earlier run) and cold (an empty PATCHKIT_CACHE_DIR each run,
   emptied untimed). Also (`eagle3-dry-run`) the eagle3 set's dry run (`--set eagle3`) on a stock
   0.16.0 tree, cold, wall and CPU time (goal: <= 0.5 s); each row names the load average.
2. `patchkit --help` start-up vs a bare `python -c pass` (goal: <= 0.25 s).
3. `patchkit apply` of an ad-hoc diff (the eagle3 series as --patch files) on a stock 0.16.0 tree
   vs `git apply` of the same diffs (goal: <= 1 s).
4. A default `patchkit fetch 0.16.0` into an empty cache: bytes over the network vs the wheel's
   size (goal: <= 5 MB).
5. All static checks on the EAGLE-3 set (0.16.0, in-process) vs `python -m py_compile` of the
   same files (goal: <= 1 s).
6. `patchkit verify --all`, cold (empty cache) and warm, vs `pip index versions vllm`, one index
   query (goals: <= 60 s cold, <= 5 s warm). Skipped with --quick.
7. `patchkit apply` of a one-line patch to a generated 214 MB module (--large-mb) vs `git apply`
   of the same diff, alternately (up to 5 runs each, the page cache synced after each fresh copy):
   the wall and CPU time, and the peak RSS as a multiple of the file's size (goals: <= 1.5x git's
   time; peak RSS <= 4x the file).
8. The launch guard (`patchkit_guard.check()`, what vLLM runs in every process) on a stock 0.16.0
   tree with the eagle3 series applied: its import and check timed inside a fresh interpreter that
   has imported hashlib and json (as any vLLM process has), vs that interpreter's own start-up (`python -c pass`) (goal: <= 20 ms).
9. `patchkit preflight --no-import` of the seed's command shape (a Kimi-K2.5 target, an EAGLE-3
   drafter) on a real stock 0.16.0 tree vs `python -c pass` (goal: <= 2 s).
10. `patchkit run` on an applied 0.16.0 tree: the time before exec, as `run` of a launch whose `vllm`
   exits at once, minus that `vllm` run alone, the two run alternately (2N+1 runs each; the first
   `run` keeps the set's launch findings, the others take the fast path) (goal: <= 0.3 s).
11. `patchkit wheel` of a synthetic vLLM wheel (the stock 0.16.0 files the eagle3 series and its
   contract read, a --wheel-mb stored random member standing in for vLLM's 464 MB `_C.abi3.so`, a
   dist-info with a true RECORD) vs `cp` of that wheel, alternately (goal: <= 3x cp), wall and CPU.
   Its version is labelled (0.16.0+bench): every member is hashed against its RECORD on its first
   run (timed apart), sealed as true in the cache, and not hashed again while the file is unchanged.
12. `patchkit fleet apply` on a local Ray cluster of 3 nodes (a head and 2 added, each with its own
   stock 0.16.0 tree as PATCHKIT_TARGET) vs `patchkit apply` of the same series on one such tree,
   alternately (goal: <= the single apply + 2 s): cold (no agent on the nodes: each starts one)
   and warm (after a `fleet status`, whose agents stay). Beside them, Ray alone (bench/ray_floor.py:
   connect, a trivial task on each node, disconnect): the least a cold run costs, with no patchkit
   in it. Needs the `ray` extra.
13. `patchkit wheel` on the real 0.16.0 wheel (508 MB, 1,905 members: the per-member cost the
   synthetic one of row 11 hides), downloaded once into patchkit's cache with its own fetcher:
   `patchkit wheel 0.16.0` (by VERSION, the cached wheel), `patchkit wheel FILE` (that file) and
   `patchkit wheel FILE` of a copy outside the cache (its sha256 sealed by a first run, not timed)
   and `patchkit wheel FILE` of the wheel relabelled 0.16.0+corp (a build of its own: its first run
   hashes every member against its RECORD, timed apart; then sealed), each vs `cp` of the file, the
   five run in turn (goal: <= 3x cp); the load average before and after, and every run's time, go
   to stderr.
14. Start-up (`--only startup`, not in the default set): `--help`, the quiet dry run on stock 0.16.0
   (warm cache; of every covering set, and of `--set eagle3` alone: the same work on a library of
   one set) and `run`'s fast path, of the code at each --before commit (default f10f406,
   main before issue 21's restructuring) and of this checkout in turn (2N+1 runs each, every code
   compiled), as this / that ratios of wall and CPU time with the CPU time's quartiles (goal: not
   slower); for the dry run and the fast path, each split in one process into the CPU time of its
   imports and of the work after them.

15. The target's question (`--only locate`): patchkit/_target/locate.py, what every --python command (and a launch
   whose start-up may set a pycache prefix) runs in the target's interpreter, on a plain site of vllm/ and its
   dist-info, this checkout's vs the --before-locate commit's (default d2f9245: before the plain lookup), in turn
   (2N+1 runs each), beside `python -c pass` of the same interpreter (goal: not slower).
16. A hostile record (`--only large-record`): `status -q` and the guard's verdict (in a fresh
   interpreter) on an applied 0.16.0 tree whose state.json names --record-files (default 2,000) and
   then four times as many created files more, each absent, vs the same tree as applied: the extra
   cost at 4x over the extra cost at 1x (goal: linear, about 4x; work that is the product of the
   recorded files and the guard's problems would be 16x).
17. A deep record (`--only deep-record`): `status -q` and the guard's verdict on an applied 0.16.0 tree whose
   state.json names --deep-files (default 1,000) created files more, each in its own chain of existing
   directories as deep as a record may be (31), vs the same files two directories deep (goal: linear in the
   directories, at most their ratio; resolving every directory on the way for each was its cube).
18. Planted links (`--only planted`): `status -q` and the guard's verdict on an applied 0.16.0 tree whose
   state.json names --planted-files (default 300) created files more, reached through a planted symlink into a
   directory 1,000 levels deep, or hard links to one 32 MB file, vs the same count absent in a real directory
   (goal: a few times the reference at most; review36 N14-b and N14-c: 60-300x).
19. Planted bytecode (`--only planted-pyc`): `status -q` on an applied 0.16.0 tree with --pyc-files (default 3,000)
   modules more, vllm/zz/xN.py, each with a __pycache__ .pyc that is a symlink through a chain of 11 planted links
   into a directory 1,000 levels deep, the modules unrecorded and recorded, vs the same tree with those .pyc regular
   files (goal: a few times the reference at most; session 29: 13 s of status's 18 s followed every link).

--only picks rows by name: dry-run (1), eagle3-dry-run (1), help (2), apply (3), sets-apply (3), fetch (4), checks (5), verify (6),
large-file (7), guard (8), preflight (9), run (10), wheel (11), fleet (12), real-wheel (13),
large-record (16), deep-record (17), planted (18), planted-pyc (19), startup (14), locate (15).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import itertools
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from packaging.version import Version  # noqa: E402

from patchkit.base.fsutil import MAX_RECORDED_DEPTH  # noqa: E402
from patchkit.fetch import release_tree  # noqa: E402
from patchkit.releases.files import files_for, lay_out  # noqa: E402
from patchkit.series.library import load_set, select  # noqa: E402

# What users run: the console script pip installed beside this interpreter (else `python -m`).
_SCRIPT = Path(sys.executable).with_name("patchkit")
PATCHKIT = [str(_SCRIPT)] if _SCRIPT.is_file() else [sys.executable, "-m", "patchkit"]


def run_once(cmd: list[str], cwd: Path | None = None, output: Path | None = None) -> float:
    """Wall time of one successful run; its stdout and stderr piped back, or written to `output`."""
    if output is None:
        start = time.perf_counter()
        done = subprocess.run(cmd, cwd=cwd, capture_output=True)
        took = time.perf_counter() - start
        errors = done.stderr
    else:
        with output.open("wb") as sink:
            start = time.perf_counter()
            done = subprocess.run(cmd, cwd=cwd, stdout=sink, stderr=sink)
            took = time.perf_counter() - start
        errors = output.read_bytes()
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, cmd))} failed: {errors.decode()[-500:]}")
    return took


def timed(cmd: list[str], runs: int, cwd: Path | None = None, between=None, before=None) -> float:
    """Median wall time of `runs` runs; `before` prepares each run and `between` restores state
    after it, both untimed."""
    times = []
    for _ in range(runs):
        if before:
            before()
        times.append(run_once(cmd, cwd))
        if between:
            between()
    return statistics.median(times)


def measured_pair(
    ours: list[str], reference: list[str], runs: int, cwd: Path | None = None, before=None
) -> tuple[float, float, float, float]:
    """Medians of the wall and the CPU time (user + system) of each command over `runs` runs, the
    two run alternately, so that both see the same machine: on a shared machine the speed drifts by
    tens of percent within a minute, and on a loaded one the wall time is partly waiting for a core
    (the CPU time much less so). `before` runs untimed before each run of ours (an empty cache).
    Returns ours' wall, the reference's wall, ours' CPU, the reference's CPU."""
    pairs = []
    for _ in range(runs):
        reference_took = cpu_and_wall(reference, cwd)
        if before:
            before()
        pairs.append((cpu_and_wall(ours, cwd), reference_took))
    return (
        statistics.median(o[1] for o, _ in pairs),
        statistics.median(r[1] for _, r in pairs),
        statistics.median(o[0] for o, _ in pairs),
        statistics.median(r[0] for _, r in pairs),
    )


def cpu_and_wall(cmd: list[str], cwd: Path | None) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = run_once(cmd, cwd)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, wall


def release_diff(old: Path, new: Path, work: Path) -> Path:
    shutil.copytree(old / "vllm", work / "a" / "vllm")
    shutil.copytree(new / "vllm", work / "b" / "vllm")
    done = subprocess.run(
        ["git", "diff", "--no-index", "--no-renames", "--no-prefix", "--no-color", "a", "b"],
        cwd=work,
        capture_output=True,
    )
    out = work / "release.diff"
    out.write_bytes(done.stdout)
    return out


def row(name: str, ours: float, reference: float, ref_name: str, goal: str) -> str:
    return f"| {name} | {ours:.3f} s | {ref_name} {reference:.3f} s | {ours / reference:.1f}x | {goal} |"


def fetch_row(work: Path) -> str:
    """A default fetch into an empty cache, in a subprocess so that nothing is cached in memory."""
    code = (
        "import json, patchkit.fetch as f; from patchkit.releases.files import files_for; "
        "f.release_tree('0.16.0', files_for('0.16.0')); s = f.last_fetch_stats; "
        "print(json.dumps([s.bytes, s.requests, s.seconds]))"
    )
    env = {**os.environ, "PATCHKIT_CACHE_DIR": str(work / "cold-cache")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True, cwd=REPO)
    nbytes, request_count, seconds = json.loads(done.stdout.strip().splitlines()[-1])
    import requests

    url = json.loads((work / "cold-cache/releases/0.16.0/release.json").read_text())["url"]
    wheel = int(requests.head(url, allow_redirects=True, timeout=30).headers["Content-Length"])
    wheel_text = f"whole wheel {wheel / 1e6:.0f} MB"
    ratio = f"{nbytes / wheel * 100:.2f}%"
    return (
        f"| fetch 0.16.0, default files, empty cache ({request_count} requests, {seconds:.1f} s) | "
        f"{nbytes / 1e6:.2f} MB | {wheel_text} | {ratio} | ≤ 5 MB |"
    )


def static_checks_row(stock: Path, runs: int) -> str:
    """syntax, names, contract (and integrity) on the planned 0.16.0 result, in-process."""
    from patchkit.base.options import Options
    from patchkit.checks.integrity import CHECK as INTEGRITY
    from patchkit.checks.registry import run_checks
    from patchkit.engine.inspection import check_context
    from patchkit.engine.resolve import resolve

    resolved = resolve(Options(target_dir=str(stock)))
    from patchkit.series.plan import plan_apply

    plan = plan_apply(resolved.target.root, resolved.patches)
    ctx = check_context(resolved, plan, import_probe=False)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        results = INTEGRITY.run(ctx) + run_checks(ctx)
        times.append(time.perf_counter() - start)
    assert not [r for r in results if r.failed], results
    files = [str(stock / p) for p in plan.touched_paths]
    reference = timed([sys.executable, "-m", "py_compile", *files], runs)
    checks = sorted({r.check for r in results})
    return row(
        f"static checks on the eagle3 0.16.0 result ({', '.join(checks)})",
        statistics.median(times),
        reference,
        "python -m py_compile",
        "≤ 1 s",
    )


def every_set(work: Path) -> Path:
    """A library of every set the checkout holds (patches/), with library.toml's order when there is one."""
    root = work / "every-set"
    root.mkdir()
    for manifest in sorted((REPO / "patches").glob("*/set.toml")):
        shutil.copytree(manifest.parent, root / manifest.parent.name, ignore=shutil.ignore_patterns("__pycache__"))
    if (REPO / "patches" / "library.toml").is_file():
        shutil.copy(REPO / "patches" / "library.toml", root / "library.toml")
    return root


def verify_all_rows(work: Path) -> list[str]:
    """verify --all of every set (the behaviour tests included), cold (empty cache) and warm: wall
    and CPU time (user + system of patchkit and its children) and the load average."""
    env = {**os.environ, "PATCHKIT_CACHE_DIR": str(work / "verify-cache")}
    library = every_set(work)
    sets = len(list(library.glob("*/set.toml")))
    reference = timed([sys.executable, "-m", "pip", "index", "versions", "vllm"], 1)
    rows = []
    for label, goal in (("cold", "≤ 60 s"), ("warm", "≤ 5 s")):
        load = os.getloadavg()[0]
        before = os.times()
        start = time.perf_counter()
        command = [*PATCHKIT, "verify", "--all", "-q", "--no-import", "--patches", str(library)]
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        took = time.perf_counter() - start
        after = os.times()
        cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
        if done.returncode != 0:
            raise SystemExit(f"verify --all failed: {done.stderr[-800:]}")
        name = f"verify --all of {sets} sets, {label} cache (CPU {cpu:.1f} s; load {load:.1f})"
        rows.append(row(name, took, reference, "pip index versions vllm", goal))
    return rows


def dry_run_rows(work: Path, runs: int) -> list[str]:
    """The dry run of the real release diff, which places every hunk and runs apply's checks on the
    planned contents (syntax, names, ...), vs the standard tools doing that work in turn: `git apply
    --check`, then `python -m compileall -q -f` (-f: compiled again each run, as the dry run does)
    and `pyflakes` on the Python files the diff changes, as 0.33.0 has them."""
    old = release_tree("0.32.0", all_python=True)
    new = release_tree("0.33.0", all_python=True)
    diff = release_diff(old, new, work)
    raw = diff.read_bytes()
    files = raw.count(b"\ndiff --git ") + 1
    hunks = sum(1 for line in raw.split(b"\n") if line.startswith(b"@@ "))
    site = work / "site-0.32.0"
    lay_out(old, str(site))
    what = f"0.32.0→0.33.0 ({diff.stat().st_size / 1e6:.1f} MB, {files} files, {hunks} hunks)"
    changed = changed_python(work / "a", work / "b")
    listed = work / "changed.txt"
    listed.write_text("".join(f"{path}\n" for path in changed))
    tools = (
        f"git apply --check {diff} && "
        f"xargs -a {listed} {sys.executable} -m compileall -q -f >/dev/null; "
        f"xargs -a {listed} {sys.executable} -m pyflakes >/dev/null; true"
    )
    reference = ["sh", "-c", tools]
    named = f"git apply --check + compileall + pyflakes ({len(changed)} .py)"
    quiet = [*PATCHKIT, "apply", "--dry-run", "--target", str(site), "--patch", str(diff), "-q"]
    load = os.getloadavg()[0]
    wall, tools_wall, cpu, tools_cpu = measured_pair(quiet, reference, runs * 2 + 1, cwd=site)
    rows = [
        row(f"apply --dry-run -q (plan + checks), warm, {what}; load {load:.1f}", wall, tools_wall, named, "≤ 1.5x"),
        row("the same, warm, CPU time (user + system)", cpu, tools_cpu, named, "≤ 1.5x"),
    ]
    # Warm, the checks' verdicts are remembered across runs (base/remembered.py, the pyflakes
    # cache): every run after the first takes them from the cache. Cold: none remembered, as the
    # reference remembers none: each run of ours gets a new, empty PATCHKIT_CACHE_DIR, emptied
    # before the run, untimed (both sides: files in the page cache, their code's bytecode compiled).
    cold = work / "cold-verdicts"
    fresh = ["env", f"PATCHKIT_CACHE_DIR={cold}", *quiet]
    load = os.getloadavg()[0]
    wall, tools_wall, cpu, tools_cpu = measured_pair(
        fresh, reference, runs * 2 + 1, cwd=site, before=lambda: shutil.rmtree(cold, ignore_errors=True)
    )
    rows.append(row(f"the same, cold (an empty cache each run); load {load:.1f}", wall, tools_wall, named, "≤ 1.5x"))
    rows.append(row("the same, cold, CPU time (user + system)", cpu, tools_cpu, named, "≤ 1.5x"))
    return rows


def changed_python(before: Path, after: Path) -> list[str]:
    """The .py files of `after` that are new or differ from `before`'s (what a diff's checks read)."""
    changed = []
    for path in sorted(after.rglob("*.py")):
        rel = path.relative_to(after)
        old = before / rel
        if not old.is_file() or old.read_bytes() != path.read_bytes():
            changed.append(str(path))
    return changed


def eagle3_dry_run_rows(work: Path, runs: int) -> list[str]:
    """The eagle3 set's dry run (plan and checks) on a stock 0.16.0 tree, vs `python -c pass`, run
    alternately: the wall and the CPU time. `--set eagle3`: the goal is that set's; without it the
    dry run plans and checks every set covering 0.16.0 (three)."""
    site = stock_0_16(work)
    cold = work / "cold-verdicts-eagle3"
    dry_run = ["env", f"PATCHKIT_CACHE_DIR={cold}", *PATCHKIT, "apply", "--dry-run", "-q", "--set", "eagle3"]
    load = os.getloadavg()[0]
    # an empty cache each run (no verdict remembered), emptied untimed
    wall, bare_wall, cpu, bare_cpu = measured_pair(
        [*dry_run, "--target", str(site)],
        [sys.executable, "-c", "pass"],
        runs * 2 + 1,
        before=lambda: shutil.rmtree(cold, ignore_errors=True),
    )
    label = "apply --dry-run -q --set eagle3 on stock 0.16.0 (plan + checks, empty cache)"
    return [
        row(f"{label}; load {load:.1f}", wall, bare_wall, "python -c pass", "≤ 0.5 s"),
        row("the same, CPU time (user + system)", cpu, bare_cpu, "python -c pass", "≤ 0.5 s"),
    ]


def help_row(runs: int) -> str:
    bare = timed([sys.executable, "-c", "pass"], runs * 2)
    helped = timed([*PATCHKIT, "--help"], runs * 2)
    return row("patchkit --help", helped, bare, "python -c pass", "≤ 0.25 s")


def stock_0_16(work: Path) -> Path:
    """A stock 0.16.0 site, laid out once and copied from for every run that writes."""
    pristine = work / "pristine-0.16.0"
    if not pristine.exists():
        lay_out(release_tree("0.16.0", files_for("0.16.0")), str(pristine))
    return pristine


def apply_row(work: Path, runs: int) -> str:
    pristine = stock_0_16(work)
    stock = work / "site-0.16.0"
    shutil.copytree(pristine, stock)
    series = sorted((REPO / "patches/eagle3/0.16.0").glob("*.patch"))
    patch_args = [a for p in series for a in ("--patch", str(p))]

    def restore():
        shutil.rmtree(stock)
        shutil.copytree(pristine, stock)

    ours = timed([*PATCHKIT, "apply", "-q", "--target", str(stock), *patch_args], runs, between=restore)
    git = timed(["git", "apply", *map(str, series)], runs, cwd=stock, between=restore)
    return row("apply, eagle3 series as --patch on stock 0.16.0", ours, git, "git apply", "≤ 1 s")


TOOL_CALL_SETS = ("deepseek-tool-calls", "kimi-k2-tool-calls")


def sets_apply_row(work: Path, runs: int) -> str:
    """apply without --set: every set covering stock 0.16.0 (eagle3 and both tool-call sets)."""
    library = REPO / "patches"  # the library patchkit ships: eagle3 first (its library.toml)
    names = ["eagle3", *TOOL_CALL_SETS]
    paths = sorted({p for name in names for p in files_for("0.16.0", str(library), name)})
    pristine = work / "pristine-every-set"
    if not pristine.exists():
        lay_out(release_tree("0.16.0", paths), str(pristine), paths)
    stock = work / "site-every-set"
    shutil.copytree(pristine, stock)
    series = [p for name in names for p in _series_files(library / name, "0.16.0")]

    def restore():
        shutil.rmtree(stock)
        shutil.copytree(pristine, stock)

    ours = timed([*PATCHKIT, "apply", "-q", "--target", str(stock), "--patches", str(library)], runs, between=restore)
    git = timed(["git", "apply", *map(str, series)], runs, cwd=stock, between=restore)
    return row(
        f"apply, every covering set on stock 0.16.0 ({len(names)} sets, {len(series)} patches)",
        ours,
        git,
        "git apply",
        "≤ 0.6 s",
    )


def _series_files(set_dir: Path, version: str) -> list[Path]:
    """The patch files of the set's series for `version`, in order (as the library reads them)."""
    selection = select(load_set(set_dir), Version(version))
    return [p.path for p in selection.patches if p.path is not None]


# The guard as vLLM calls it, timed from inside the interpreter: import and check, nothing else. A
# vLLM process has imported hashlib and json long before its plugins load (torch alone does), so
# they are imported first: cold, they cost this machine 20-30 ms, which no vLLM process pays again.
GUARD_TIMED = """
import hashlib, json, sys, time
start = time.perf_counter()
sys.path.insert(0, sys.argv[1])
import patchkit_guard
patchkit_guard.check()
print(time.perf_counter() - start)
"""


def guard_row(work: Path, runs: int) -> str:
    site = work / "site-guarded"
    shutil.copytree(stock_0_16(work), site)
    series = sorted((REPO / "patches/eagle3/0.16.0").glob("*.patch"))
    run_once(
        [
            *PATCHKIT,
            "apply",
            "-q",
            "--no-import",
            "--target",
            str(site),
            *(a for p in series for a in ("--patch", str(p))),
        ]
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as site-packages: compiled once
    guard = [sys.executable, "-c", GUARD_TIMED, str(site)]
    checks = [
        float(subprocess.run(guard, capture_output=True, text=True, env=env, check=True).stdout)
        for _ in range(runs * 2)
    ]
    bare = timed([sys.executable, "-c", "pass"], runs * 2)
    return row(
        "guard: import + check in a vLLM process, eagle3 on 0.16.0",
        statistics.median(checks),
        bare,
        "python -c pass",
        "≤ 20 ms",
    )


# The guard's verdict on a site, timed inside a fresh interpreter (as GUARD_TIMED; find_problems: the
# record refused here is refused, not passed).
GUARD_JUDGED = """
import hashlib, json, sys, time
start = time.perf_counter()
sys.path.insert(0, sys.argv[1])
import patchkit_guard
patchkit_guard.find_problems(sys.argv[1])
print(time.perf_counter() - start)
"""


def applied_0_16(work: Path, name: str) -> Path:
    """A stock 0.16.0 site at work/name with the default set applied (no import check)."""
    base = work / name
    shutil.copytree(stock_0_16(work), base)
    run_once([*PATCHKIT, "apply", "-q", "--no-import", "--target", str(base)])
    return base


def recording_more(base: Path, site: Path, paths: list[str]) -> Path:
    """A copy of the applied `base` at `site` whose record names `paths` created files more (after
    bytes no file has): the file system's side of them is the caller's."""
    shutil.copytree(base, site, symlinks=True)
    state = site / ".patchkit" / "state.json"
    data = json.loads(state.read_text())
    data["entries"][0]["files"].update({p: {"after": "ab" * 32, "before": None, "mode": 0o644} for p in paths})
    state.write_text(json.dumps(data))
    return site


def status_and_guard(sites: dict, runs: int) -> tuple[dict, dict]:
    """Median seconds of `status -q` and of the guard's verdict on each site, by the sites' keys."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    status, guard = {}, {}
    for key, site in sites.items():
        status[key] = statistics.median(_status_took(site) for _ in range(runs))
        judged = [sys.executable, "-c", GUARD_JUDGED, str(site)]
        guard[key] = statistics.median(
            float(subprocess.run(judged, capture_output=True, text=True, env=env, check=True).stdout)
            for _ in range(runs)
        )
    return status, guard


def large_record_rows(work: Path, runs: int, files: int) -> list[str]:
    """`status -q` and the guard on an applied 0.16.0 tree whose record names `files` and then 4x
    `files` created files more (absent: each refused), against the same tree as applied (the
    reference). Linear work makes the extra cost at 4x four times the extra cost at 1x; the work
    of a product of the files with the guard's problems, sixteen times."""
    base = applied_0_16(work, "record-0")
    sites = {0: base}
    for count in (files, files * 4):
        sites[count] = recording_more(base, work / f"record-{count}", [f"vllm/zz/x{i}.py" for i in range(count)])
    status, guard = status_and_guard(sites, runs)
    rows = []
    for name, took in (("status -q", status), ("the guard's verdict", guard)):
        small, large = took[files] - took[0], took[files * 4] - took[0]
        rows.append(
            f"| {name}, applied 0.16.0 whose record names {files:,} / {files * 4:,} created files more | "
            f"{took[files]:.3f} s / {took[files * 4]:.3f} s | as applied {took[0]:.3f} s | "
            f"the extra cost at 4x: {large / small:.1f}x the extra at 1x | linear: ≈ 4x (a product: 16x) |"
        )
    return rows


def deep_record_rows(work: Path, runs: int, files: int) -> list[str]:
    """`status -q` and the guard on an applied 0.16.0 tree whose record names `files` created files
    more, each at the end of its own chain of existing directories: two deep (vllm/cN/xN.py, the
    reference) and as deep as a record may be (store.state's MAX_RECORDED_DEPTH, 31 directories).
    Each directory looked at once makes the deep cost about the directories' ratio (15x) of the
    reference's at most; realpath of every directory on the way (review35 N14), its square and more."""
    base = applied_0_16(work, "deep-0")
    sites = {}
    for depth in (2, MAX_RECORDED_DEPTH - 1):
        chains = [f"vllm/c{i}/" + "d/" * (depth - 2) for i in range(files)]
        site = sites[depth] = recording_more(
            base, work / f"deep-{depth}", [f"{c}x{i}.py" for i, c in enumerate(chains)]
        )
        for chain in chains:
            (site / chain).mkdir(parents=True)
    status, guard = status_and_guard(sites, runs)
    deep, shallow = MAX_RECORDED_DEPTH - 1, 2
    return [
        f"| {name}, applied 0.16.0 whose record names {files:,} created files more, each in its own chain of "
        f"{deep} directories | {took[deep]:.3f} s | the same, {shallow} directories deep: {took[shallow]:.3f} s | "
        f"{took[deep] / took[shallow]:.1f}x | linear in the directories: ≤ {deep / shallow:.1f}x (their ratio) |"
        for name, took in (("status -q", status), ("the guard's verdict", guard))
    ]


def symlink_maze(top: Path) -> Path:
    """A directory 1,000 levels below `top` whose links a and b lead to itself again: any path of a/b parts
    under it exists, as deep as wanted."""
    deep = top
    deep.mkdir()
    for _ in range(1000):  # one at a time: mkdir(parents=True) recurses once a level
        deep = deep / "x"
        deep.mkdir()
    for name in "ab":
        (deep / name).symlink_to(deep)
    return deep


def planted_rows(work: Path, runs: int, files: int) -> list[str]:
    """`status -q` and the guard on an applied 0.16.0 tree whose record names `files` created files more
    (review36 N14-b, N14-c): reached through a planted symlink into a directory 1,000 levels deep (a and
    b in it lead there again: vllm/s/a/b/.../xN.py, 29 parts), and hard links to one 32 MB file; the
    reference: the same count of files in one real directory, absent. Goal: about the reference (each
    symlink expanded was 0.1-0.35 s a file; each link hashed again, its whole size)."""
    base = applied_0_16(work, "planted-0")
    deep = symlink_maze(work / "planted-deep")
    rng, sites = random.Random(1), {}
    for shape in ("reference", "symlinked", "hard-linked"):
        paths = [f"vllm/zz/x{i}.py" for i in range(files)]
        if shape == "symlinked":
            paths = [f"vllm/s/{'/'.join(rng.choice('ab') for _ in range(26))}/x{i}.py" for i in range(files)]
        site = sites[shape] = recording_more(base, work / f"planted-{shape}", paths)
        (site / "vllm/zz").mkdir()
        if shape == "symlinked":
            (site / "vllm/s").symlink_to(deep)
        if shape == "hard-linked":
            (site / paths[0]).write_bytes(os.urandom(32 << 20))
            for rel in paths[1:]:
                os.link(site / paths[0], site / rel)
    status, guard = status_and_guard(sites, runs)
    subprocess.run(["rm", "-rf", str(work / "planted-deep")], check=True)  # shutil.rmtree recurses a level
    return [
        f"| {name}, applied 0.16.0 whose record names {files:,} created files more, {shape} | {took[shape]:.3f} s "
        f"| the same count in a real directory, absent: {took['reference']:.3f} s "
        f"| {took[shape] / took['reference']:.1f}x | a few times the reference at most |"
        for shape in ("symlinked", "hard-linked")
        for name, took in (("status -q", status), ("the guard's verdict", guard))
    ]


def planted_pyc_rows(work: Path, runs: int, files: int) -> list[str]:
    """`status -q` on an applied 0.16.0 tree with `files` modules more (vllm/zz/xN.py) whose bytecode is
    a symlink through 11 planted links into a directory 1,000 levels deep (gate29's shape), the modules
    unrecorded (status's own scan for a .pyc the import hangs on) and recorded (the guard refuses them);
    the reference: the same modules (as recorded) with regular .pyc files. Goal: a few times the reference at most."""
    base = applied_0_16(work, "pyc-0")
    deep = symlink_maze(work / "pyc-deep")
    (deep / "real.pyc").write_bytes(b"\0" * 16)
    rng, sites = random.Random(1), {}
    for shape, linked in itertools.product(("unrecorded", "recorded"), (False, True)):
        paths = [f"vllm/zz/x{i}.py" for i in range(files)]
        site = sites[shape, linked] = recording_more(
            base, work / f"pyc-{shape}-{linked}", paths if shape == "recorded" else []
        )
        (site / "vllm/zz/__pycache__").mkdir(parents=True)
        for rel in paths:
            (site / rel).write_text("X = 1\n")
            pyc = site / "vllm/zz/__pycache__" / f"{Path(rel).stem}.{sys.implementation.cache_tag}.pyc"
            if not linked:
                pyc.write_bytes(b"\0" * 16)
            else:
                pyc.symlink_to(deep / "/".join(rng.choice("ab") for _ in range(11)) / "real.pyc")
        state = site / ".patchkit" / "state.json"  # the modules as recorded: the guard refuses only their .pyc
        state.write_text(state.read_text().replace("ab" * 32, hashlib.sha256(b"X = 1\n").hexdigest()))
    status = {shape: statistics.median(_status_took(site) for _ in range(runs)) for shape, site in sites.items()}
    subprocess.run(["rm", "-rf", str(work / "pyc-deep")], check=True)  # shutil.rmtree recurses a level
    return [
        f"| `status -q`, applied 0.16.0 with {files:,} modules more whose .pyc are planted symlinks, {shape} "
        f"| {status[shape, True]:.3f} s | the same with regular .pyc: {status[shape, False]:.3f} s "
        f"| {status[shape, True] / status[shape, False]:.1f}x | a few times the reference at most |"
        for shape in ("unrecorded", "recorded")
    ]


def _status_took(site: Path) -> float:
    """Wall time of `status -q` on a tree (exit 0, or 1 where the guard refuses it)."""
    start = time.perf_counter()
    done = subprocess.run([*PATCHKIT, "status", "-q", "--target", str(site)], capture_output=True)
    took = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"status exited {done.returncode}: {done.stderr.decode()[-500:]}")
    return took


# Runs a command as its own child and prints its wall time, CPU time (user + system) and peak RSS
# (bytes) as JSON.
PEAK_RSS = """
import json, resource, subprocess, sys, time
start = time.perf_counter()
done = subprocess.run(sys.argv[1:], capture_output=True)
took = time.perf_counter() - start
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"code": done.returncode, "seconds": took, "cpu": usage.ru_utime + usage.ru_stime,
                  "peak": usage.ru_maxrss * 1024, "err": done.stderr.decode()[-500:]}))
"""


def time_and_peak(cmd: list[str], cwd: Path | None = None) -> tuple[float, float, int]:
    """Wall time, CPU time and peak RSS of one successful run."""
    done = subprocess.run([sys.executable, "-c", PEAK_RSS, *cmd], cwd=cwd, capture_output=True, check=True)
    answer = json.loads(done.stdout)
    if answer["code"] != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {answer['err']}")
    return answer["seconds"], answer["cpu"], answer["peak"]


def large_module(path: Path, megabytes: int) -> tuple[bytes, int]:
    """A module of numbered assignments about `megabytes` MB, and a one-line diff that adds a line
    in its middle (three lines of context each side), written by hand: git diff is not measured."""
    line = b"value_%08d = %d  # a generated table, one entry a line\n"
    count = megabytes * 1_000_000 // len(line % (10**7, 10**7))
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as out:
        for start in range(0, count, 100_000):
            out.write(b"".join(line % (i, i) for i in range(start, min(start + 100_000, count))))
    middle = count // 2
    context = [b" " + line % (i, i) for i in range(middle - 3, middle + 3)]
    body = b"".join(context[:3]) + b"+EXTRA = 'one more line'\n" + b"".join(context[3:])
    header = b"@@ -%d,6 +%d,7 @@\n" % (middle - 2, middle - 2)
    diff = b"--- a/vllm/table.py\n+++ b/vllm/table.py\n" + header + body
    return diff, path.stat().st_size


def large_file_row(work: Path, runs: int, megabytes: int) -> str:
    pristine = work / "large-pristine"
    (pristine / "vllm").mkdir(parents=True)
    (pristine / "vllm" / "__init__.py").write_text("")
    (pristine / "vllm-0.16.0.dist-info").mkdir()
    (pristine / "vllm-0.16.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.16.0\n")
    diff, size = large_module(pristine / "vllm" / "table.py", megabytes)
    patch = work / "one-line.diff"
    patch.write_bytes(diff)
    site = work / "large-site"
    commands = {
        "patchkit": ([*PATCHKIT, "apply", "-q", "--no-import", "--target", str(site), "--patch", str(patch)], None),
        "git": (["git", "apply", str(patch)], site),
    }
    measured: dict[str, list[tuple[float, float, int]]] = {name: [] for name in commands}
    for _ in range(max(1, min(runs, 5))):  # each run copies the file twice; the two alternate
        for name, (cmd, cwd) in commands.items():
            shutil.rmtree(site, ignore_errors=True)
            shutil.copytree(pristine, site)
            os.sync()  # the copy's writeback is not charged to the run measured next
            measured[name].append(time_and_peak(cmd, cwd))
    ours_s, ours_cpu = (statistics.median(run[i] for run in measured["patchkit"]) for i in (0, 1))
    git_s, git_cpu = (statistics.median(run[i] for run in measured["git"]) for i in (0, 1))
    peak = max(run[2] for run in measured["patchkit"])
    return (
        f"| apply, a one-line patch to a {size / 1e6:.0f} MB file | {ours_s:.3f} s (CPU {ours_cpu:.2f} s), "
        f"peak RSS {peak / 1e6:.0f} MB = {peak / size:.1f}x the file | git apply {git_s:.3f} s (CPU {git_cpu:.2f} s) "
        f"| {ours_s / git_s:.1f}x (CPU {ours_cpu / git_cpu:.1f}x) | ≤ 1.5x git; RSS ≤ 4x |"
    )


LAUNCH_FILES = ("vllm/model_executor/models/registry.py",)
KIMI_LIKE = {
    "architectures": ["KimiK25ForConditionalGeneration"],
    "model_type": "kimi_k25",
    "media_placeholder_token_id": 163605,
    "text_config": {"model_type": "kimi_k2", "hidden_size": 7168, "num_hidden_layers": 61, "vocab_size": 163840},
}
DRAFTER_LIKE = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 7168, "vocab_size": 163840}


def launch_setup(work: Path) -> tuple[Path, list[str]]:
    """A stock 0.16.0 site with the files the launch checks read, and a seed-shaped launch command."""
    site = work / "launch-0.16.0"
    lay_out(release_tree("0.16.0", sorted({*files_for("0.16.0"), *LAUNCH_FILES})), str(site))
    for name, config in (("kimi", KIMI_LIKE), ("drafter", DRAFTER_LIKE)):
        (work / name).mkdir()
        (work / name / "config.json").write_text(json.dumps(config))
        # a weight file (a safetensors header of no tensors) and a tokenizer file: the preflight finds
        # the weights vLLM loads and the tokenizer it reads at start, or refuses the launch
        (work / name / "model.safetensors").write_bytes((2).to_bytes(8, "little") + b"{}")
        (work / name / "tokenizer_config.json").write_text("{}")
    spec = json.dumps({"method": "eagle3", "model": str(work / "drafter"), "num_speculative_tokens": 5})
    return site, ["vllm", "serve", str(work / "kimi"), "--trust-remote-code", "--speculative-config", spec]


def preflight_row(work: Path, runs: int) -> str:
    site, command = launch_setup(work)
    preflight = [*PATCHKIT, "preflight", "--no-import", "--target", str(site), "--", *command]
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(preflight, capture_output=True)
        times.append(time.perf_counter() - start)
        if done.returncode != 1:  # stock: the faults are found
            raise SystemExit(f"preflight on stock 0.16.0 exited {done.returncode}: {done.stderr.decode()[-500:]}")
    bare = timed([sys.executable, "-c", "pass"], runs)
    return row(
        "preflight --no-import, seed-shaped launch, stock 0.16.0",
        statistics.median(times),
        bare,
        "python -c pass",
        "≤ 2 s",
    )


def run_row(work: Path, runs: int) -> str:
    site, command = launch_setup(work)
    run_once([*PATCHKIT, "apply", "-q", "--no-import", "--target", str(site)])
    bin_dir = work / "bin"
    bin_dir.mkdir()
    (bin_dir / "vllm").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "vllm").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    launched = [*PATCHKIT, "run", "--target", str(site), "--", *command]
    # alternately, as the dry runs: the first run keeps the set's findings, the others find them kept
    pairs = [(_timed_env(command, env), _timed_env(launched, env)) for _ in range(runs * 2 + 1)]
    (alone, alone_cpu), (ours, ours_cpu) = (
        (statistics.median(t for t, _ in times), statistics.median(c for _, c in times))
        for times in zip(*pairs, strict=True)
    )
    # The CPU time besides: on a shared machine the wall time is mostly waiting for a core.
    name = f"run: overhead before exec, applied 0.16.0 (CPU {ours_cpu - alone_cpu:.3f} s)"
    return row(name, ours - alone, alone, "the launch alone", "≤ 0.3 s")


def _timed_env(cmd: list[str], env: dict, cwd: Path | None = None) -> tuple[float, float]:
    """Wall time and CPU time (user + system, the command and what it ran) of one run."""

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, capture_output=True, env=env, check=True, cwd=cwd)
    took = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return took, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


# Start-up (issue 21): the code at commits before (or during) the restructuring and this checkout,
# each run as `python -m patchkit` from its own source tree (PYTHONPATH, a neutral working
# directory) with its own cache, in turn, so that all see the same machine. CPU time is steadier.
HELP, DRY_RUN, DRY_RUN_ONE, FAST_PATH = (
    "--help",
    "apply --dry-run -q (every covering set, stock 0.16.0, warm cache)",
    "apply --dry-run -q --set eagle3 (stock 0.16.0, warm cache)",
    "run's fast path (time to exec)",
)


def startup_rows(work: Path, runs: int, revisions: list[str]) -> list[str]:
    """`--help`, the quiet eagle3 dry run (warm) and `run`'s fast path: this checkout / each revision."""
    site, command = launch_setup(work / "launch")
    bin_dir = work / "bin"
    bin_dir.mkdir()
    (bin_dir / "vllm").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "vllm").chmod(0o755)
    sources = {_short(rev): _source_of(rev, work / f"src-{rev}") for rev in revisions}
    sides = {name: _startup_side(work, name, source, site, command, bin_dir) for name, source in sources.items()}
    # compiled as the others are: with PYTHONDONTWRITEBYTECODE set, a checkout never compiled runs ~2x slower
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "patchkit")], check=True)
    sides["this checkout"] = _startup_side(work, "this", REPO, site, command, bin_dir)
    load = os.getloadavg()[0]
    rows = []
    for label in (HELP, DRY_RUN, DRY_RUN_ONE, FAST_PATH):
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
        for _ in range(runs * 2 + 1):
            for name, (commands, env) in sides.items():
                times[name].append(_timed_env(commands[label], env, cwd=work))
        wall = {n: statistics.median(t for t, _ in times[n]) for n in sides}
        cpu = {n: statistics.median(c for _, c in times[n]) for n in sides}
        ours = "this checkout"
        for name in sources:
            rows.append(
                f"| start-up, {label}: this checkout vs {name} (load {load:.1f}, {runs * 2 + 1} runs each, in turn) "
                f"| {wall[ours]:.3f} s (CPU {cpu[ours]:.3f} s, {_spread(times[ours])}) "
                f"| {name}: {wall[name]:.3f} s (CPU {cpu[name]:.3f} s, {_spread(times[name])}) "
                f"| {wall[ours] / wall[name]:.2f}x (CPU {cpu[ours] / cpu[name]:.2f}x) | ≤ 1x (not slower) |"
            )
        if label in (DRY_RUN, FAST_PATH):
            rows.extend(_split_rows(label, sides, runs, work))
    return rows


def locate_rows(work: Path, runs: int, revisions: list[str]) -> list[str]:
    """_target/locate.py on a plain site: this checkout's / each revision's, and `python -c pass`."""
    site = work / "site"
    (site / "vllm").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("")
    (site / "vllm-0.16.0.dist-info").mkdir()
    (site / "vllm-0.16.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.16.0\n")
    env = {**os.environ, "PYTHONPATH": str(site)}
    sides = {_short(rev): _source_of(rev, work / f"src-{rev}") / LOCATE for rev in revisions}
    sides["this checkout"] = REPO / LOCATE
    request = json.dumps({"package": "vllm"})
    commands = {name: [sys.executable, "-B", str(path), str(work / "answer.json")] for name, path in sides.items()}
    commands["python -c pass"] = [sys.executable, "-B", "-c", "pass"]
    load = os.getloadavg()[0]
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for _ in range(runs * 2 + 1):
        for name, command in commands.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            subprocess.run(command, input=request, text=True, env=env, cwd="/", check=True, capture_output=True)
            took = time.perf_counter() - start
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            times[name].append((took, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime))
    wall = {n: statistics.median(t for t, _ in times[n]) for n in commands}
    cpu = {n: statistics.median(c for _, c in times[n]) for n in commands}
    ours, bare = "this checkout", "python -c pass"
    return [
        f"| the target's question (locate.py), this checkout vs {name} (load {load:.1f}, {runs * 2 + 1} runs each, "
        f"in turn; {bare}: {wall[bare] * 1000:.1f} ms, CPU {cpu[bare] * 1000:.1f} ms) "
        f"| {wall[ours] * 1000:.1f} ms (CPU {cpu[ours] * 1000:.1f} ms) "
        f"| {name}: {wall[name] * 1000:.1f} ms (CPU {cpu[name] * 1000:.1f} ms) "
        f"| {wall[ours] / wall[name]:.2f}x (CPU {cpu[ours] / cpu[name]:.2f}x) | ≤ 1x (not slower) |"
        for name in sides
        if name != ours
    ]


LOCATE = Path("patchkit/_target/locate.py")


def _spread(times: list[tuple[float, float]]) -> str:
    cpu = sorted(c for _, c in times)
    return f"quartiles {cpu[len(cpu) // 4]:.3f}-{cpu[3 * len(cpu) // 4]:.3f} s"


# The run in one process, its modules imported first: the CPU time of the imports (the modules it
# loads, each code its own) and of the work after them, which is where new work (issue 22's checks
# in the dry run) shows, apart from the cost of more modules.
_SPLIT = r"""
import importlib, os, runpy, sys, time
os.execvp = os.execv = lambda *a: sys.exit(0)  # run's exec: the fast path ends here
os._exit = lambda status: sys.exit(status)  # the console script's end (cli.main.exit_held): the split is said after it
modules, sys.argv = sys.argv[1].split(), ["patchkit", *sys.argv[2:]]
start = time.process_time()
for name in modules:
    try:
        importlib.import_module(name)
    except Exception:
        pass
imported = time.process_time()
try:
    runpy.run_module("patchkit", run_name="__main__", alter_sys=True)
except SystemExit:
    pass
sys.stderr.write(f"SPLIT {imported - start} {time.process_time() - imported} {' '.join(sorted(sys.modules))}\n")
"""


def _split_rows(label: str, sides: dict, runs: int, work: Path) -> list[str]:
    def split(commands: dict, env: dict, modules: list[str]) -> tuple[float, float, list[str]]:
        cmd = commands[label]
        done = subprocess.run(
            [cmd[0], "-c", _SPLIT, " ".join(modules), *cmd[3:]], capture_output=True, text=True, env=env, cwd=work
        )
        said = [line for line in done.stderr.splitlines() if line.startswith("SPLIT ")]
        if not said:
            raise SystemExit(f"{label}: {done.stderr[-500:]}")
        said = said[-1].split()
        return float(said[1]), float(said[2]), [m for m in said[3:] if m != "__main__"]

    loaded = {name: split(commands, env, [])[2] for name, (commands, env) in sides.items()}
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
    for _ in range(runs * 2 + 1):
        for name, (commands, env) in sides.items():
            times[name].append(split(commands, env, loaded[name])[:2])
    parts = [
        f"{name}: {len(loaded[name])} modules, imports CPU {statistics.median(i for i, _ in t):.3f} s, "
        f"the work after them {statistics.median(w for _, w in t):.3f} s"
        for name, t in times.items()
    ]
    return [
        f"| start-up, {label}, split in one process ({runs * 2 + 1} runs each, in turn) | "
        + "; ".join(parts)
        + " | | | |"
    ]


def _short(rev: str) -> str:
    done = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", rev], capture_output=True, text=True)
    return done.stdout.strip() or rev


def _source_of(rev: str, dest: Path) -> Path:
    """The repository at `rev` (patchkit/ and its library), compiled as an install would be."""
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(dest, filter="data")
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(dest / "patchkit")], check=True)
    return dest


def _startup_side(
    work: Path, name: str, source: Path, site: Path, command: list[str], bin_dir: Path
) -> tuple[dict[str, list[str]], dict]:
    """One code's three commands and environment, its cache warmed and its tree applied."""
    tree, stock = work / f"site-{name}", work / f"stock-{name}"
    shutil.copytree(site, tree)
    shutil.copytree(site, stock)
    env = {
        **os.environ,
        "PYTHONPATH": str(source),
        # its own user cache, found as a user's is (PATCHKIT_CACHE_DIR would spare platformdirs' import)
        "XDG_CACHE_HOME": str(work / f"cache-{name}"),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
    }
    env.pop("PATCHKIT_CACHE_DIR", None)
    pk = [sys.executable, "-m", "patchkit"]
    commands = {
        HELP: [*pk, "--help"],
        DRY_RUN: [*pk, "apply", "--dry-run", "-q", "--target", str(stock)],
        # the same work on any code: the library before issue 23 held eagle3 alone
        DRY_RUN_ONE: [*pk, "apply", "--dry-run", "-q", "--set", "eagle3", "--target", str(stock)],
        FAST_PATH: [*pk, "run", "--target", str(tree), "--", *command],
    }
    _checked(commands[DRY_RUN], env, work)  # warms the cache
    _checked(commands[DRY_RUN_ONE], env, work)
    _checked([*pk, "apply", "-q", "--no-import", "--target", str(tree)], env, work)
    _checked(commands[FAST_PATH], env, work)  # keeps the set's findings: the runs timed take the fast path
    where = _checked([sys.executable, "-c", "import patchkit; print(patchkit.__file__)"], env, work)
    if not where.startswith(str(source)):
        raise SystemExit(f"the {name} code is not the one imported: {where}")
    return commands, env


def _checked(cmd: list[str], env: dict, cwd: Path) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr[-500:]}")
    return done.stdout.strip()


def fleet_rows(work: Path, runs: int) -> list[str]:
    from ray.cluster_utils import Cluster

    pristine = stock_0_16(work)
    trees = [work / f"fleet-node-{i}" for i in range(3)]
    single = work / "fleet-single"

    def restore():
        for tree in [*trees, single]:
            shutil.rmtree(tree, ignore_errors=True)
            shutil.copytree(pristine, tree)

    restore()
    env = [{"PATCHKIT_TARGET": str(tree), "PATCHKIT_CACHE_DIR": str(work / "fleet-cache")} for tree in trees]
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "env_vars": env[0]})
    try:
        for node_env in env[1:]:
            cluster.add_node(num_cpus=1, env_vars=node_env)
        cluster.wait_for_nodes()
        fleet = [*PATCHKIT, "fleet", "apply", "-q", "--no-import", "--address", cluster.address]
        status = [*PATCHKIT, "fleet", "status", "-q", "--address", cluster.address, "--keep-alive", "60"]
        alone = [*PATCHKIT, "apply", "-q", "--no-import", "--target", str(single)]
        ray_alone = [sys.executable, str(REPO / "bench" / "ray_floor.py"), cluster.address]
        cold, warm, floor = [], [], []
        for _ in range(runs):
            time.sleep(AGENT_END)  # the last run's agents (--keep-alive 0) have ended
            floor.append(run_once(ray_alone))
            cold.append((run_once(alone), run_once([*fleet, "--keep-alive", "0"])))
            restore()
            subprocess.run(status, capture_output=True, check=True)  # the command before: its agents stay
            warm.append((run_once(alone), run_once([*fleet, "--keep-alive", "0"])))
            restore()
    finally:
        cluster.shutdown()
    rows = []
    one_apply = statistics.median(alone for alone, _ in cold)
    for label, pairs in (("new agents (cold)", cold), ("agents kept from the command before (warm)", warm)):
        reference, ours = (statistics.median(times) for times in zip(*pairs, strict=True))
        rows.append(
            f"| fleet apply, 3 local Ray nodes, stock 0.16.0, {label} | {ours:.3f} s | one apply {reference:.3f} s "
            f"| +{ours - reference:.2f} s | ≤ one + 2 s |"
        )
    ray_floor = statistics.median(floor)
    rows.append(
        f"| Ray alone, no patchkit (bench/ray_floor.py: connect, a trivial task on each of the 3 nodes, "
        f"disconnect), run before each cold fleet apply | {ray_floor:.3f} s | one apply {one_apply:.3f} s "
        f"| +{ray_floor - one_apply:.2f} s | (what a cold run cannot go below) |"
    )
    return rows


AGENT_END = 2.0  # seconds: an agent released with --keep-alive 0 ends within one tick (0.5 s)


def synthetic_wheel(work: Path, megabytes: int) -> Path:
    """vllm-0.16.0+bench-...whl: the stock files of stock_0_16 (deflated), a stored random member of
    `megabytes` MB, and a dist-info whose RECORD is true. A build of its own (a local label): a
    stock-named wheel is held to the published one, which this is not (real_wheel_rows measures that)."""
    import base64
    import hashlib
    import zipfile

    def digest(h) -> str:
        return "sha256=" + base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode()

    stock = stock_0_16(work)
    path = work / "wheel-in" / "vllm-0.16.0+bench-cp38-abi3-manylinux_2_31_x86_64.whl"
    dist = "vllm-0.16.0+bench.dist-info"
    path.parent.mkdir()
    rows = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for file in sorted(p for p in (stock / "vllm").rglob("*") if p.is_file()):
            data = file.read_bytes()
            name = file.relative_to(stock).as_posix()
            zf.writestr(name, data)
            rows.append(f"{name},{digest(hashlib.sha256(data))},{len(data)}")
        so, h = "vllm/_C.abi3.so", hashlib.sha256()
        with zf.open(zipfile.ZipInfo(so), "w", force_zip64=False) as member:
            for _ in range(megabytes):
                chunk = os.urandom(1 << 20)
                h.update(chunk)
                member.write(chunk)
        rows.append(f"{so},{digest(h)},{megabytes << 20}")
        metadata = (stock / "vllm-0.16.0.dist-info" / "METADATA").read_bytes()
        metadata = metadata.replace(b"\nVersion: 0.16.0\n", b"\nVersion: 0.16.0+bench\n", 1)
        for name, data in (("METADATA", metadata), ("WHEEL", b"Wheel-Version: 1.0\n")):
            zf.writestr(f"{dist}/{name}", data)
            rows.append(f"{dist}/{name},{digest(hashlib.sha256(data))},{len(data)}")
        zf.writestr(f"{dist}/RECORD", "\n".join([*rows, f"{dist}/RECORD,,"]) + "\n")
    return path


def wall_and_cpu(cmd: list[str]) -> tuple[float, float]:
    """The wall time and the CPU time (user + system) of one successful run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = run_once(cmd)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def wheel_row(work: Path, runs: int, megabytes: int) -> list[str]:
    wheel = synthetic_wheel(work, megabytes)
    out = work / "wheel-out"
    out.mkdir()
    ours = [*PATCHKIT, "wheel", "-q", str(wheel), "--out", str(out)]
    time.sleep(2.5)  # the wheel's ctime out of the seal's two-second window
    first = wall_and_cpu(ours)  # a labelled build: every member hashed against its RECORD, then sealed
    for made in out.iterdir():
        made.unlink()
    load = os.getloadavg()[0]
    pairs = []
    for _ in range(runs):
        reference = wall_and_cpu(["cp", str(wheel), str(out / "copy.whl")])
        patched = wall_and_cpu(ours)
        pairs.append((patched, reference))
        for made in out.iterdir():
            made.unlink()
    (patched, patched_cpu), (reference, reference_cpu) = (
        tuple(statistics.median(p[i][j] for p in pairs) for j in (0, 1)) for i in (0, 1)
    )
    size = wheel.stat().st_size / 1e6
    print(
        f"wheel: load average {load:.1f} before, {os.getloadavg()[0]:.1f} after; the first run (every member "
        f"hashed, then sealed) {first[0]:.3f} s, CPU {first[1]:.3f} s",
        file=sys.stderr,
    )
    what = f"wheel, eagle3 on a synthetic {size:.0f} MB 0.16.0+bench wheel"
    return [
        row(
            f"{what} (sealed; CPU {patched_cpu:.3f} s vs cp {reference_cpu:.3f} s)", patched, reference, "cp", "≤ 3x cp"
        ),
        row(f"{what}, its first run (every member hashed; CPU {first[1]:.3f} s)", first[0], reference, "cp", "—"),
    ]


def relabelled_wheel(wheel: Path, where: Path, label: str = "corp") -> Path:
    """`wheel` (a stock vLLM wheel) as the labelled build `VERSION+label`: every member's compressed
    bytes copied as they are (patchkit's rawzip), the dist-info renamed, METADATA's Version and RECORD's
    rows made to match. A build of its own, true to its RECORD: `wheel FILE` holds it to its RECORD only."""
    import base64
    import csv
    import hashlib
    import io
    import zipfile

    from patchkit.wheel import rawzip

    _name, version, *_ = wheel.name.split("-", 2)
    old, new = f"vllm-{version}.dist-info", f"vllm-{version}+{label}.dist-info"
    path = where / wheel.name.replace(f"-{version}-", f"-{version}+{label}-", 1)
    where.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as zf, open(wheel, "rb") as source, open(path, "wb") as out:
        members = rawzip.members(zf, source.fileno(), wheel.name)
        metadata = zf.read(f"{old}/METADATA").replace(
            f"\nVersion: {version}\n".encode(), f"\nVersion: {version}+{label}\n".encode(), 1
        )
        rows = list(csv.reader(io.StringIO(zf.read(f"{old}/RECORD").decode())))
        digest = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(metadata).digest()).rstrip(b"=").decode()
        record = io.StringIO()
        writer = csv.writer(record, lineterminator="\n")
        for name, hashed, size in rows:
            if name == f"{old}/METADATA":
                hashed, size = digest, str(len(metadata))
            writer.writerow([name.replace(f"{old}/", f"{new}/", 1), hashed, size])
        writer = rawzip.Writer(out.fileno(), source.fileno(), wheel.name)
        entries = []
        for member in members:
            name = member.name.replace(f"{old}/", f"{new}/", 1)
            if member.name == f"{old}/METADATA":
                entries.append(rawzip.deflated(name, metadata, member, member.info.date_time))
            elif member.name == f"{old}/RECORD":
                entries.append(rawzip.deflated(name, record.getvalue().encode(), member, member.info.date_time))
            else:
                entries.append(rawzip.raw(member, name))
        writer.add(entries)
        writer.finish()
    return path


def real_wheel_rows(work: Path, runs: int) -> list[str]:

    from patchkit.wheel.stock import stock_wheel

    wheel = stock_wheel("0.16.0")  # the first time: ~500 MB from the index
    out = work / "real-wheel-out"
    out.mkdir()
    outside = work / "real-wheel-in" / wheel.name  # a copy outside the cache: its sha256 sealed in wheel-files/
    outside.parent.mkdir()
    shutil.copyfile(wheel, outside)
    labelled = relabelled_wheel(wheel, work / "real-wheel-labelled")  # held to its own RECORD only
    commands = {
        "cp": ["cp", str(wheel), str(out / "copy.whl")],
        "version": [*PATCHKIT, "wheel", "-q", "0.16.0", "--out", str(out)],
        "file": [*PATCHKIT, "wheel", "-q", str(wheel), "--out", str(out)],
        "outside": [*PATCHKIT, "wheel", "-q", str(outside), "--out", str(out)],
        "labelled": [*PATCHKIT, "wheel", "-q", str(labelled), "--out", str(out)],
    }
    run_once(commands["version"])  # the first reuse of a fresh download hashes it (and seals it)
    time.sleep(2.5)  # the copy's ctime out of the seal's two-second window
    first_outside = run_once(commands["outside"])  # hashed once, and sealed
    first_labelled = wall_and_cpu(commands["labelled"])  # every member inflated and hashed once, and sealed
    for made in out.iterdir():
        made.unlink()
    print(f"real wheel: the copy outside the cache, its first run (hashed): {first_outside:.3f} s", file=sys.stderr)
    print(
        f"real wheel: relabelled +corp, its first run (every member hashed): {first_labelled[0]:.3f} s, "
        f"CPU {first_labelled[1]:.3f} s",
        file=sys.stderr,
    )
    load = os.getloadavg()[0]
    wall: dict[str, list[float]] = {name: [] for name in commands}
    cpu: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, cmd in commands.items():  # in turn, so that all three see the same machine
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            wall[name].append(run_once(cmd))
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[name].append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
            for made in out.iterdir():
                made.unlink()
    rounded = {name: [round(t, 3) for t in times] for name, times in wall.items()}
    print(f"real wheel: load average {load:.1f} before, {os.getloadavg()[0]:.1f} after; {rounded}", file=sys.stderr)
    size = wheel.stat().st_size / 1e6
    cp_s, cp_cpu = statistics.median(wall["cp"]), statistics.median(cpu["cp"])
    rows = []
    shown = (("version", "wheel 0.16.0 (by VERSION, the cached"), ("file", "wheel FILE (the"))
    sealed = (("outside", "wheel FILE (a copy outside the cache, sealed: the"), ("labelled", "wheel FILE (sealed: the"))
    for name, what in (*shown, *sealed):
        ours, ours_cpu = statistics.median(wall[name]), statistics.median(cpu[name])
        label = f"{what} real {size:.0f} MB 0.16.0 wheel; CPU {ours_cpu:.3f} s vs cp {cp_cpu:.3f} s, {ours_cpu / cp_cpu:.1f}x)"
        if name == "labelled":
            label = label.replace(f"real {size:.0f} MB 0.16.0 wheel", "real 0.16.0 wheel relabelled +corp")
        rows.append(row(label, ours, cp_s, "cp", "≤ 3x cp"))
    rows.append(
        row(
            f"wheel FILE (the real 0.16.0 wheel relabelled +corp), its first run: every member inflated and hashed; "
            f"CPU {first_labelled[1]:.3f} s vs cp {cp_cpu:.3f} s, {first_labelled[1] / cp_cpu:.1f}x",
            first_labelled[0],
            cp_s,
            "cp",
            "—",
        )
    )
    return rows


ROWS = (
    "dry-run",
    "eagle3-dry-run",
    "help",
    "apply",
    "sets-apply",
    "fetch",
    "checks",
    "verify",
    "large-file",
    "guard",
    "preflight",
    "run",
    "wheel",
    "fleet",
    "real-wheel",
    "large-record",
    "deep-record",
    "planted",
    "planted-pyc",
    "startup",
    "locate",
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="skip the verify --all measurement")
    parser.add_argument("--only", nargs="+", choices=ROWS, default=ROWS[:-2], help="measure only these rows")
    parser.add_argument("--large-mb", type=int, default=214, help="the large-file row's module size (MB)")
    parser.add_argument(
        "--before",
        nargs="+",
        default=["f10f406"],
        help="startup: the commits to compare with (default: main before issue 21's restructuring)",
    )
    parser.add_argument("--wheel-mb", type=int, default=464, help="the wheel row's stored member size (MB)")
    parser.add_argument("--record-files", type=int, default=2000, help="the large-record row's smaller count")
    parser.add_argument("--deep-files", type=int, default=1000, help="the deep-record row's recorded files")
    parser.add_argument("--planted-files", type=int, default=300, help="the planted row's recorded files")
    parser.add_argument("--pyc-files", type=int, default=3000, help="the planted-pyc row's modules")
    parser.add_argument(
        "--before-locate",
        nargs="+",
        default=["d2f9245"],
        help="locate: the commits to compare with (before the plain lookup)",
    )
    args = parser.parse_args()
    runs = args.runs
    chosen = set(args.only) - ({"verify"} if args.quick else set())
    # As an installed patchkit runs: pip compiles a wheel's modules at install. A checkout under
    # PYTHONDONTWRITEBYTECODE (set on some machines, this one included) would compile them on every run.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "patchkit")], check=True)
    work = Path(tempfile.mkdtemp(prefix="patchkit-bench-"))
    rows = []
    try:
        if "dry-run" in chosen:
            rows.extend(dry_run_rows(work, runs))
        if "eagle3-dry-run" in chosen:
            rows.extend(eagle3_dry_run_rows(work, runs))
        if "help" in chosen:
            rows.append(help_row(runs))
        if "apply" in chosen:
            rows.append(apply_row(work, runs))
        if "sets-apply" in chosen:
            rows.append(sets_apply_row(work, runs))
        if "fetch" in chosen:
            rows.append(fetch_row(work))
        if "checks" in chosen:
            rows.append(static_checks_row(stock_0_16(work), runs))
        if "verify" in chosen:
            rows.extend(verify_all_rows(work))
        if "large-file" in chosen:
            rows.append(large_file_row(work, runs, args.large_mb))
        if "guard" in chosen:
            rows.append(guard_row(work, runs))
        if "preflight" in chosen:
            rows.append(preflight_row(work / "preflight", runs))
        if "run" in chosen:
            rows.append(run_row(work / "run", runs))
        if "wheel" in chosen:
            rows.extend(wheel_row(work, runs, args.wheel_mb))
        if "fleet" in chosen:
            rows.extend(fleet_rows(work, runs))
        if "real-wheel" in chosen:
            rows.extend(real_wheel_rows(work, runs))
        if "large-record" in chosen:
            rows.extend(large_record_rows(work, runs, args.record_files))
        if "deep-record" in chosen:
            rows.extend(deep_record_rows(work, runs, args.deep_files))
        if "planted" in chosen:
            rows.extend(planted_rows(work, runs, args.planted_files))
        if "planted-pyc" in chosen:
            rows.extend(planted_pyc_rows(work, runs, args.pyc_files))
        if "startup" in chosen:
            rows.extend(startup_rows(work / "startup", runs, args.before))
        if "locate" in chosen:
            rows.extend(locate_rows(work / "locate", runs, args.before_locate))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"median of {runs} runs (dry-run and run: {runs * 2 + 1}, start-up: {runs * 2}); Python {sys.version.split()[0]}"
    )
    print("| measurement | patchkit | reference | ratio | goal |")
    print("| --- | --- | --- | --- | --- |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
