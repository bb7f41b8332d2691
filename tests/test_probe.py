"""The probe check: import the patched modules, then run the set's probe, in the target's interpreter.

A tiny fake `vllm` lives in a real venv (no pip, no torch); the library's probe is the eagle3 set's
own patches/eagle3/probe.py, run against the fake's supports_eagle3().
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import textwrap
import time
import venv
from pathlib import Path

import pytest
from helpers import assert_clean_failure, make_patch, purelib, run_cli, snapshot, write_library, write_tree

from patchkit.checks.probe import module_name
from patchkit.series.library import default_root

INTERFACES = textwrap.dedent("""\
    class SupportsEagle3:
        pass


    def supports_eagle3(model):
        return isinstance(model, type) and issubclass(model, SupportsEagle3)
    """)

DEEPSEEK = textwrap.dedent("""\
    from .interfaces import SupportsEagle3


    class DeepseekV2ForCausalLM:
        pass


    class DeepseekV3ForCausalLM(DeepseekV2ForCausalLM):
        pass
    """)

KIMI = textwrap.dedent("""\
    from .deepseek_v2 import DeepseekV2ForCausalLM


    class KimiK25ForConditionalGeneration:
        pass
    """)

DEEPSEEK_PATCHED = DEEPSEEK.replace("class DeepseekV2ForCausalLM:", "class DeepseekV2ForCausalLM(SupportsEagle3):")
KIMI_PATCHED = KIMI.replace(
    "DeepseekV2ForCausalLM\n", "DeepseekV2ForCausalLM\nfrom .interfaces import SupportsEagle3\n"
).replace("class KimiK25ForConditionalGeneration:", "class KimiK25ForConditionalGeneration(SupportsEagle3):")

MODELS = "vllm/model_executor/models"
# the three EAGLE-3 target classes' files and the interfaces module that judges them
TARGET_MODELS = {
    "vllm/model_executor/__init__.py": "",
    f"{MODELS}/__init__.py": "",
    f"{MODELS}/interfaces.py": INTERFACES,
    f"{MODELS}/deepseek_v2.py": DEEPSEEK,
    f"{MODELS}/kimi_k25.py": KIMI,
}
# Each import of the fake vllm leaves a mark, so a test can tell whether the probe imported it.
VLLM_INIT = "import os\nopen(os.path.join(os.path.dirname(__file__), 'imported.mark'), 'a').close()\n"


@pytest.fixture
def fake_vllm(tmp_path, monkeypatch):
    """A venv whose site-packages holds a tiny vllm 0.16.0 with the three EAGLE-3 target classes."""
    monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(tmp_path / "cache"))  # not the real 0.16.0's RECORD
    home = tmp_path / "env"
    venv.create(home, with_pip=False)
    python = home / "bin" / "python"
    site = purelib(python)
    write_tree(
        site,
        "0.16.0",
        TARGET_MODELS,
    )
    (site / "vllm" / "__init__.py").write_text(VLLM_INIT)
    return python, site


def library(tmp_path: Path, site: Path, edits: dict[str, str | None]) -> Path:
    """A one-set library for 0.16.0 whose series makes `edits`, with the eagle3 set's probe script."""
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    root = write_library(tmp_path / "lib", {"0.16.0": [make_patch(scratch, site, edits)]})
    manifest = root / "demo" / "set.toml"
    manifest.write_text(
        manifest.read_text().replace('description = "test set"\n', 'description = "test set"\nprobe = "probe.py"\n')
    )
    shutil.copy(default_root() / "eagle3" / "probe.py", root / "demo" / "probe.py")
    return root


def probe_rows(result) -> list[dict]:
    return [c for c in json.loads(result.stdout)["checks"] if c["check"] == "probe"]


def test_probe_passes_when_patched(fake_vllm, tmp_path, run):
    python, site = fake_vllm
    lib = library(tmp_path, site, {f"{MODELS}/deepseek_v2.py": DEEPSEEK_PATCHED, f"{MODELS}/kimi_k25.py": KIMI_PATCHED})
    applied = run("apply", "--python", python, "--patches", lib, "--format", "json")
    assert applied.exit_code == 0, applied.output
    rows = probe_rows(applied)
    assert all(r["ok"] and r["level"] == "error" for r in rows), rows
    assert {r["path"] for r in rows} >= {f"{MODELS}/deepseek_v2.py", f"{MODELS}/kimi_k25.py"}
    messages = [r["message"] for r in rows]
    assert any(re.fullmatch(r"import vllm with \S+: \d+\.\d s \(the whole probe: \d+\.\d s\)", m) for m in messages)
    for name in ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "KimiK25ForConditionalGeneration"):
        assert f"{name}: supports_eagle3() is True" in messages

    verified = run("verify", "-v", "--python", python, "--patches", lib)
    assert verified.exit_code == 0, verified.output
    assert "KimiK25ForConditionalGeneration: supports_eagle3() is True" in verified.output
    assert not list(site.rglob("__pycache__")), "the probe must not leave bytecode in the target"


