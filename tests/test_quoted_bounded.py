"""A message quotes a file's content (a #! line, a METADATA value, a line a hunk expected elsewhere)
in a bounded head: a huge line in a file never becomes a huge line of output."""

from __future__ import annotations

import json
import os
import sys

import pytest
from helpers import SPEC, SPEC_PY, run_cli_read_only, run_cli_writing, spec_library, write_tree
from launch_fixtures import write_model

from patchkit.base.errors import TargetError
from patchkit.launch.interpreter import RefusedByPython, script_python

LONGEST_LINE = 1000  # what any line of output may take here: paths of tmp_path, a fix, a bounded quote


def _longest(text: str) -> int:
    return max((len(line) for line in text.splitlines()), default=0)


@pytest.mark.parametrize("size", [300, 4096, 50 << 20])
def test_a_vllm_script_whose_shebang_is_huge_is_refused_as_the_kernel_refuses_it(tmp_path, size):
    """The kernel reads 256 bytes of a #! line: an interpreter's name not ended within them is ENOEXEC."""
    (tmp_path / "bin").mkdir()
    script = tmp_path / "bin" / "vllm"
    script.write_bytes(b"#!" + sys.executable.encode() + b"x" * size + b"\nimport sys\n")
    script.chmod(0o755)
    with pytest.raises(RefusedByPython, match="the kernel refuses to start") as raised:
        script_python(script)
    assert len(raised.value.message) < 400, raised.value.message
    model = write_model(tmp_path / "model", {"model_type": "llama", "architectures": ["LlamaForCausalLM"]})
    tree = write_tree(tmp_path / "site")
    done = run_cli_read_only(
        "preflight", "--target", tree, "--no-import", "--python", sys.executable, "--", script, "serve", model
    )
    said = done.stdout + done.stderr
    assert done.returncode == 1 and "the kernel refuses to start" in said, said
    assert _longest(said) < LONGEST_LINE and "Traceback" not in said, _longest(said)


def test_a_shebang_with_huge_arguments_quotes_only_what_the_kernel_passes(tmp_path):
    script = tmp_path / "vllm"
    script.write_bytes(b"#!/bin/bash " + b"-x" * (1 << 20) + b"\n")
    with pytest.raises(TargetError, match="not a Python") as raised:
        script_python(script)
    assert len(raised.value.message) < 600, len(raised.value.message)


def test_a_metadata_version_that_is_huge_is_quoted_by_its_head(tmp_path):
    tree = write_tree(tmp_path / "site")
    metadata = tree / "vllm-0.16.0.dist-info" / "METADATA"
    metadata.write_text(metadata.read_text().replace("Version: 0.16.0", "Version: 0.16.0" + "x" * 100_000))
    done = run_cli_read_only("status", "--target", tree)
    said = done.stdout + done.stderr
    assert done.returncode == 2 and "is not a valid version" in said and "100,008 characters" in said, said[:500]
    assert _longest(said) < LONGEST_LINE, _longest(said)


def test_a_hunk_that_meets_a_huge_line_quotes_its_head(tmp_path):
    library = spec_library(tmp_path / "scratch")
    tree = write_tree(
        tmp_path / "site", files={SPEC: SPEC_PY.replace('    "qwen",\n', '    "qwen' + "q" * 200_000 + '",\n')}
    )
    done = run_cli_writing("apply", "--target", tree, "--patches", library, "--force")
    said = done.stdout + done.stderr
    assert done.returncode != 0 and "does not apply" in said, said[:2000]
    assert _longest(said) < LONGEST_LINE, _longest(said)
    assert os.path.getsize(tree / SPEC) > 200_000  # untouched


@pytest.mark.parametrize("field", ["path", "set", "format"])
def test_a_damaged_record_with_a_huge_value_is_quoted_by_its_head(tmp_path, field):
    """state.json is read back from the tree, untrusted: a damaged one names what is wrong, its
    values quoted by their head."""
    library = spec_library(tmp_path / "scratch")
    tree = write_tree(tmp_path / "site")
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-guard").returncode == 0
    record = tree / ".patchkit" / "state.json"
    data = json.loads(record.read_text())
    entry, huge = data["entries"][0], "x" * 200_000
    if field == "path":
        entry["files"]["../" + huge] = entry["files"].pop(SPEC)
    elif field == "set":
        entry["set"] = huge + "/"
    else:
        data["format"] = huge
    record.write_text(json.dumps(data))
    done = run_cli_read_only("status", "--target", tree, "--patches", library)
    said = done.stdout + done.stderr
    assert done.returncode == 2 and "is damaged" in said and "characters)" in said, said[:500]
    assert _longest(said) < LONGEST_LINE, _longest(said)
