"""`patchkit preflight` on the real files of every release the eagle3 set supports (fetched with
patchkit's fetcher), with DeepSeek-V3- and Kimi-K2.5-like configs and the seed's command shape: on the
stock files every fault is named in one run, each fixed by `patchkit apply`; after apply the launch
passes. Kimi-K2.5 (KimiK25ForConditionalGeneration) is registered from 0.15.0 on: before, the set
does not bring it, and the preflight says the architecture is not registered."""

from __future__ import annotations

import json

import pytest
from helpers import assert_clean_failure, lay_out_release, run_cli
from launch_fixtures import DEEPSEEK_V3, DRAFTER, KIMI_DRAFTER, KIMI_K25, REGISTRY, WEIGHTS, serve, write_model
from packaging.version import Version

from patchkit.launch.ray_nodes import PARALLEL, picks_ray_itself
from patchkit.releases.files import files_for

pytestmark = pytest.mark.release

RELEASES = ["0.11.0", "0.11.1", "0.11.2", "0.12.0", "0.13.0", "0.14.0", "0.14.1", "0.15.0", "0.15.1", "0.16.0"]
RELEASES += ["0.17.0", "0.17.1"]
STOCK_FAULTS = {"tree-state", "whitelist", "supports-eagle3"}
KIMI_K25_SINCE = Version("0.15.0")
MODEL_CONFIG_CLASSES = "vllm/model_executor/models/config.py"


def failed(done) -> dict[str, dict]:
    return {f["check"]: f for f in json.loads(done.stdout)["findings"] if not f["ok"]}


@pytest.mark.parametrize("release", RELEASES)
def test_stock_release_names_every_fault_and_passes_after_apply(tmp_path, release):
    site = tmp_path / "site"
    lay_out_release(release, sorted({*files_for(release), REGISTRY}), site)
    # each target its own drafter: one trained for another's vocabulary is a fault of its own (drafter-vocabulary)
    deepseek = serve(write_model(tmp_path / "deepseek", DEEPSEEK_V3), write_model(tmp_path / "drafter", DRAFTER))
    kimi = serve(write_model(tmp_path / "kimi", KIMI_K25), write_model(tmp_path / "kimi-drafter", KIMI_DRAFTER))
    kimi_registered = Version(release) >= KIMI_K25_SINCE
    preflight = ["preflight", "--target", site, "--format", "json", "--no-import", "--"]

    done = run_cli(*preflight, *deepseek)
    assert_clean_failure(done, 1)
    assert set(failed(done)) == STOCK_FAULTS
    # eagle3 declares which launches need it ([needed_by]): its fix names it, `apply` alone would apply every set
    assert {f["fix"] for f in failed(done).values()} == {f"run `patchkit apply --target {site} --set eagle3`"}
    done = run_cli(*preflight, *kimi)
    assert_clean_failure(done, 1)
    if kimi_registered:
        assert set(failed(done)) == STOCK_FAULTS | {"image-token"}
    else:  # vLLM would build its Transformers backend, whose files this layout lacks: never a pass
        assert set(failed(done)) == STOCK_FAULTS - {"supports-eagle3"}
        [backend] = [f for f in json.loads(done.stdout)["findings"] if f["check"] == "supports-eagle3"]
        assert backend["result"] == "cannot judge" and "transformers" in backend["message"], backend

    assert run_cli("apply", "--target", site, "--no-import").returncode == 0
    done = run_cli(*preflight, *deepseek)
    assert done.returncode == 0, done.stdout
    done = run_cli(*preflight, *kimi)
    if kimi_registered:
        assert done.returncode == 0, done.stdout
    else:  # patched, yet vLLM registers no Kimi-K2.5 class of its own: its backend stays unjudged here
        assert done.returncode == 0 and set(failed(done)) == set(), done.stdout
        [backend] = [f for f in json.loads(done.stdout)["findings"] if f["check"] == "supports-eagle3"]
        assert backend["result"] == "cannot judge" and "transformers" in backend["message"], backend


