"""A tree whose vllm/ was moved to another volume under another name, a symlink left in its place
(`site-packages/vllm -> /data/pkgs/vllm-pkg`): status judges it applied through that link, and the
launch checks and verify's behaviour test read the same files through it (before, they found none:
"vllm/config/speculative.py is missing", "drop --speculative-config", a behaviour test failing)."""

from __future__ import annotations

from pathlib import Path

from helpers import run_cli_read_only
from launch_fixtures import (
    applied,
    findings,
    patchkit_run,
    stand_in_launch,
)


def _moved(tree: Path, tmp_path: Path) -> Path:
    volume = tmp_path / "vol" / "pkgs"
    volume.mkdir(parents=True)
    (tree / "vllm").rename(volume / "vllm-pkg")
    (tree / "vllm").symlink_to(volume / "vllm-pkg", target_is_directory=True)
    return volume / "vllm-pkg"


def test_the_launch_checks_read_a_moved_vllm_through_its_link(tmp_path):
    tree, library, command, env, marker = stand_in_launch(tmp_path)
    applied(tree, library)
    _moved(tree, tmp_path)
    for target in (tree, tree / "vllm"):
        status = run_cli_read_only("status", "--target", target, "--patches", library)
        assert status.returncode == 0 and "applied" in status.stdout, status.stdout + status.stderr
        done = run_cli_read_only(
            "preflight", "--target", target, "--patches", library, "--format", "json", "--no-import", "--", *command
        )
        failing = {name: f for name, f in findings(done).items() if not f["ok"]}
        assert done.returncode == 0 and not failing, (target, failing, done.stderr)
        judged = {name for name, f in findings(done).items() if f.get("judged", True)}
        assert {"whitelist", "supports-eagle3", "drafter-architecture"} <= judged, findings(done)
    code = patchkit_run(tree, library, command, env)[1]
    assert code.returncode == 7 and marker.exists(), code.stdout + code.stderr


def test_a_moved_vllm_still_fails_the_launch_checks_where_its_files_do(tmp_path):
    """The checks judge the moved files themselves: a stock file there fails as in a plain tree."""
    tree, library, command, _env, _marker = stand_in_launch(tmp_path)
    moved = _moved(tree, tmp_path)  # never applied: the whitelist there is stock
    assert (moved / "config" / "speculative.py").is_file()
    done = run_cli_read_only(
        "preflight", "--target", tree, "--patches", library, "--format", "json", "--no-import", "--", *command
    )
    whitelist = findings(done)["whitelist"]
    assert done.returncode == 1 and not whitelist["ok"] and "missing" not in whitelist["message"], whitelist
    assert "patchkit apply" in (whitelist.get("fix") or "") and "--speculative-config" not in whitelist["fix"], (
        whitelist
    )
