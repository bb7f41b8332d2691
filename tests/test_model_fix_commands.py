"""The fix lines a missing model gets are commands and steps that work as given (review37 L-h, L-i): an
empty model directory names that directory unless moving away changes what vLLM reads (a relative hub
id shadowed by ./org/m); an `hf download` carries the launch's own cache variables and revision, so
that run as printed it fills the cache the launch reads."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import assert_clean_failure, run_cli_read_only
from launch_fixtures import DEEPSEEK_V3, DRAFTER, EMPTY_SAFETENSORS, write_eagle3_setup, write_model

from patchkit.launch.command import parse
from patchkit.launch.late_files import late_file_findings
from patchkit.launch.validation import missing_file_fix


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


# A stand-in `hf download`: the hub is a JSON file ({repo: {revision: [commit, {file: text}]}}); it
# records its argv and environment, and writes what huggingface_hub's would: into --cache-dir, else
# HF_HUB_CACHE, HUGGINGFACE_HUB_CACHE, HF_HOME/hub, XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub
# (huggingface_hub/constants.py), refs/REV naming the snapshot, the files asked for (else all).
STAND_IN_HF = textwrap.dedent("""\
    #!{python}
    import json, os, sys
    hub = json.load(open({hub!r}))
    with open({log!r}, "a") as log:
        log.write(json.dumps({{"argv": sys.argv[1:], "env": dict(os.environ)}}) + "\\n")
    args = sys.argv[1:]
    assert args[0] == "download", args
    words, options, at = [], {{}}, 1
    while at < len(args):
        if args[at] in ("--revision", "--cache-dir"):
            options[args[at]] = args[at + 1]
            at += 2
        elif args[at] == "--force-download":
            at += 1
        else:
            words.append(args[at])
            at += 1
    repo, files = words[0], words[1:]
    commit, remote = hub[repo][options.get("--revision", "main")]
    env = os.environ
    home = env.get("HF_HOME", os.path.join(env.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "huggingface"))
    cache = options.get("--cache-dir") or env.get("HF_HUB_CACHE", env.get("HUGGINGFACE_HUB_CACHE", os.path.join(home, "hub")))
    storage = os.path.join(os.path.expanduser(cache), "models--" + repo.replace("/", "--"))
    os.makedirs(os.path.join(storage, "refs"), exist_ok=True)
    with open(os.path.join(storage, "refs", options.get("--revision", "main")), "w") as ref:
        ref.write(commit)
    snapshot = os.path.join(storage, "snapshots", commit)
    os.makedirs(snapshot, exist_ok=True)
    for name in files or remote:
        with open(os.path.join(snapshot, name), "wb") as out:
            out.write(remote[name].encode("latin-1"))
    """)
CACHE_VARIABLES = ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "TRANSFORMERS_CACHE")
COMMIT_MAIN, COMMIT_V2 = "a" * 40, "b" * 40
ADAPTER = json.dumps({"r": 8, "lora_alpha": 16, "target_modules": ["q"]})
WEIGHTS = EMPTY_SAFETENSORS.decode("latin-1")
WHOLE = {"config.json": json.dumps(DEEPSEEK_V3), "model.safetensors": WEIGHTS}


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """(the stand-in's log, the hub it serves): `hf` first on PATH; HOME and the cache variables of
    patchkit's own environment made the test's, so that nothing is written outside it."""
    remote = {
        "org/m": {"main": [COMMIT_MAIN, WHOLE], "v2": [COMMIT_V2, WHOLE]},
        "org/d": {"r3": [COMMIT_V2, {**WHOLE, "config.json": json.dumps(DRAFTER)}]},
        "org/lora": {"main": [COMMIT_MAIN, {"adapter_config.json": ADAPTER, "adapter_model.safetensors": WEIGHTS}]},
        "org/gen": {"main": [COMMIT_MAIN, {**WHOLE, "generation_config.json": '{"top_p": 0.9}'}]},
    }
    (tmp_path / "hub.json").write_text(json.dumps(remote))
    bin_dir, log = tmp_path / "bin", tmp_path / "hf.log"
    bin_dir.mkdir()
    script = STAND_IN_HF.format(python=sys.executable, hub=str(tmp_path / "hub.json"), log=str(log))
    (bin_dir / "hf").write_text(script)
    (bin_dir / "hf").chmod(0o755)
    for name in CACHE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return log


def follow(fix: str, log: Path) -> tuple[list[str], dict[str, str]]:
    """Run the fix's first `command` as given, in patchkit's own environment; its argv and environment."""
    command = re.search(r"`([^`]*)`", fix)
    assert command is not None and command[1].startswith("hf download "), fix
    done = subprocess.run(["bash", "-c", command[1]], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    last = json.loads(log.read_text().splitlines()[-1])
    return last["argv"], last["env"]


def failed_models(target, launch: list[str], cwd: Path) -> list[dict]:
    tree, library = target
    done = run_cli_read_only(
        "preflight", "--target", tree, "--patches", library, "--format", "json", "--no-import", "--", *launch, cwd=cwd
    )
    assert done.returncode in (1, 4), done.stdout + done.stderr
    if done.returncode == 4:
        return [{"message": done.stderr, "fix": done.stderr}]
    return [f for f in json.loads(done.stdout)["findings"] if f["check"] == "models" and not f["ok"]]


def cached_config_only(cache: Path, repo: str, revision: str, commit: str, config: dict) -> None:
    storage = cache / ("models--" + repo.replace("/", "--"))
    (storage / "snapshots" / commit).mkdir(parents=True)
    (storage / "snapshots" / commit / "config.json").write_text(json.dumps(config))
    (storage / "refs").mkdir(exist_ok=True)
    (storage / "refs" / revision).write_text(commit)
    (storage / "refs" / "main").write_text(COMMIT_MAIN)


LAUNCH_CACHES = {  # the variable the launch's `env` sets, and the hub cache it makes huggingface_hub read
    "HF_HUB_CACHE": lambda value: value,
    "HF_HOME": lambda value: value / "hub",
    "XDG_CACHE_HOME": lambda value: value / "huggingface" / "hub",
}


@pytest.mark.parametrize("variable", sorted(LAUNCH_CACHES))
def test_an_offline_snapshot_without_weights_is_fetched_into_the_launch_s_cache_at_its_revision(
    target, tmp_path, hub, variable
):
    """The reproduction: an offline launch's cached snapshot of config.json alone at --revision v2; the
    fix was `hf download org/m`, which fills ~/.cache at main. Followed now, the launch finds the weights."""
    value = tmp_path / "launch-cache"
    cached_config_only(LAUNCH_CACHES[variable](value), "org/m", "v2", COMMIT_V2, DEEPSEEK_V3)
    launch = ["env", "HF_HUB_OFFLINE=1", f"{variable}={value}", "vllm", "serve", "org/m", "--revision", "v2"]
    [finding] = failed_models(target, launch, tmp_path)
    assert "no weight file vLLM loads" in finding["message"], finding
    argv, _ = follow(finding["fix"], hub)
    assert argv == ["download", "org/m", "--revision", "v2", "--cache-dir", str(LAUNCH_CACHES[variable](value))]
    assert failed_models(target, launch, tmp_path) == []
    assert not (tmp_path / "home" / ".cache").exists()


@pytest.mark.parametrize("variable", [*sorted(LAUNCH_CACHES), "TRANSFORMERS_CACHE"])
def test_an_uncached_config_is_fetched_into_the_launch_s_cache_at_its_revision(target, tmp_path, hub, variable):
    """Online, not cached: `hf download org/m config.json --revision v2` kept the revision but filled the
    default cache, where neither patchkit nor vLLM (transformers: TRANSFORMERS_CACHE first) looks."""
    value = tmp_path / "launch-cache"
    launch = ["env", f"{variable}={value}", "vllm", "serve", "org/m", "--revision", "v2"]
    [finding] = failed_models(target, launch, tmp_path)
    cache = value if variable == "TRANSFORMERS_CACHE" else LAUNCH_CACHES[variable](value)
    argv, _ = follow(finding["fix"], hub)
    assert argv == ["download", "org/m", "config.json", "--revision", "v2", "--cache-dir", str(cache)]
    assert failed_models(target, launch, tmp_path) == []  # online: vLLM downloads the weights


def test_an_offline_drafter_is_fetched_at_its_revision_key_into_the_cache_vllm_reads(target, tmp_path, hub):
    model = write_model(tmp_path / "ds", DEEPSEEK_V3)
    (model / "model.safetensors").write_bytes(EMPTY_SAFETENSORS)
    cached_config_only(tmp_path / "hh" / "hub", "org/d", "r3", COMMIT_V2, DRAFTER)
    spec = {"method": "eagle3", "model": "org/d", "revision": "r3", "num_speculative_tokens": 3}
    launch = ["env", "HF_HUB_OFFLINE=1", f"HF_HOME={tmp_path / 'hh'}", "vllm", "serve", str(model)]
    launch += ["--speculative-config", json.dumps(spec)]
    [finding] = failed_models(target, launch, tmp_path)
    assert finding["message"].startswith("drafter 'org/d'"), finding
    argv, _ = follow(finding["fix"], hub)
    assert argv == ["download", "org/d", "--revision", "r3", "--cache-dir", str(tmp_path / "hh" / "hub")]
    assert failed_models(target, launch, tmp_path) == []


def test_the_cache_patchkit_itself_runs_with_is_left_to_the_plain_command(target, tmp_path, hub, monkeypatch):
    """The same cache in patchkit's environment as in the launch's: the plain command inherits it."""
    value = tmp_path / "launch-cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(value))
    cached_config_only(value, "org/m", "v2", COMMIT_V2, DEEPSEEK_V3)
    launch = ["env", "HF_HUB_OFFLINE=1", f"HF_HUB_CACHE={value}", "vllm", "serve", "org/m", "--revision", "v2"]
    [finding] = failed_models(target, launch, tmp_path)
    argv, env = follow(finding["fix"], hub)
    assert argv == ["download", "org/m", "--revision", "v2"] and env["HF_HUB_CACHE"] == str(value)
    assert failed_models(target, launch, tmp_path) == []


def test_an_offline_lora_adapter_is_fetched_into_the_launch_s_cache(tmp_path, hub):
    cache = tmp_path / "adapters cache"
    argv = ["env", "HF_HUB_OFFLINE=1", f"HF_HUB_CACHE={cache}", sys.executable, "-m", "vllm.entrypoints.cli.main"]
    argv += ["serve", "m", "--enable-lora", "--lora-modules", "a=org/lora"]
    [finding] = late_file_findings(parse(argv, "0.16.0"), "command", lambda: "utf-8")
    assert "holds no snapshot of it" in finding.message and finding.fix is not None, finding
    said, _ = follow(finding.fix, hub)
    assert said == ["download", "org/lora", "--cache-dir", str(cache)]
    assert [f for f in late_file_findings(parse(argv, "0.16.0"), "command", lambda: "utf-8") if not f.ok] == []


def test_an_offline_generation_config_hub_id_is_fetched_into_the_launch_s_cache(tmp_path, hub):
    """lows28: the fix said only "give a directory holding generation_config.json"; now the `hf download`
    of the two files vLLM reads of it (generation_config.json, else config.json), into the launch's cache."""
    cache = tmp_path / "gen cache"
    argv = ["env", "HF_HUB_OFFLINE=1", f"HF_HUB_CACHE={cache}", "vllm", "serve", "m", "--generation-config", "org/gen"]
    [finding] = late_file_findings(parse(argv, "0.16.0"), "command", lambda: "utf-8")
    assert f"{cache} holds no snapshot of it" in finding.message and finding.fix is not None, finding
    said, _ = follow(finding.fix, hub)
    assert said == ["download", "org/gen", "generation_config.json", "config.json", "--cache-dir", str(cache)]
    assert [f for f in late_file_findings(parse(argv, "0.16.0"), "command", lambda: "utf-8") if not f.ok] == []
    assert finding.fix.endswith(
        ", or give a directory holding generation_config.json (or a model's config.json), or auto / vllm"
    )


def test_a_remote_code_file_is_fetched_into_transformers_cache_at_the_revision(tmp_path, hub):
    cache = tmp_path / "tc"
    argv = ["env", f"TRANSFORMERS_CACHE={cache}", "vllm", "serve", "org/m", "--revision", "v2", "--trust-remote-code"]
    fix = missing_file_fix(parse(argv, "0.16.0"), "model.safetensors")
    said, _ = follow(fix, hub)
    assert said == [
        "download",
        "org/m",
        "config.json",
        "model.safetensors",
        "--revision",
        "v2",
        "--cache-dir",
        str(cache),
    ]
    assert (cache / "models--org--m" / "snapshots" / COMMIT_V2 / "model.safetensors").is_file()