# review 5 L4: a speculative-config field SpeculativeConfig bounds (its Field(ge=...)) or checks
# against the target (draft_tensor_parallel_size: 1 or the target's -tp), read from 0.16.0's own file
SPECULATIVE_FIELDS = [
    ({"disable_by_batch_size": 1}, "1", "disable_by_batch_size 1 is no whole number at least 2"),
    ({"disable_by_batch_size": "0"}, "1", "disable_by_batch_size '0' is no whole number at least 2"),
    ({"max_model_len": 0}, "1", "max_model_len 0 is no whole number at least 1"),
    ({"prompt_lookup_min": [3]}, "1", "prompt_lookup_min [3] is no whole number at least 1"),
    ({"draft_tensor_parallel_size": 2}, "1", "draft_tensor_parallel_size 2 is neither 1 nor the target's"),
    ({"draft_tensor_parallel_size": 4}, "8", "draft_tensor_parallel_size 4 is neither 1 nor the target's"),
    ({"disable_by_batch_size": 2}, "1", None),
    ({"draft_tensor_parallel_size": 8}, "8", None),
    ({"draft_tensor_parallel_size": 1}, "8", None),
]


@pytest.mark.parametrize(("fields", "tp", "said"), SPECULATIVE_FIELDS)
def test_a_speculative_field_vllm_bounds_is_held_statically(tmp_path, fields, tp, said):
    site = tmp_path / "site"
    lay_out_release("0.16.0", sorted({*files_for("0.16.0"), REGISTRY}), site)
    assert run_cli("apply", "--target", site, "--no-import").returncode == 0
    drafter = write_model(tmp_path / "drafter", DRAFTER)
    spec = {"method": "eagle3", "model": str(drafter), "num_speculative_tokens": 3, **fields}
    model = write_model(tmp_path / "deepseek", DEEPSEEK_V3)
    command = ["vllm", "serve", str(model), "--trust-remote-code", "-tp", tp, "--speculative-config", json.dumps(spec)]
    done = run_cli("preflight", "--target", site, "--format", "json", "--no-import", "--", *command)
    if said is None:
        assert "speculative-config" not in failed(done), done.stdout
        return
    assert_clean_failure(done, 1)
    assert said in failed(done)["speculative-config"]["message"], done.stdout


@pytest.mark.parametrize("release", ["0.15.0", "0.16.0", "0.17.1"])
def test_a_draft_model_of_another_vocabulary_is_refused_on_the_real_files(tmp_path, release):
    """The release's SpeculativeConfig (verify_equal_vocab_size_if_draft_model) refuses a draft_model
    drafter whose vocab_size is not the target's, at start; one of the same vocabulary passes it."""
    site = tmp_path / "site"
    lay_out_release(release, sorted({*files_for(release), REGISTRY}), site)
    target = write_model(tmp_path / "deepseek", DEEPSEEK_V3)
    for vocab, fails in ((512, True), (DEEPSEEK_V3["vocab_size"], False)):
        llama = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 1}
        drafter = write_model(tmp_path / f"dm{vocab}", {**llama, "hidden_size": 4096, "vocab_size": vocab})
        spec = {"method": "draft_model", "model": str(drafter), "num_speculative_tokens": 2}
        launch = ["vllm", "serve", str(target), "--speculative-config", json.dumps(spec)]
        done = run_cli("preflight", "--target", site, "--format", "json", "--no-import", "--", *launch)
        found = failed(done).get("speculative-config", {"message": ""})
        said = "under method draft_model the drafter's vocab_size 512 is not the target's 129280"
        assert (said in found["message"]) is fails, done.stdout


@pytest.mark.parametrize("release", ["0.11.0", "0.16.0", "0.17.1"])
def test_an_fp8_kv_cache_on_deepseek_v32_fails_an_eagle3_drafter_on_the_real_files(tmp_path, release):
    """The release's own models/config.py turns V3.2's fp8 KV cache into fp8_ds_mla for the whole engine,
    the drafter's non-MLA attention included: an fp8 --kv-cache-dtype fails, auto passes."""
    site = tmp_path / "site"
    lay_out_release(release, sorted({*files_for(release), REGISTRY, MODEL_CONFIG_CLASSES}), site)
    assert run_cli("apply", "--target", site, "--no-import").returncode == 0
    v32 = {**DEEPSEEK_V3, "architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32", "index_topk": 2048}
    launch = serve(write_model(tmp_path / "v32", v32), write_model(tmp_path / "drafter", DRAFTER))
    preflight = ["preflight", "--target", site, "--format", "json", "--no-import", "--", *launch]
    done = run_cli(*preflight, "--kv-cache-dtype", "fp8")
    assert_clean_failure(done, 1)
    assert set(failed(done)) == {"drafter-architecture"}, done.stdout
    assert "fp8_ds_mla" in failed(done)["drafter-architecture"]["message"]
    done = run_cli(*preflight, "--kv-cache-dtype", "auto")
    assert done.returncode == 0, done.stdout


