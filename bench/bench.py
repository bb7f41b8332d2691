"""patchkit's speed, as ratios against a reference measured in the same run.

    python bench/bench.py [--runs N]

1. `patchkit apply --dry-run` vs `git apply --check` on the real 0.32.0 -> 0.33.0 diff of every
   vllm/**/*.py (both trees fetched with patchkit's own fetcher; goal: <= 4x git).
2. `patchkit --help` start-up vs a bare `python -c pass` (goal: <= 0.25 s).
3. `patchkit apply` of an ad-hoc diff (the eagle3 series as --patch files) on a stock 0.16.0 tree
   vs `git apply` of the same diffs (goal: <= 1 s).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from patchkit.fetch import release_tree  # noqa: E402
from patchkit.release_files import files_for, lay_out  # noqa: E402

PATCHKIT = [sys.executable, "-m", "patchkit"]


def timed(cmd: list[str], runs: int, cwd: Path | None = None, between=None) -> float:
    """Median wall time of `runs` runs; `between` restores state after each run."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(cmd, cwd=cwd, capture_output=True)
        times.append(time.perf_counter() - start)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(map(str, cmd))} failed: {done.stderr.decode()[-500:]}")
        if between:
            between()
    return statistics.median(times)


def release_diff(old: Path, new: Path, work: Path) -> Path:
    shutil.copytree(old / "vllm", work / "a" / "vllm")
    shutil.copytree(new / "vllm", work / "b" / "vllm")
    done = subprocess.run(["git", "diff", "--no-index", "--no-renames", "--no-prefix", "--no-color", "a", "b"],
                          cwd=work, capture_output=True)
    out = work / "release.diff"
    out.write_bytes(done.stdout)
    return out


def row(name: str, ours: float, reference: float, ref_name: str, goal: str) -> str:
    return f"| {name} | {ours:.3f} s | {ref_name} {reference:.3f} s | {ours / reference:.1f}x | {goal} |"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    work = Path(tempfile.mkdtemp(prefix="patchkit-bench-"))
    rows = []
    try:
        old = release_tree("0.32.0", all_python=True)
        new = release_tree("0.33.0", all_python=True)
        diff = release_diff(old, new, work)
        files = diff.read_bytes().count(b"\ndiff --git ") + 1
        hunks = sum(1 for line in diff.read_bytes().split(b"\n") if line.startswith(b"@@ "))
        site = work / "site-0.32.0"
        lay_out(old, str(site))
        git = timed(["git", "apply", "--check", str(diff)], runs, cwd=site)
        ours = timed([*PATCHKIT, "apply", "--dry-run", "-q", "--target", str(site), "--patch", str(diff)], runs)
        rows.append(row(f"apply --dry-run, 0.32.0→0.33.0 ({diff.stat().st_size / 1e6:.1f} MB, {files} files, "
                        f"{hunks} hunks)", ours, git, "git apply --check", "≤ 4x"))

        bare = timed([sys.executable, "-c", "pass"], runs * 2)
        helped = timed([*PATCHKIT, "--help"], runs * 2)
        rows.append(row("patchkit --help", helped, bare, "python -c pass", "≤ 0.25 s"))

        stock = work / "site-0.16.0"
        lay_out(release_tree("0.16.0", files_for("0.16.0")), str(stock))
        series = sorted((REPO / "patches/eagle3/0.16.0").glob("*.patch"))
        patch_args = [a for p in series for a in ("--patch", str(p))]
        pristine = work / "pristine-0.16.0"
        shutil.copytree(stock, pristine)

        def restore():
            shutil.rmtree(stock)
            shutil.copytree(pristine, stock)

        ours = timed([*PATCHKIT, "apply", "-q", "--target", str(stock), *patch_args], runs, between=restore)
        git = timed(["git", "apply", *map(str, series)], runs, cwd=stock, between=restore)
        rows.append(row("apply, eagle3 series as --patch on stock 0.16.0", ours, git, "git apply", "≤ 1 s"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"median of {runs} runs (start-up: {runs * 2}); Python {sys.version.split()[0]}")
    print("| measurement | patchkit | reference | ratio | goal |")
    print("| --- | --- | --- | --- | --- |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