def test_the_checks_on_the_written_files_are_one_count(fake_vllm, tmp_path, run):
    """New-user trial 14, item 14: `written  1 check passed` (the bytecode), the probe's warning,
    then `written  0 checks passed, 1 warning`: two counts of the checks on the files written."""
    python, site = fake_vllm
    needs = "import flash_attn_nowhere\n" + DEEPSEEK_PATCHED
    lib = library(tmp_path, site, {f"{MODELS}/deepseek_v2.py": needs, f"{MODELS}/kimi_k25.py": KIMI_PATCHED})
    applied = run("apply", "--python", python, "--patches", lib)
    assert applied.exit_code == 0, applied.output
    written = [line for line in applied.stdout.splitlines() if line.startswith("written ")]
    assert len(written) == 1 and "2 warnings" in written[0], applied.stdout


def test_probe_failure_names_the_class_and_apply_rolls_back(fake_vllm, tmp_path, run):
    python, site = fake_vllm
    lib = library(tmp_path, site, {f"{MODELS}/deepseek_v2.py": DEEPSEEK_PATCHED})  # Kimi-K2.5 left out
    before = snapshot(site)
    applied = run("apply", "--python", python, "--patches", lib)
    assert applied.exit_code == 1
    assert "rolled back" in applied.output
    assert "KimiK25ForConditionalGeneration: supports_eagle3() is False" in applied.output
    assert "DeepseekV2ForCausalLM: supports_eagle3() is False" not in applied.output
    after = snapshot(site)
    after.pop("vllm/imported.mark")
    assert after == before


def test_patched_module_that_raises_is_an_error(fake_vllm, tmp_path, run):
    python, site = fake_vllm
    broken = DEEPSEEK_PATCHED + "\nLAYERS = int('all')\n"  # compiles and names are defined; fails on import
    lib = library(tmp_path, site, {f"{MODELS}/deepseek_v2.py": broken})
    applied = run("apply", "--python", python, "--patches", lib, "--format", "json")
    assert applied.exit_code == 1
    assert "rolled back" in applied.output
    assert f"ValueError: invalid literal for int() with base 10: 'all' (at {MODELS}/deepseek_v2.py:" in applied.output
    assert (site / MODELS / "deepseek_v2.py").read_text() == DEEPSEEK


def test_a_patched_module_imported_from_another_file_is_an_error_naming_both(fake_vllm, tmp_path, run):
    """A package whose `__path__` puts a stock copy first: the module imported is not the tree's file."""
    python, site = fake_vllm
    lib = library(tmp_path, site, {f"{MODELS}/deepseek_v2.py": DEEPSEEK_PATCHED, f"{MODELS}/kimi_k25.py": KIMI_PATCHED})
    assert run("apply", "--python", python, "--patches", lib).exit_code == 0
    elsewhere = tmp_path / "stock-models"
    elsewhere.mkdir()
    (elsewhere / "deepseek_v2.py").write_text(
        DEEPSEEK.replace("from .interfaces", "from vllm.model_executor.models.interfaces")
    )
    (site / MODELS / "__init__.py").write_text(f"__path__.insert(0, {str(elsewhere)!r})\n")
    verified = run("verify", "--python", python, "--patches", lib, "--format", "json")
    assert verified.exit_code != 0, verified.output
    failed = [r for r in probe_rows(verified) if not r["ok"]]
    assert [(r["path"], r["level"]) for r in failed] == [(f"{MODELS}/deepseek_v2.py", "error")], failed
    imported, tree_file = (elsewhere / "deepseek_v2.py").resolve(), (site / MODELS / "deepseek_v2.py").resolve()
    assert f"is imported from {imported}, not from {tree_file}" in failed[0]["message"]


