"""The fix lines a missing model gets are commands and steps that work as given (review37 L-h, L-i): an
empty model directory names that directory unless moving away changes what vLLM reads (a relative hub
id shadowed by ./org/m); an `hf download` carries the launch's own cache variables and revision, so
that run as printed it fills the cache the launch reads."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import assert_clean_failure, run_cli_read_only
from launch_fixtures import write_eagle3_setup


@pytest.fixture
def target(tmp_path):
    return write_eagle3_setup(tmp_path)


def preflight(target: tuple[Path, Path], *launch: str, cwd: Path, env: dict[str, str] | None = None):
    tree, library = target
    return run_cli_read_only(
        "preflight", "-q", "--target", tree, "--patches", library, "--no-import", "--", *launch, env=env, cwd=cwd
    )


def model_finding(done) -> tuple[str, str]:
    """The models finding's line and its fix line (-q: a failure's findings go to stderr)."""
    lines = done.stderr.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("models: "))
    assert lines[at + 1].startswith("  fix: "), done.stderr
    return lines[at], lines[at + 1].removeprefix("  fix: ")


@pytest.mark.parametrize("name", ["empty", "模型", "é-model", "ǅ🙂"])
def test_an_absolute_path_without_config_json_is_told_to_fill_that_directory(target, tmp_path, name):
    """The reproduction: `vllm serve /abs/empty` was told "run from another directory, or give the
    model's full path", which no directory and no path changes."""
    empty = tmp_path / "models" / name
    empty.mkdir(parents=True)
    done = preflight(target, "vllm", "serve", str(empty), cwd=tmp_path)
    assert_clean_failure(done, 4)
    said, fix = model_finding(done)
    assert f"the directory {empty} has no config.json" in said
    assert fix == f"put the model's config.json and weights into {empty}, or give the directory that holds them"


@pytest.mark.parametrize("name", ["./lab/ds", "lab/ds/", "a/b/c", "lab--x"])
def test_a_relative_name_no_hub_id_is_told_to_fill_that_directory(target, tmp_path, name):
    """A relative name huggingface_hub refuses as a repo id is a path wherever it is run: moving away only
    loses the directory."""
    (tmp_path / "work" / name).mkdir(parents=True)
    done = preflight(target, "vllm", "serve", name, cwd=tmp_path / "work")
    assert_clean_failure(done, 4)
    _, fix = model_finding(done)
    assert fix.startswith(f"put the model's config.json and weights into {(tmp_path / 'work' / name).resolve()},")
    assert "run from" not in fix


def test_a_hub_id_shadowed_by_a_local_directory_may_be_run_elsewhere(target, tmp_path):
    (tmp_path / "work" / "lab" / "ds").mkdir(parents=True)
    done = preflight(target, "vllm", "serve", "lab/ds", cwd=tmp_path / "work")
    assert_clean_failure(done, 4)
    _, fix = model_finding(done)
    assert fix.startswith("run from a directory without lab/ds in it (vLLM then takes it as a hub id), or put ")
    assert f"into {tmp_path / 'work' / 'lab' / 'ds'}" in fix


def test_an_empty_hf_config_path_directory_is_told_to_hold_config_json(target, tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    (tmp_path / "cfg").mkdir()
    done = preflight(
        target, "vllm", "serve", str(tmp_path / "model"), "--hf-config-path", str(tmp_path / "cfg"), cwd=tmp_path
    )
    assert_clean_failure(done, 4)
    _, fix = model_finding(done)
    assert (
        fix == f"put the model's config.json into {tmp_path / 'cfg'}, or give --hf-config-path the directory holding it"
    )


@pytest.mark.parametrize("locale", ["C", "C.UTF-8"])
def test_non_ascii_model_directories_print_as_they_are(target, tmp_path, locale):
    empty = tmp_path / "模型 é ǅ🙂"
    empty.mkdir()
    done = preflight(target, "vllm", "serve", str(empty), cwd=tmp_path, env={"LC_ALL": locale})
    assert_clean_failure(done, 4)
    _, fix = model_finding(done)
    assert fix.startswith(f"put the model's config.json and weights into {empty}, ")


@pytest.mark.parametrize(("name", "elsewhere"), [("lab/m", True), ("m.bin", True), ("./m.bin", False), ("abs", False)])
def test_a_file_named_as_the_model_offers_running_elsewhere_only_for_a_relative_hub_id(
    target, tmp_path, name, elsewhere
):
    """L-h's class: an existing file vLLM refuses as the model; no working directory changes an absolute
    path (or a name that is no hub id), so only `lab/m` or `m.bin` may be run from another directory."""
    work = tmp_path / "work"
    (work / "lab").mkdir(parents=True)
    given = str(work / "m.bin") if name == "abs" else name
    (work / given).write_bytes(b"not a model")
    done = preflight(target, "vllm", "serve", given, cwd=work)
    assert_clean_failure(done, 4)
    said, fix = model_finding(done)
    assert "is a file, not a model directory" in said
    assert fix.startswith("give the model's directory")
    assert ("run from a directory where that name is no file" in fix) is elsewhere