@pytest.mark.parametrize(("release", "fails"), [("0.16.0", False), ("0.17.1", True)])
def test_local_argmax_reduction_on_the_real_files(tmp_path, release, fails):
    """0.17's EAGLE proposer asks the drafter for get_top_tokens() under use_local_argmax_reduction; the
    release's Llama-layer EAGLE-3 drafter defines none (0.16's proposer does not ask)."""
    site = tmp_path / "site"
    models = "vllm/model_executor/models"
    wanted = {REGISTRY, "vllm/v1/spec_decode/eagle.py", f"{models}/llama_eagle3.py", f"{models}/llama.py"}
    lay_out_release(release, sorted({*files_for(release), *wanted}), site)
    assert run_cli("apply", "--target", site, "--no-import").returncode == 0
    spec = {"method": "eagle3", "model": "", "num_speculative_tokens": 3, "use_local_argmax_reduction": True}
    spec["model"] = str(write_model(tmp_path / "drafter", DRAFTER))
    target = write_model(tmp_path / "deepseek", DEEPSEEK_V3)
    launch = ["vllm", "serve", str(target), "--speculative-config", json.dumps(spec)]
    done = run_cli("preflight", "--target", site, "--format", "json", "--no-import", "--", *launch)
    if not fails:  # 0.16's SpeculativeConfig has no such field: the speculative-config finding refuses it instead
        assert "drafter-architecture" not in failed(done), done.stdout
        return
    assert set(failed(done)) == {"drafter-architecture"}, done.stdout
    assert "get_top_tokens()" in failed(done)["drafter-architecture"]["message"]


@pytest.mark.parametrize("release", ["0.11.0", "0.13.0", "0.16.0", "0.17.1"])
def test_an_eagle3_head_vllm_runs_as_eagle1_fails_on_the_real_files(tmp_path, release):
    """ "eagle-" in the drafter's name makes it EAGLE-1 to the release's SpeculativeConfig: its EAGLEConfig
    names an LlamaForCausalLMEagle3 head EagleLlamaForCausalLMEagle3 (no registry holds it); an
    Eagle3LlamaForCausalLM one is built and fed the target's last hidden state (its proposer combines
    aux hidden states under eagle3 only). "method": "eagle3" passes both."""
    site = tmp_path / "site"
    wanted = {REGISTRY, "vllm/transformers_utils/configs/eagle.py", "vllm/v1/spec_decode/eagle.py"}
    lay_out_release(release, sorted({*files_for(release), *wanted}), site)
    assert run_cli("apply", "--target", site, "--no-import").returncode == 0
    target = write_model(tmp_path / "deepseek", DEEPSEEK_V3)
    for architecture, said in (
        ("LlamaForCausalLMEagle3", "EagleLlamaForCausalLMEagle3, which it does not register"),
        ("Eagle3LlamaForCausalLM", "builds Eagle3LlamaForCausalLM and feeds it the target's last hidden state"),
    ):
        drafter = write_model(tmp_path / architecture / "EAGLE-3-head", {**DRAFTER, "architectures": [architecture]})
        for method, fails in ((None, True), ("eagle3", False)):
            spec = {"model": str(drafter), "num_speculative_tokens": 3, **({"method": method} if method else {})}
            launch = ["vllm", "serve", str(target), "--speculative-config", json.dumps(spec)]
            done = run_cli("preflight", "--target", site, "--format", "json", "--no-import", "--", *launch)
            found = failed(done).get("drafter-architecture", {"message": ""})
            assert (said in found["message"]) is fails, (method, done.stdout)