def test_missing_dependency_in_a_patched_module_is_a_warning(fake_vllm, tmp_path, run):
    python, site = fake_vllm
    needs = "import flash_attn_nowhere\n" + DEEPSEEK_PATCHED
    lib = library(tmp_path, site, {f"{MODELS}/deepseek_v2.py": needs, f"{MODELS}/kimi_k25.py": KIMI_PATCHED})
    applied = run("apply", "--python", python, "--patches", lib, "--format", "json")
    assert applied.exit_code == 0, applied.output
    failed = [r for r in probe_rows(applied) if not r["ok"]]
    # kimi_k25 imports deepseek_v2, so it fails the same way
    assert [(r["path"], r["level"]) for r in failed] == [
        (f"{MODELS}/deepseek_v2.py", "warning"),
        (f"{MODELS}/kimi_k25.py", "warning"),
    ]
    assert all("No module named 'flash_attn_nowhere'" in r["message"] for r in failed)


def test_vllm_that_does_not_import_is_a_warning_not_a_pass(fake_vllm, tmp_path, run):
    python, site = fake_vllm
    lib = library(tmp_path, site, {f"{MODELS}/deepseek_v2.py": DEEPSEEK_PATCHED, f"{MODELS}/kimi_k25.py": KIMI_PATCHED})
    (site / "vllm" / "__init__.py").write_text("raise ImportError('libcudart.so.12: cannot open shared object file')\n")
    applied = run("apply", "--python", python, "--patches", lib, "--format", "json")
    assert applied.exit_code == 0, applied.output
    [row] = probe_rows(applied)
    assert not row["ok"] and row["level"] == "warning"
    assert "vLLM does not import" in row["message"] and "libcudart.so.12" in row["message"]
    assert "not import-tested" in row["message"]

    verified = run("verify", "--python", python, "--patches", lib)
    assert verified.exit_code == 0
    assert "warning" in verified.output and "libcudart.so.12" in verified.output


def test_no_import_skips_the_probe(fake_vllm, tmp_path, run):
    python, site = fake_vllm
    lib = library(tmp_path, site, {f"{MODELS}/deepseek_v2.py": DEEPSEEK_PATCHED})  # the probe would fail
    applied = run("apply", "--python", python, "--patches", lib, "--no-import", "--format", "json")
    assert applied.exit_code == 0, applied.output
    assert [(r["ok"], r["level"], r["message"]) for r in probe_rows(applied)] == [
        (True, "warning", "not run (--no-import)")
    ]
    verified = run("verify", "--python", python, "--patches", lib, "--no-import")
    assert verified.exit_code == 0, verified.output
    assert "skipped" in verified.output
    assert not (site / "vllm" / "imported.mark").exists()

    verified = run("verify", "--python", python, "--patches", lib)
    assert verified.exit_code == 1
    assert (site / "vllm" / "imported.mark").exists()


def test_probe_times_out_cleanly(fake_vllm, tmp_path, run, monkeypatch):
    python, site = fake_vllm
    slow = DEEPSEEK_PATCHED + "\nimport time\ntime.sleep(60)\n"
    lib = library(tmp_path, site, {f"{MODELS}/deepseek_v2.py": slow, f"{MODELS}/kimi_k25.py": KIMI_PATCHED})
    monkeypatch.setenv("PATCHKIT_PROBE_TIMEOUT", "2")
    started = time.monotonic()
    applied = run("apply", "--python", python, "--patches", lib, "--format", "json")
    assert time.monotonic() - started < 30
    assert applied.exit_code == 0, applied.output
    [row] = probe_rows(applied)
    assert not row["ok"] and row["level"] == "warning"
    assert "did not finish within 2 s" in row["message"]
    assert "while importing vllm.model_executor.models.deepseek_v2" in row["message"]
    assert "PATCHKIT_PROBE_TIMEOUT" in row["message"]


def test_bad_timeout_is_bad_input(fake_vllm, tmp_path, run, monkeypatch):
    python, site = fake_vllm
    lib = library(tmp_path, site, {f"{MODELS}/deepseek_v2.py": DEEPSEEK_PATCHED})
    run("apply", "--python", python, "--patches", lib, "--no-import")
    monkeypatch.setenv("PATCHKIT_PROBE_TIMEOUT", "soon")
    result = run("verify", "--python", python, "--patches", lib)
    assert result.exit_code == 2 and "PATCHKIT_PROBE_TIMEOUT" in result.output


