"""SIGKILL at random moments during an apply of a real release-to-release diff: after the next
command the tree is exactly the old release or exactly the new one, every time."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import pytest
from helpers import release_diff, snapshot

from patchkit.fetch import release_tree
from patchkit.releases.files import lay_out

pytestmark = [pytest.mark.release, pytest.mark.slow]

PATCHKIT = [sys.executable, "-m", "patchkit"]
KILLS = 12
# The kills in parts of PART, each part a group of its own (tests/xdist_groups.py): make test's workers
# share them, where the 12 kills in one test were minutes of one worker's wall time.
PART = 3
PARTS = [pytest.param(first, marks=pytest.mark.xdist_group(f"sigkill-{first}")) for first in range(0, KILLS, PART)]


@pytest.mark.parametrize("first", PARTS)
def test_sigkill_during_a_large_apply_leaves_old_or_new(tmp_path, first):
    old = release_tree("0.32.0", all_python=True)
    new = release_tree("0.33.0", all_python=True)
    diff = tmp_path / "release.diff"
    diff.write_bytes(release_diff(old, new, tmp_path / "d"))
    files = diff.read_bytes().count(b"\ndiff --git ") + 1
    assert files > 800
    site = tmp_path / "site"
    lay_out(old, str(site))
    old_tree, new_tree = snapshot(site), snapshot(new)
    args = ["--target", str(site), "--patch", str(diff)]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}

    started = time.monotonic()
    subprocess.run([*PATCHKIT, "apply", "-q", *args], check=True, env=env)
    full = time.monotonic() - started
    subprocess.run([*PATCHKIT, "revert", "-q", *args], check=True, env=env)
    assert snapshot(site) == old_tree

    rng = random.Random(20261129 + first)
    outcomes = []
    journal = site / ".patchkit" / "journal.json"
    for attempt in range(first, first + PART):
        proc = subprocess.Popen(
            [*PATCHKIT, "apply", "-q", *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        if attempt % 2:
            time.sleep(rng.uniform(0.05, full))  # anywhere: planning, checks or writing
        else:  # inside the transaction: from the moment its journal exists
            while not journal.exists() and proc.poll() is None:
                time.sleep(0.001)
            time.sleep(rng.uniform(0, 0.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        status = subprocess.run(
            [*PATCHKIT, "status", *args, "--format", "json"], capture_output=True, text=True, env=env
        )
        now = snapshot(site)
        assert now in (old_tree, new_tree)
        assert not (site / ".patchkit" / "journal.json").exists()
        state = json.loads(status.stdout)["state"]
        outcomes.append(state)
        assert state == ("applied" if now == new_tree else "not-applied")
        if now == new_tree:
            subprocess.run([*PATCHKIT, "revert", "-q", *args], check=True, env=env)
            assert snapshot(site) == old_tree
    print(f"{files} files, full apply {full:.2f} s, states after kill: {outcomes}")
    shutil.rmtree(site)
