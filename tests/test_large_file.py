"""A one-line patch to a large file: apply's peak memory is a small multiple of the file's size."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import make_patch, write_tree

from patchkit.checks import LARGEST_PARSED

# Runs the CLI as its own child and reports that child's peak RSS (bytes): the test process's own
# children (git, earlier tests) do not count.
PEAK_RSS = """
import json, resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
print(json.dumps({"code": done.returncode, "output": done.stdout + done.stderr, "peak": peak}))
"""


def apply_peak(target, patch) -> tuple[int, str, int]:
    command = [sys.executable, "-m", "patchkit", "apply", "--target", str(target), "--patch", str(patch)]
    done = subprocess.run([sys.executable, "-c", PEAK_RSS, *command], capture_output=True, text=True, check=True)
    answer = json.loads(done.stdout)
    return answer["code"], answer["output"], answer["peak"]


def numbered_module(lines: int) -> bytes:
    return b"".join(b"value_%07d = %d  # a line of a generated table\n" % (i, i * 7) for i in range(lines))


def test_peak_memory_of_a_one_line_patch_is_a_small_multiple_of_the_file(tmp_path):
    small = write_tree(tmp_path / "small", files={"vllm/table.py": numbered_module(100)})
    large = write_tree(tmp_path / "large", files={"vllm/table.py": numbered_module(450_000)})
    size = (large / "vllm/table.py").stat().st_size
    assert size > 2 * LARGEST_PARSED  # the checks that parse skip it, and say so

    def one_line_patch(tree, name):
        lines = (tree / "vllm/table.py").read_bytes().splitlines(True)
        lines.insert(len(lines) // 2, b"EXTRA = 'one more line'\n")
        patch = tmp_path / name
        patch.write_bytes(make_patch(tmp_path, tree, {"vllm/table.py": b"".join(lines)}))
        return patch

    code, output, baseline = apply_peak(small, one_line_patch(small, "small.patch"))
    assert code == 0, output
    code, output, peak = apply_peak(large, one_line_patch(large, "large.patch"))
    assert code == 0, output
    assert b"EXTRA = 'one more line'\n" in (large / "vllm/table.py").read_bytes()
    assert "not checked" in output and "MiB" in output
    # the interpreter and patchkit's imports are the baseline; the file adds a few copies of itself
    assert peak - baseline < 4 * size, f"peak {peak / 2**20:.0f} MiB, baseline {baseline / 2**20:.0f} MiB"
