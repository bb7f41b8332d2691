"""review34 F8: a target or drafter given as a local directory (or, offline, a cached snapshot) in which
vLLM's DefaultModelLoader finds no weight file to load fails `models` before the launch, with the fix:
vLLM fails it only once the load begins (a drafter: after the target's whole load). The layouts are
held against the real vLLM 0.16.0 loader in tests/vllm_import/test_weights_real.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import run_cli_read_only
from launch_fixtures import (
    DEEPSEEK_V3,
    DRAFTER,
    EMPTY_SAFETENSORS,
    INDEX,
    LAYOUTS,
    LFS_POINTER,
    ONE_TENSOR,
    WEIGHTS,
    index_of,
    safetensors_file,
    serve,
    torch_file,
    write_eagle3_setup,
    write_layout,
    write_model,
)

from patchkit.launch import weights
from patchkit.launch.weights import weights_problem


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_directory_holds_weights_vllm_loads_exactly_when_it_does(tmp_path, layout):
    files, load_format, loads = LAYOUTS[layout]
    directory = write_layout(tmp_path / "m", files)
    problem = weights_problem(str(directory), load_format)
    assert (problem is None) is loads, problem


def test_a_loader_that_reads_no_such_files_is_not_judged(tmp_path):
    for load_format in ("dummy", "tensorizer", "gguf", "bitsandbytes", "runai_streamer", "sharded_state"):
        assert weights_problem(str(tmp_path), load_format) is None


def preflight(tree: Path, library: Path, *command: str, env: dict[str, str] | None = None):
    return run_cli_read_only(
        "preflight", "--target", tree, "--patches", library, "--format", "json", "--no-import", "--", *command, env=env
    )


def models_findings(done) -> list[dict]:
    """The failed ones (weights judged loadable are a passing models finding)."""
    return [f for f in json.loads(done.stdout)["findings"] if f["check"] == "models" and not f["ok"]]


def test_a_drafter_directory_without_weights_fails_models_with_the_fix(tmp_path):
    """The reproduction: an EAGLE-3 drafter of config.json alone; then with a weight file it passes."""
    tree, library = write_eagle3_setup(tmp_path)
    target = write_model(tmp_path / "ds", DEEPSEEK_V3)
    drafter = write_model(tmp_path / "dr", DRAFTER)
    (drafter / WEIGHTS).unlink()
    done = preflight(tree, library, *serve(target, drafter))
    [finding] = models_findings(done)
    assert done.returncode == 1 and finding["ok"] is False, done.stdout
    assert finding["message"].startswith(f"drafter '{drafter}': no weight file vLLM loads"), finding
    assert "the launch fails once the target has loaded" in finding["message"], finding
    assert finding["fix"] == f"put the drafter's weights into {drafter} (or give the directory that holds them)"
    (drafter / "model.safetensors").write_bytes(EMPTY_SAFETENSORS)
    assert models_findings(preflight(tree, library, *serve(target, drafter))) == []


def test_a_training_file_vllm_stops_at_before_the_weights_is_named_with_moving_it_away_as_the_fix(tmp_path):
    """training_args.bin beside pytorch_model.pt: vLLM's glob stops at *.bin, filters training_args.bin
    out and finds nothing; the fix was "put the model's weights into DIR", where they are."""
    tree, library = write_eagle3_setup(tmp_path)
    target = write_model(tmp_path / "ds", DEEPSEEK_V3)
    (target / WEIGHTS).unlink()
    (target / "pytorch_model.pt").write_bytes(torch_file())
    (target / "training_args.bin").write_bytes(torch_file())
    done = preflight(tree, library, *serve(target, write_model(tmp_path / "dr", DRAFTER)))
    [finding] = models_findings(done)
    assert "vLLM stops at *.bin (training_args.bin: before *.pt, where the weights are)" in finding["message"]
    assert finding["fix"] == f"move training_args.bin out of {target} (vLLM then reaches the weights)", finding
    (target / "training_args.bin").rename(tmp_path / "training_args.bin")
    assert models_findings(preflight(tree, library, *serve(target, write_model(tmp_path / "dr", DRAFTER)))) == []


def test_a_target_missing_a_shard_its_index_names_fails_and_a_dummy_load_is_not_judged(tmp_path):
    tree, library = write_eagle3_setup(tmp_path)
    target = write_model(tmp_path / "ds", DEEPSEEK_V3)
    drafter = write_model(tmp_path / "dr", DRAFTER)
    (target / INDEX).write_text(index_of(WEIGHTS, "model-2.safetensors"))
    [finding] = models_findings(preflight(tree, library, *serve(target, drafter)))
    assert finding["message"] == (
        f"model '{target}': {INDEX} names model-2.safetensors, not there: the load fails at its start"
    ), finding
    assert models_findings(preflight(tree, library, *serve(target, drafter, "--load-format", "dummy"))) == []
    (target / "model-2.safetensors").write_bytes(EMPTY_SAFETENSORS)
    assert models_findings(preflight(tree, library, *serve(target, drafter))) == []


def cached(hub: Path, name: str, files: dict[str, str]) -> Path:
    commit = "c" * 40
    repo = hub / ("models--" + name.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    return write_layout(repo / "snapshots" / commit, files)


def test_an_offline_hub_drafter_is_judged_on_its_cached_snapshot_and_an_online_one_not(tmp_path):
    tree, library = write_eagle3_setup(tmp_path)
    target = write_model(tmp_path / "ds", DEEPSEEK_V3)
    hub = tmp_path / "hub"
    snapshot = cached(hub, "lab/drafter", {"config.json": json.dumps(DRAFTER)})
    env = {"HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1"}
    [finding] = models_findings(preflight(tree, library, *serve(target, "lab/drafter"), env=env))
    message = finding["message"]  # the snapshot's long path shortened in the middle
    assert message.startswith(f"drafter 'lab/drafter' (its cached snapshot {str(snapshot)[:20]}"), finding
    assert "): no weight file vLLM loads (*.safetensors, *.bin, *.pt): the launch fails once" in message, finding
    assert "`hf download lab/drafter`" in finding["fix"], finding
    online = {**env, "HF_HUB_OFFLINE": "0"}
    assert models_findings(preflight(tree, library, *serve(target, "lab/drafter"), env=online)) == []
    (snapshot / "model.safetensors").write_bytes(EMPTY_SAFETENSORS)
    assert models_findings(preflight(tree, library, *serve(target, "lab/drafter"), env=env)) == []


def test_an_offline_hub_target_is_judged_on_the_snapshot_vllm_takes(tmp_path):
    tree, library = write_eagle3_setup(tmp_path)
    drafter = write_model(tmp_path / "dr", DRAFTER)
    hub = tmp_path / "hub"
    snapshot = cached(hub, "lab/ds", {"config.json": json.dumps(DEEPSEEK_V3), "training_args.bin": torch_file()})
    env = {"HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1"}
    [finding] = models_findings(preflight(tree, library, *serve("lab/ds", drafter), env=env))
    message = finding["message"]
    assert message.startswith(f"model 'lab/ds' (its cached snapshot {str(snapshot)[:20]}"), finding
    assert "): no weight file vLLM loads (*.safetensors, *.bin, *.pt): the load fails at its start" in message, finding
    assert "`hf download lab/ds`" in finding["fix"], finding
    os.symlink(snapshot / "training_args.bin", snapshot / "pytorch_model.bin")
    assert models_findings(preflight(tree, library, *serve("lab/ds", drafter), env=env)) == []


def test_a_drafter_cloned_without_git_lfs_fails_models_with_git_lfs_pull(tmp_path):
    """review35 N6: every weight file a Git LFS pointer's text (vLLM's safetensors reader: "header too
    large", once the target has loaded); then a directory named like a weight file, then the file whole."""
    tree, library = write_eagle3_setup(tmp_path)
    target = write_model(tmp_path / "ds", DEEPSEEK_V3)
    drafter = write_model(tmp_path / "dr", DRAFTER)
    (drafter / WEIGHTS).write_text(LFS_POINTER)
    done = preflight(tree, library, *serve(target, drafter))
    [finding] = models_findings(done)
    assert done.returncode == 1, done.stdout
    assert finding["message"] == (
        f"drafter '{drafter}': model.safetensors is a Git LFS pointer (cloned without git-lfs?): "
        "the launch fails once the target has loaded"
    ), finding
    assert finding["fix"].startswith(f"run `git lfs pull` in {drafter}"), finding
    (drafter / WEIGHTS).unlink()
    (drafter / WEIGHTS).mkdir()
    [finding] = models_findings(preflight(tree, library, *serve(target, drafter)))
    assert "model.safetensors is a directory, not a file" in finding["message"], finding
    assert (
        finding["fix"]
        == f"put the drafter's weights into {drafter} again, whole (or give the directory that holds them)"
    )
    (drafter / WEIGHTS).rmdir()
    (drafter / WEIGHTS).write_bytes(safetensors_file(ONE_TENSOR, 8))
    assert models_findings(preflight(tree, library, *serve(target, drafter))) == []