@pytest.mark.parametrize("release", ["0.11.0", "0.16.0", "0.17.1"])
def test_an_eagle1_head_of_another_hidden_size_fails_on_the_real_files(tmp_path, release):
    """The release's EAGLE-1 proposer copies the target's hidden states into a buffer of the drafter's
    hidden_size (eagle.py): a DeepSeek EAGLE-1 head 128 wide under a 7168-wide target fails, under
    eagle and as a separate mtp checkpoint; one of the target's width passes."""
    site = tmp_path / "site"
    lay_out_release(release, sorted({*files_for(release), REGISTRY, "vllm/v1/spec_decode/eagle.py"}), site)
    assert run_cli("apply", "--target", site, "--no-import").returncode == 0
    target = write_model(tmp_path / "deepseek", DEEPSEEK_V3)
    for method, width, fails in (("eagle", 128, True), ("mtp", 128, True), ("eagle", 7168, False)):
        head = {**DEEPSEEK_V3, "architectures": ["DeepSeekMTPModel"], "num_hidden_layers": 1, "hidden_size": width}
        drafter = write_model(tmp_path / f"{method}{width}", head)
        spec = {"method": method, "model": str(drafter), "num_speculative_tokens": 1}
        launch = ["vllm", "serve", str(target), "--speculative-config", json.dumps(spec)]
        done = run_cli("preflight", "--target", site, "--format", "json", "--no-import", "--", *launch)
        found = failed(done).get("drafter-hidden-size", {"message": ""})
        assert ("copies the target's 7168-wide hidden states" in found["message"]) is fails, (method, done.stdout)


