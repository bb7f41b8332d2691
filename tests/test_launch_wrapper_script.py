"""newuser26: a launch whose `vllm` is a `#!/bin/sh` wrapper (common in images and units): the
launch-target finding cannot follow it, and told the person to "give --python" when --python was
given. It now says what is true and what is left to check."""

from __future__ import annotations

from helpers import run_cli_judged
from importable_vllm import venv_importing
from launch_fixtures import DEEPSEEK_V3, DRAFTER, findings, serve, write_eagle3_setup, write_model


def test_a_wrapper_vllm_with_python_given_is_not_told_to_give_python(tmp_path):
    tree, library = write_eagle3_setup(tmp_path)
    script = venv_importing(tree, tmp_path / "venv")
    python = tmp_path / "venv" / "bin" / "python"
    script.write_text(f'#!/bin/sh\nexec {python} -m vllm.entrypoints.cli.main "$@"\n')
    launch = serve(write_model(tmp_path / "target", DEEPSEEK_V3), write_model(tmp_path / "drafter", DRAFTER))
    launch[0] = str(script)
    done = run_cli_judged(
        "preflight", "--python", python, "--patches", library, "--no-import", "--format", "json", "--", *launch
    )
    target = findings(done)["launch-target"]
    assert target["result"] == "cannot judge", target
    assert "give --python" not in target["fix"], target
    assert "a wrapper patchkit cannot follow" in target["message"], target
    assert target["fix"] == f"check that --python {python} is the interpreter it runs", target