def test_not_run_on_a_directory_or_before_the_files_are_written(fake_vllm, tmp_path, run):
    python, site = fake_vllm
    lib = library(tmp_path, site, {f"{MODELS}/deepseek_v2.py": DEEPSEEK_PATCHED, f"{MODELS}/kimi_k25.py": KIMI_PATCHED})
    planned = run("verify", "--python", python, "--patches", lib, "--format", "json")
    assert [r["message"] for r in probe_rows(planned)] == [
        "not run yet: nothing is written (it runs after apply, and by verify on an applied tree)"
    ]
    assert run("apply", "--target", site, "--patches", lib).exit_code == 0
    on_directory = run("verify", "--target", site, "--patches", lib, "--format", "json")
    assert on_directory.exit_code == 0
    [row] = probe_rows(on_directory)
    assert row["ok"] and row["level"] == "warning" and "the target is a directory" in row["message"]
    assert not (site / "vllm" / "imported.mark").exists()


def test_target_directory_with_an_interpreter_imports_the_tree(fake_vllm, tmp_path, run):
    """--target DIR --python X: the tree's files, imported with X (which has no vllm of its own)."""
    python, site = fake_vllm
    tree = write_tree(
        tmp_path / "tree",
        "0.16.0",
        TARGET_MODELS,
    )
    shutil.rmtree(site / "vllm")
    lib = library(tmp_path, tree, {f"{MODELS}/deepseek_v2.py": DEEPSEEK_PATCHED, f"{MODELS}/kimi_k25.py": KIMI_PATCHED})
    applied = run("apply", "--target", tree, "--python", python, "--patches", lib, "--format", "json")
    assert applied.exit_code == 0, applied.output
    rows = probe_rows(applied)
    assert len(rows) == 1 + 2 + 3 and all(r["ok"] for r in rows), rows


@pytest.mark.parametrize(
    ("path", "module"),
    [
        ("vllm/model_executor/models/deepseek_v2.py", "vllm.model_executor.models.deepseek_v2"),
        ("vllm/config/__init__.py", "vllm.config"),
        ("vllm/third_party/README.md", None),
        ("vllm/model_executor/layers/fused-moe/x.py", None),
    ],
)
def test_module_name(path, module):
    assert module_name(path) == module


def test_eagle3_probe_by_hand_checks_kimi_k25_from_0_15_0(fake_vllm):
    python, site = fake_vllm
    (site / MODELS / "deepseek_v2.py").write_text(DEEPSEEK_PATCHED)
    script = str(default_root() / "eagle3" / "probe.py")

    def by_hand(version):
        return subprocess.run([str(python), "-B", script, version], capture_output=True, text=True, cwd="/")

    older = by_hand("0.14.1")
    assert older.returncode == 0, older.stderr
    assert older.stdout.splitlines() == [
        "ok   DeepseekV2ForCausalLM: supports_eagle3() is True",
        "ok   DeepseekV3ForCausalLM: supports_eagle3() is True",
    ]
    newer = by_hand("0.16.0")
    assert newer.returncode == 1
    assert "FAIL KimiK25ForConditionalGeneration: supports_eagle3() is False" in newer.stdout


def test_probe_script_that_raises_is_an_error(fake_vllm, tmp_path, run):
    python, site = fake_vllm
    lib = library(tmp_path, site, {f"{MODELS}/deepseek_v2.py": DEEPSEEK_PATCHED, f"{MODELS}/kimi_k25.py": KIMI_PATCHED})
    (lib / "demo" / "probe.py").write_text("def probe(version):\n    raise KeyError('no such model')\n")
    applied = run("apply", "--python", python, "--patches", lib)
    assert applied.exit_code == 1 and "rolled back" in applied.output
    assert "probe script: KeyError: 'no such model'" in applied.output


def test_set_naming_a_missing_probe_script_is_bad_input(fake_vllm, tmp_path, run):
    python, site = fake_vllm
    lib = library(tmp_path, site, {f"{MODELS}/deepseek_v2.py": DEEPSEEK_PATCHED})
    (lib / "demo" / "probe.py").unlink()
    result = run("status", "--python", python, "--patches", lib)
    assert result.exit_code == 2 and "probe script" in result.output and "does not exist" in result.output