@pytest.mark.parametrize(("release", "fails"), [("0.11.0", True), ("0.11.1", False), ("0.16.0", False)])
def test_an_unquantized_drafter_under_an_fp8_target_on_the_real_files(tmp_path, release, fails):
    """0.11.0's llama_eagle3.py builds the drafter's layers with the target's quantization config; 0.11.1
    on with the drafter's own (get_draft_quant_config)."""
    site = tmp_path / "site"
    models = "vllm/model_executor/models"
    lay_out_release(
        release, sorted({*files_for(release), REGISTRY, f"{models}/llama_eagle3.py", f"{models}/llama.py"}), site
    )
    assert run_cli("apply", "--target", site, "--no-import").returncode == 0
    fp8 = {**DEEPSEEK_V3, "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
    launch = serve(write_model(tmp_path / "deepseek", fp8), write_model(tmp_path / "drafter", DRAFTER))
    done = run_cli("preflight", "--target", site, "--format", "json", "--no-import", "--", *launch)
    found = failed(done).get("drafter-architecture", {"message": ""})
    assert ("with the target's quantization (fp8, from its checkpoint)" in found["message"]) is fails, done.stdout


@pytest.mark.parametrize("release", ["0.11.0", "0.13.0", "0.15.0", "0.16.0", "0.17.1"])
def test_the_method_vllm_tells_from_a_given_drafter_on_the_real_files(tmp_path, release):
    """With a "model", the release's SpeculativeConfig replaces any method but eagle/eagle3 by the one
    the drafter names: mtp with an EAGLE-3 head is refused (draft_model too before 0.15); a DeepSeek-V3 checkpoint (deepseek_mtp once
    hf_config_override has read it) names mtp, with or without the method."""
    site = tmp_path / "site"
    lay_out_release(release, sorted({*files_for(release), REGISTRY}), site)
    assert run_cli("apply", "--target", site, "--no-import").returncode == 0
    v3 = write_model(tmp_path / "deepseek", {**DEEPSEEK_V3, "num_nextn_predict_layers": 1})
    head = write_model(tmp_path / "head", DRAFTER)
    for spec, refused in (
        ({"method": "mtp", "model": str(head)}, True),
        ({"method": "mtp", "model": str(v3)}, False),
        ({"model": str(v3)}, False),
        ({"method": "draft_model", "model": str(head)}, Version(release) < Version("0.15.0")),  # kept from 0.15
    ):
        launch = ["vllm", "serve", str(v3), "--speculative-config", json.dumps({**spec, "num_speculative_tokens": 1})]
        done = run_cli("preflight", "--target", site, "--format", "json", "--no-import", "--", *launch)
        found = failed(done).get("speculative-config", {"message": ""})
        assert ("names none" in found["message"]) is refused, (spec, done.stdout)


@pytest.mark.parametrize("release", ["0.22.0", "0.26.0", "0.30.0", "0.34.0"])
def test_an_eagle1_heads_class_is_held_to_the_registry_of_later_releases(tmp_path, release):
    """0.18 on (to 0.34.0) EAGLEConfig still names an EAGLE-1 head's class Eagle<architecture> (0.34 wraps
    the draft config in it from its EagleSpeculatorConfig) and vLLM refuses a name its registry lacks:
    EagleQwen2ForCausalLM fails; EagleLlamaForCausalLM is registered; a tree without the renaming cannot judge."""
    site = tmp_path / "site"
    renaming = "vllm/transformers_utils/configs/eagle.py"
    lay_out_release(release, [REGISTRY, renaming, "vllm/config/speculative.py"], site)
    target = write_model(
        tmp_path / "target", {**DRAFTER, "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 4}
    )
    said = {}
    for architecture in ("Qwen2ForCausalLM", "LlamaForCausalLM", "unread"):
        if architecture == "unread":
            (site / renaming).unlink()
        head = {**DRAFTER, "architectures": [architecture.replace("unread", "LlamaForCausalLM")]}
        spec = {
            "method": "eagle",
            "model": str(write_model(tmp_path / architecture, head)),
            "num_speculative_tokens": 1,
        }
        launch = ["vllm", "serve", str(target), "--speculative-config", json.dumps(spec)]
        done = run_cli("preflight", "--target", site, "--format", "json", "--no-import", "--", *launch)
        found = json.loads(done.stdout)["findings"]
        said[architecture] = [
            f for f in found if f["check"] == "drafter-architecture" and "weights'" not in f["message"]
        ]
    assert [f["result"] for f in said["Qwen2ForCausalLM"]] == ["fail"], said
    assert "EagleQwen2ForCausalLM, which its registry does not hold" in said["Qwen2ForCausalLM"][0]["message"]
    assert said["LlamaForCausalLM"] == [], said
    assert [f["result"] for f in said["unread"]] == ["cannot judge"], said


def test_the_drafters_own_load_config_of_0_17_decides_its_load_on_the_real_files(tmp_path):
    """0.17.1's EagleProposer loads the drafter with --speculative-config's draft_load_config (its
    eagle.py, fetched): a drafter without weight files under --load-format dummy fails when its own
    load config loads it for real (load_format auto, or none given), and passes when it is dummy;
    0.16.0's SpeculativeConfig has no such field and refuses the key."""
    files = ["vllm/v1/spec_decode/eagle.py", "vllm/v1/spec_decode/draft_model.py", "vllm/config/speculative.py"]
    target = write_model(tmp_path / "deepseek", DEEPSEEK_V3)
    drafter = write_model(tmp_path / "head-eagle3", DRAFTER)
    (drafter / WEIGHTS).unlink()
    said = {}
    for release in ("0.17.1", "0.16.0"):
        site = tmp_path / release
        lay_out_release(release, sorted({*files_for(release), REGISTRY, *files}), site)
        assert run_cli("apply", "--target", site, "--no-import").returncode == 0
        for own in ({}, {"load_format": "auto"}, {"load_format": "dummy"}):
            spec = {"method": "eagle3", "model": str(drafter), "num_speculative_tokens": 3, "draft_load_config": own}
            launch = ["vllm", "serve", str(target), "--load-format", "dummy", "--speculative-config", json.dumps(spec)]
            done = run_cli("preflight", "--target", site, "--format", "json", "--no-import", "--", *launch)
            found = json.loads(done.stdout)["findings"]
            drafter_files = [f for f in found if f["check"] == "models" and f"drafter '{drafter}'" in f["message"]]
            refused = [f for f in found if f["check"] == "speculative-config" and not f["ok"]]
            said[release, own.get("load_format")] = ([f["result"] for f in drafter_files], refused)
    assert said["0.17.1", None][0] == said["0.17.1", "auto"][0] == ["fail"], said  # loaded for real: no weight file
    assert said["0.17.1", "dummy"] == ([], []), said
    assert all("it has no field draft_load_config" in r[0]["message"] for k, (_, r) in said.items() if k[0] == "0.16.0")


@pytest.mark.parametrize("release", RELEASES)
def test_only_the_releases_whose_parallel_config_picks_ray_itself_are_read_so(tmp_path, release):
    """launch32 F2's rest: with no backend given and fewer GPUs than the world size, 0.11.0 takes Ray
    (its workers on other nodes: a note); 0.11.1 on refuse the launch at start instead (no note)."""
    site = lay_out_release(release, [PARALLEL], tmp_path / "site")
    assert picks_ray_itself((site / PARALLEL).read_bytes()) == (release == "0.11.0")
