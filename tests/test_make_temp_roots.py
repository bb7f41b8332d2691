"""`make test-fast` gives each run a base temporary directory of its own: pytest keeps three numbered directories
a user under one root, so runs side by side on one machine removed each other's. A passed run's is removed, a
failed run's kept and named. The recipe is run as written, with a stand-in for the venv's python."""

from __future__ import annotations

import subprocess
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]


def _make_test_fast(tmp_path: Path, exit_code: int) -> tuple[subprocess.CompletedProcess, list[str]]:
    """make test-fast with `python` a script that records pytest's arguments and makes what pytest would in its
    --basetemp, exiting `exit_code`: its exit and output, and the --basetemp of each run so far."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    for made in (".installed", ".plugins-rewritten"):  # the venv's set-up done: newer than pyproject.toml
        (venv / made).touch()
    seen = tmp_path / "seen"
    python = venv / "bin" / "python"
    python.write_text(
        "#!/bin/sh\n"
        '[ "$2" = compileall ] && exit 0\n'
        'for a; do case "$a" in --basetemp=*) base=${a#--basetemp=};; esac; done\n'
        f'echo "$base $*" >> {seen}\n'
        'mkdir -p "$base/popen-gw0"\n'
        f"exit {exit_code}\n"
    )
    python.chmod(0o755)
    base = tmp_path / "base"
    base.mkdir(exist_ok=True)
    env = {"PATH": "/usr/bin:/bin", "PYTEST_DEBUG_TEMPROOT": str(base)}
    done = subprocess.run(
        ["make", "-s", "-C", str(CHECKOUT), "test-fast", f"VENV={venv}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done, seen.read_text().splitlines()


def test_each_run_has_a_base_directory_of_its_own_removed_once_it_passed(tmp_path):
    first, _ = _make_test_fast(tmp_path, 0)
    second, runs = _make_test_fast(tmp_path, 0)
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    roots = [run.split()[0] for run in runs]
    assert len(set(roots)) == 2, runs
    for root in roots:
        assert Path(root).parent == tmp_path / "base" and len(Path(root).name) == len("pytest-of-root/pytest-12")
        assert not Path(root).exists(), root
    assert all("-o tmp_path_retention_policy=failed" in run for run in runs), runs


def test_a_failed_runs_base_directory_is_kept_and_named(tmp_path):
    done, runs = _make_test_fast(tmp_path, 1)
    root = runs[0].split()[0]
    assert done.returncode != 0
    assert (Path(root) / "popen-gw0").is_dir()
    assert f"test-fast: its temporary directories are in {root}" in done.stdout