@pytest.mark.parametrize(
    ("ending", "how"),
    [
        ("import os\nos._exit(0)\n", "exited early, with status 0"),
        ("import os\nos.abort()\n", "was killed by SIGABRT"),
    ],
)
def test_a_patched_module_that_ends_the_probe_process_is_an_error_naming_it(fake_vllm, tmp_path, run, ending, how):
    """Only a warning before: a patched module that ends the interpreter while it is imported."""
    python, site = fake_vllm
    lib = library(tmp_path, site, {f"{MODELS}/kimi_k25.py": KIMI_PATCHED + ending})
    before = snapshot(site)
    applied = run("apply", "--python", python, "--patches", lib, "--format", "json")
    assert applied.exit_code == 1, applied.output
    [row] = [r for r in probe_rows(applied) if not r["ok"]]
    assert (row["path"], row["level"]) == (f"{MODELS}/kimi_k25.py", "error")
    assert f"the patched module vllm.model_executor.models.kimi_k25 ended the probe process: it {how}" in row["message"]
    after = snapshot(site)
    after.pop("vllm/imported.mark")
    assert after == before  # rolled back


def test_a_vllm_that_ends_the_process_on_import_stays_a_warning(fake_vllm, tmp_path, run):
    """`import vllm` itself ending the process is the environment's (a CUDA library that aborts...)."""
    python, site = fake_vllm
    lib = library(tmp_path, site, {f"{MODELS}/deepseek_v2.py": DEEPSEEK_PATCHED, f"{MODELS}/kimi_k25.py": KIMI_PATCHED})
    (site / "vllm" / "__init__.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    applied = run("apply", "--python", python, "--patches", lib, "--format", "json")
    assert applied.exit_code == 0, applied.output
    [row] = probe_rows(applied)
    assert (row["ok"], row["level"]) == (False, "warning")
    said = (
        "the probe was killed (SIGKILL: the kernel's out-of-memory killer, or another process) (while importing vllm)"
    )
    assert f"{said}: free memory, then run it again" in row["message"], row


@pytest.mark.parametrize("value", ["-3", "0", "nan", "1e400", "two minutes"])
def test_a_bad_probe_timeout_stops_apply_before_anything_is_written(fake_vllm, tmp_path, value):
    python, site = fake_vllm
    lib = library(tmp_path, site, {f"{MODELS}/deepseek_v2.py": DEEPSEEK_PATCHED, f"{MODELS}/kimi_k25.py": KIMI_PATCHED})
    before = snapshot(site)
    done = run_cli("apply", "--python", python, "--patches", lib, env={"PATCHKIT_PROBE_TIMEOUT": value})
    assert_clean_failure(done, 2)
    assert f"PATCHKIT_PROBE_TIMEOUT={value!r}" in done.stderr
    assert snapshot(site) == before and not (site / ".patchkit" / "state.json").exists()


def test_a_probe_script_that_ends_the_process_is_an_error(fake_vllm, tmp_path, run):
    python, site = fake_vllm
    lib = library(tmp_path, site, {f"{MODELS}/deepseek_v2.py": DEEPSEEK_PATCHED, f"{MODELS}/kimi_k25.py": KIMI_PATCHED})
    (lib / "demo" / "probe.py").write_text("import os\n\n\ndef probe(release):\n    os._exit(9)\n")
    applied = run("apply", "--python", python, "--patches", lib, "--format", "json")
    assert applied.exit_code == 1, applied.output
    [row] = [r for r in probe_rows(applied) if not r["ok"]]
    assert row["level"] == "error"
    assert "the set's probe script ended the probe process: it exited with status 9" in row["message"]


def test_a_vllm_path_holding_another_directory_is_an_error_naming_it(fake_vllm, tmp_path, run):
    """Review 7 H2's remainder: a `vllm.__path__` with another directory after the tree's (a module
    only there, or one a later entry shadows) passed the probe, its modules still the tree's."""
    python, site = fake_vllm
    lib = library(tmp_path, site, {f"{MODELS}/deepseek_v2.py": DEEPSEEK_PATCHED, f"{MODELS}/kimi_k25.py": KIMI_PATCHED})
    assert run("apply", "--python", python, "--patches", lib).exit_code == 0
    elsewhere = tmp_path / "more-vllm"
    elsewhere.mkdir()
    init = site / "vllm" / "__init__.py"
    init.write_text(init.read_text() + f"__path__.append({str(elsewhere)!r})\n")
    verified = run("verify", "--python", python, "--patches", lib, "--format", "json")
    assert verified.exit_code != 0, verified.output
    failed = [r for r in probe_rows(verified) if not r["ok"]]
    assert [r["level"] for r in failed] == ["error"], failed
    assert failed[0]["message"].startswith(
        f"vllm.__path__ holds {elsewhere} beside the tree's {(site / 'vllm').resolve()}"
    )