def test_a_cut_short_shard_of_an_offline_snapshot_is_named_with_a_forced_download(tmp_path):
    """Every shard the index names is read to its header: one cut short (a partial download) fails."""
    tree, library = write_eagle3_setup(tmp_path)
    drafter = write_model(tmp_path / "dr", DRAFTER)
    shards = {name: safetensors_file(ONE_TENSOR, 8) for name in ("a.safetensors", "b.safetensors", "c.safetensors")}
    files = {"config.json": json.dumps(DEEPSEEK_V3), INDEX: index_of(*shards), **shards}
    snapshot = cached(tmp_path / "hub", "lab/ds", files)
    (snapshot / "b.safetensors").write_bytes(safetensors_file(ONE_TENSOR, 3))
    (snapshot / "c.safetensors").write_bytes(b"")
    env = {"HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    [finding] = models_findings(preflight(tree, library, *serve("lab/ds", drafter), env=env))
    assert finding["message"].endswith(
        "b.safetensors is cut short (its header declares 8 bytes of tensors, the file holds 3)"
        " (and 1 more weight files): the load fails at its start"
    ), finding
    assert "`hf download lab/ds --force-download`" in finding["fix"], finding


@pytest.mark.parametrize("load_format", ["auto", "safetensors", "fastsafetensors", "hf"])
def test_safetensors_header_rules_hold_for_every_safetensors_load_format(tmp_path, load_format):
    directory = write_layout(tmp_path / "m", {"model.safetensors": safetensors_file({}, 0, length=100_000_001)})
    assert "over safetensors' 100000000" in str(weights_problem(str(directory), load_format))
    (directory / "model.safetensors").write_bytes(safetensors_file(ONE_TENSOR, 4))
    assert "is cut short" in str(weights_problem(str(directory), load_format))
    (directory / "model.safetensors").write_bytes(safetensors_file(ONE_TENSOR, 9))  # fastsafetensors takes padding
    assert (weights_problem(str(directory), load_format) is None) is (load_format == "fastsafetensors")


def test_a_fifo_or_a_device_as_a_weight_file_is_refused_without_waiting(tmp_path):
    directory = write_layout(tmp_path / "m", {})
    os.mkfifo(directory / "model.safetensors")
    assert weights_problem(str(directory), "auto") == "model.safetensors is not a regular file (a fifo or a device)"
    (directory / "model.safetensors").unlink()
    (directory / "pytorch_model.bin").symlink_to("/dev/zero")
    assert weights_problem(str(directory), "auto") == "pytorch_model.bin is not a regular file (a fifo or a device)"


def all_models_findings(done) -> list[dict]:
    return [f for f in json.loads(done.stdout)["findings"] if f["check"] == "models"]


@pytest.mark.parametrize("load_format", ["tensorizer", "runai_streamer", "gguf", "bitsandbytes", "my_plugin_format"])
def test_a_load_format_patchkit_does_not_read_is_said_as_cannot_judge_never_an_ok(tmp_path, load_format):
    """Review38 B10: the models finding vanished for such a format and preflight said "ok"."""
    tree, library = write_eagle3_setup(tmp_path)
    launch = serve(write_model(tmp_path / "ds", DEEPSEEK_V3), write_model(tmp_path / "dr", DRAFTER))
    done = preflight(tree, library, *launch, "--load-format", load_format)
    [finding] = all_models_findings(done)
    assert finding["result"] == "cannot judge", finding
    assert f"--load-format {load_format}: patchkit does not read what that loader loads" in finding["message"]


@pytest.mark.parametrize("tp", ["1", "2"])
def test_sharded_state_needs_each_ranks_pre_sharded_files_in_the_target_and_the_drafter(tmp_path, tp):
    """vLLM loads the drafter with the launch's own loader after the target: a hub drafter is not
    pre-sharded, and ShardedStateLoader raises "Could not find checkpoint files" (review38 B10)."""
    tree, library = write_eagle3_setup(tmp_path)
    target, drafter = write_model(tmp_path / "ds", DEEPSEEK_V3), write_model(tmp_path / "dr", DRAFTER)
    launch = [*serve(target, drafter), "--load-format", "sharded_state", "-tp", tp]
    for rank in range(int(tp)):
        (target / f"model-rank-{rank}-part-0.safetensors").write_bytes(EMPTY_SAFETENSORS)
    [finding] = models_findings(preflight(tree, library, *launch))
    assert finding["message"].startswith(f"drafter '{drafter}': no pre-sharded checkpoint files model-rank-0-part-*")
    assert "pre-shard it too" in finding["fix"] and "save_sharded_state.py" in finding["fix"], finding
    for rank in range(int(tp)):
        (drafter / f"model-rank-{rank}-part-0.safetensors").write_bytes(EMPTY_SAFETENSORS)
    assert models_findings(preflight(tree, library, *launch)) == []
    (target / f"model-rank-{int(tp) - 1}-part-0.safetensors").unlink()  # one rank's files missing
    [finding] = models_findings(preflight(tree, library, *launch))
    assert f"model-rank-{int(tp) - 1}-part-*" in finding["message"] and finding["message"].startswith("model ")


def test_sharded_state_follows_the_pattern_of_model_loader_extra_config(tmp_path):
    tree, library = write_eagle3_setup(tmp_path)
    target, drafter = write_model(tmp_path / "ds", DEEPSEEK_V3), write_model(tmp_path / "dr", DRAFTER)
    for directory in (target, drafter):
        (directory / "shard-0-of-x-0.safetensors").write_bytes(EMPTY_SAFETENSORS)
    extra = json.dumps({"pattern": "shard-{rank}-of-x-{part}.safetensors"})
    launch = [*serve(target, drafter), "--load-format", "sharded_state", "-tp", "1"]
    assert len(models_findings(preflight(tree, library, *launch))) == 2  # the default pattern: none there
    assert models_findings(preflight(tree, library, *launch, "--model-loader-extra-config", extra)) == []


def test_weights_only_of_a_format_the_launchs_load_format_leaves_out_name_dropping_it(tmp_path):
    """Review38 B2: --load-format safetensors and a drafter of pytorch_model.bin alone: the fix was "put
    the drafter's weights into DIR", where they are."""
    tree, library = write_eagle3_setup(tmp_path)
    drafter = write_model(tmp_path / "dr", DRAFTER)
    (drafter / WEIGHTS).unlink()
    (drafter / "pytorch_model.bin").write_bytes(torch_file())
    launch = serve(write_model(tmp_path / "ds", DEEPSEEK_V3), drafter)
    [finding] = models_findings(preflight(tree, library, *launch, "--load-format", "safetensors"))
    assert "it holds pytorch_model.bin, which it leaves out" in finding["message"], finding
    assert finding["fix"].startswith("drop --load-format safetensors (auto loads pytorch_model.bin)"), finding
    assert models_findings(preflight(tree, library, *launch)) == []  # auto: loaded
    config = tmp_path / "serve.yaml"  # given in the launch's --config file: dropped there (no such option to drop)
    config.write_text("load_format: safetensors\n")
    [finding] = models_findings(preflight(tree, library, *launch, "--config", str(config)))
    assert finding["fix"].startswith(f"drop load_format from {config} (the --config file) (auto loads"), finding


@pytest.mark.parametrize(
    ("load_format", "held", "said"),
    [
        ("pt", "pytorch_model.bin", "no weight file --load-format pt loads (*.pt); it holds pytorch_model.bin"),
        ("npcache", "model.safetensors", "no weight file --load-format npcache loads (*.bin, *.pt); it holds model."),
        ("hf", "optimizer.bin", "no weight file vLLM loads (*.safetensors, *.bin, *.pt)"),
    ],
)
def test_a_directory_without_the_formats_weights_is_listed_once_per_pattern(
    tmp_path, monkeypatch, load_format, held, said
):
    """The other-format question of a failure asked again the patterns the format's own globs had
    (npcache: *.bin and *.pt twice; a directory of many files is read once per glob)."""
    (tmp_path / held).write_bytes(b"x")
    asked: list[str] = []
    real = weights.glob.glob
    monkeypatch.setattr(weights.glob, "glob", lambda pattern: asked.append(os.path.basename(pattern)) or real(pattern))
    assert str(weights_problem(str(tmp_path), load_format)).startswith(said)
    assert sorted(asked) == sorted(set(asked)), asked


def _many_files(directory: Path, count: int) -> None:
    """`count` empty files under directory/cache (a cached data set, say): inodes only, no data."""
    (directory / "cache").mkdir()
    for i in range(count):
        os.mknod(directory / "cache" / f"s{i:06d}.arrow")


def test_a_drafter_tree_past_the_walk_bound_is_never_a_silent_pass(tmp_path):
    """review39 C10: past WALK_LIMIT files, which format vLLM's auto loads is not told (Mistral's, for a
    consolidated*.safetensors at any depth): the models finding vanished, and an LFS pointer passed. Neither
    format loads then: it fails; the weights loadable by one: "cannot judge", with what lets it judge."""
    tree, library = write_eagle3_setup(tmp_path)
    target = write_model(tmp_path / "ds", DEEPSEEK_V3)
    drafter = write_model(tmp_path / "dr", DRAFTER)
    (drafter / WEIGHTS).write_text(LFS_POINTER)
    _many_files(drafter, weights.WALK_LIMIT + 50)
    done = preflight(tree, library, *serve(target, drafter))
    [finding] = models_findings(done)
    assert done.returncode == 1, done.stdout
    assert "model.safetensors is a Git LFS pointer" in finding["message"], finding
    assert finding["fix"].startswith(f"run `git lfs pull` in {drafter}"), finding
    (drafter / WEIGHTS).write_bytes(safetensors_file(ONE_TENSOR, 8))
    done = preflight(tree, library, *serve(target, drafter))
    assert models_findings(done) == [], done.stdout
    [said] = [f for f in json.loads(done.stdout)["findings"] if f["check"] == "models" and "dr'" in f["message"]]
    assert said["result"] == "cannot judge", said
    assert f"more than {weights.WALK_LIMIT:,} files under it" in said["message"], said
    assert str(drafter) in said["fix"], said
