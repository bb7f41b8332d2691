"""vLLM's own build of a launch's drafter on preflight's import path (patchkit/_target/drafter_build.py,
run by engine_config.py once create_engine_config() accepts the launch): its verdict is the
drafter-build finding, a raise in the build or the load a failure, what it cannot attempt "cannot
judge". Here with a stand-in vLLM and torch run by path as the launch's interpreter; vLLM 0.16.0's own
classes build real drafters in tests/vllm_import/test_drafter_build_real.py."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from importable_vllm import engine_args
from launch_fixtures import write_model, write_weights

from patchkit._target import engine_config
from patchkit.launch import validation
from patchkit.launch.command import parse
from patchkit.launch.validation import BUILD, CHECK, drafter_finding, engine_findings

# a torch of what the build uses: dtypes, a device as a context, meta tensors of a shape
TORCH = """
class dtype:
    def __init__(self, name):
        self.name = name


for _name in ("float32", "float16", "bfloat16", "int8", "int64", "uint8", "bool"):
    globals()[_name] = dtype(_name)


class device:
    def __init__(self, name):
        self.name = name

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class Tensor:
    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), dtype


def empty(shape, dtype, device):
    assert device == "meta"
    return Tensor(shape, dtype)
"""
# the model class the registry picks: its layers' sizes from the drafter's config.json, as vLLM's
# constructors take them (None: a TypeError), its load_weights as vLLM's (a name without a parameter:
# KeyError; another shape: an AssertionError), and a build that hangs when the config asks it to
MODELS = """
import contextlib, json, os, time, types

current = []
TP = types.SimpleNamespace(world_size=1)  # the tensor-parallel group: one process


def get_tp_group():
    return TP


@contextlib.contextmanager
def set_current_vllm_config(config, **kwargs):
    current.append(config)
    yield
    current.pop()


class Drafter:
    def __init__(self, vllm_config, prefix=""):
        config = json.load(open(os.path.join(vllm_config.speculative_config.draft_model_config.model, "config.json")))
        if config.get("hang"):
            time.sleep(600)
        if config.get("allocate"):  # 3 GiB: past the memory bound
            self.kept = bytearray(3 << 30)
        if config.get("max_position_embeddings", 1) is None:  # torch's refusal lists signatures that name devices
            raise TypeError("arange() received an invalid combination of arguments:\\n * (torch.device device = None)")
        width = config["hidden_size"]
        self.params = {"fc.weight": (width, 3 * config["target_hidden_size"]), "norm.weight": (width,)}
        self.params["mlp.weight"] = (config["intermediate_size"] % 64, width)
        assert config["intermediate_size"] % TP.world_size == 0  # a layer's bare assert on its shard's size

    def load_weights(self, weights):
        for name, tensor in weights:
            assert self.params[name] == tensor.shape, f"{name}: {tensor.shape} into {self.params[name]}"


def initialize_model(vllm_config, model_config, prefix=""):
    assert current, "no current vLLM config"
    return Drafter(vllm_config, prefix)


@contextlib.contextmanager
def set_default_torch_dtype(dtype):
    yield


@contextlib.contextmanager
def set_model_tag(tag):
    yield


def model_parallel_is_initialized():
    return True
"""
LOADERS = """
import glob, os
from vllm.model_executor.model_loader import default_loader


class DummyModelLoader:
    pass


def get_model_loader(load_config):
    return DummyModelLoader() if load_config.load_format == "dummy" else default_loader.DefaultModelLoader()


DefaultModelLoader = default_loader.DefaultModelLoader
"""
DEFAULT_LOADER = """
import glob, os


def safetensors_weights_iterator(files, *args):
    raise AssertionError("patchkit reads the headers itself: the data is never read")


class DefaultModelLoader:
    def load_weights(self, model, model_config):
        files = sorted(glob.glob(os.path.join(model_config.model, "*.safetensors")))
        model.load_weights(safetensors_weights_iterator(files))
"""
ARG_UTILS = engine_args(
    '"--model"',
    '"--speculative-config", type=json.loads, default=None',
    '"--load-format", default="auto"',
    '"--tensor-parallel-size", type=int, default=1',
    head="import json\nimport types",
    config="""
        spec = self.values["speculative_config"]
        load = types.SimpleNamespace(load_format=self.values["load_format"])
        if spec is None:
            return types.SimpleNamespace(load_config=load)
        draft = types.SimpleNamespace(model=spec["model"], dtype="bfloat16")
        speculative = types.SimpleNamespace(method=spec["method"], draft_model_config=draft)
        parallel = types.SimpleNamespace(tensor_parallel_size=self.values["tensor_parallel_size"])
        return types.SimpleNamespace(speculative_config=speculative, load_config=load, parallel_config=parallel)
    """,
)
MODULES = {
    "torch/__init__.py": TORCH,
    "vllm/__init__.py": "",
    "vllm/engine/__init__.py": "",
    "vllm/engine/arg_utils.py": ARG_UTILS,
    "vllm/models.py": MODELS,
    "vllm/config.py": "from vllm.models import set_current_vllm_config\n",
    "vllm/compilation/__init__.py": "",
    "vllm/compilation/backends.py": "from vllm.models import set_model_tag\n",
    "vllm/distributed/__init__.py": "",
    "vllm/distributed/parallel_state.py": "from vllm.models import get_tp_group, model_parallel_is_initialized\n",
    "vllm/model_executor/__init__.py": "",
    "vllm/model_executor/model_loader/__init__.py": LOADERS,
    "vllm/model_executor/model_loader/default_loader.py": DEFAULT_LOADER,
    "vllm/model_executor/model_loader/utils.py": "from vllm.models import initialize_model\n",
    "vllm/model_executor/model_loader/base_loader.py": "from vllm.models import set_default_torch_dtype\n",
}
DRAFTER = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "hidden_size": 64,
    "target_hidden_size": 32,
    "intermediate_size": 128,
}
WEIGHTS = {"fc.weight": [64, 96], "norm.weight": [64], "mlp.weight": [0, 64]}


def stand_in(root: Path) -> Path:
    """A directory whose torch and vllm packages are the stand-ins above."""
    for name, text in MODULES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def drafter(root: Path, name: str, config: dict[str, object], weights: dict[str, list[int]]) -> str:
    directory = write_model(root / name, config)
    write_weights(directory, weights)
    return str(directory)


def found(root: Path, model: str, *options: str) -> list:
    """engine_findings() for `--model MODEL --speculative-config {eagle3: model}`, as the api_server
    is launched with the stand-ins on PYTHONPATH."""
    spec = json.dumps({"method": "eagle3", "model": model, "num_speculative_tokens": 2})
    launch = ["env", f"PYTHONPATH={root / 'lib'}", sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
    command = parse([*launch, "--model", str(root), "--speculative-config", spec, *options], "0.16.0")
    return engine_findings(sys.executable, command)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    stand_in(tmp_path / "lib")
    return tmp_path


def test_a_drafter_vllm_builds_and_loads_passes_and_no_tensor_data_is_read(root):
    validated, built = found(root, drafter(root, "good", DRAFTER, WEIGHTS))
    assert (validated.check, validated.ok) == (CHECK, True), validated
    assert (built.check, built.ok, built.judged) == (BUILD, True, True), built
    assert built.message.startswith("vLLM builds the eagle3 drafter ") and "loads its weights' names" in built.message


@pytest.mark.parametrize(
    ("config", "weights", "said"),
    [
        ({**DRAFTER, "intermediate_size": None}, WEIGHTS, "vLLM cannot build the eagle3 drafter"),
        ({**DRAFTER, "max_position_embeddings": None}, WEIGHTS, "vLLM cannot build the eagle3 drafter"),
        (DRAFTER, {**WEIGHTS, "fc.weight": [64, 64]}, "vLLM cannot load the weights of the eagle3 drafter"),
        (DRAFTER, {**WEIGHTS, "nonesuch.weight": [4]}, "vLLM cannot load the weights of the eagle3 drafter"),
    ],
)
def test_a_raise_in_the_build_or_the_load_fails_with_vllms_own_error(root, config, weights, said):
    _, built = found(root, drafter(root, "bad", config, weights))
    assert (built.check, built.ok, built.judged) == (BUILD, False, True), built
    assert built.message.startswith(said) and "the launch fails once the target has loaded" in built.message, built
    assert "mend the drafter's config.json or weights" in str(built.fix)


def test_the_load_format_dummy_builds_and_loads_nothing(root):
    _, built = found(root, drafter(root, "bad_weights", DRAFTER, {"nonesuch": [1]}), "--load-format", "dummy")
    assert built.ok and built.judged and "--load-format dummy it loads no weights" in built.message, built


@pytest.mark.parametrize(
    ("files", "reason"),
    [
        ({"pytorch_model.bin": b"x"}, "its weights are .bin or .pt files"),
        ({"model.safetensors": (10**12).to_bytes(8, "little")}, "its header length is not one safetensors reads"),
        ({"model.safetensors": b"\x05\x00\x00\x00\x00\x00\x00\x00[1,2]"}, "its header is not a JSON object"),
    ],
)
def test_weights_whose_headers_do_not_read_are_not_judged(root, files, reason, monkeypatch):
    directory = write_model(root / "odd", DRAFTER)
    (directory / "model.safetensors").unlink()
    for name, data in files.items():
        (directory / name).write_bytes(data)
    if "pytorch_model.bin" in files:  # the stand-in loader picks .bin files through vLLM's pt iterator
        text = DEFAULT_LOADER.replace('"*.safetensors"', '"*.bin"').replace("safetensors_weights", "pt_weights")
        (root / "lib/vllm/model_executor/model_loader/default_loader.py").write_text(
            text + "\n\ndef safetensors_weights_iterator(files, *args):\n    raise AssertionError\n"
        )
    _, built = found(root, str(directory))
    assert built.ok and not built.judged and built.message.startswith("cannot judge: vLLM's build of"), built
    assert reason in built.message, built


def test_a_build_past_its_time_bound_is_not_judged_and_the_launch_still_validated(root, monkeypatch):
    monkeypatch.setattr(validation, "BUILD_WITHIN", 2.0)
    validated, built = found(root, drafter(root, "hangs", {**DRAFTER, "hang": True}, WEIGHTS))
    assert validated.ok and validated.judged, validated
    assert built.ok and not built.judged and "the build did not finish within 2 s" in built.message, built


def test_a_build_past_its_memory_bound_is_not_judged(root):
    _, built = found(root, drafter(root, "big", {**DRAFTER, "allocate": True}, WEIGHTS))
    assert built.ok and not built.judged and "the build needs more than 2 GiB" in built.message, built


def test_a_worker_killed_while_it_builds_keeps_the_validation_and_judges_no_drafter(root, monkeypatch):
    """The worker's own time limit (it hung where no signal reaches it): the answer file says the
    build was running, vLLM had accepted the launch."""
    monkeypatch.setattr(validation, "BUILD_WITHIN", 600.0)
    monkeypatch.setattr(validation, "TIMEOUT", 8.0)
    validated, built = found(root, drafter(root, "hangs", {**DRAFTER, "hang": True}, WEIGHTS))
    assert (validated.check, validated.ok, validated.judged) == (CHECK, True, True), validated
    assert (built.check, built.ok, built.judged) == (BUILD, True, False), built
    assert "vLLM's build of the drafter did not end" in built.message, built


def test_no_drafter_no_finding(root):
    launch = ["env", f"PYTHONPATH={root / 'lib'}", sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
    assert [f.check for f in engine_findings(sys.executable, parse([*launch, "--model", str(root)], "0.16.0"))] == [
        CHECK
    ]


@pytest.mark.parametrize(
    ("drafter_said", "ok", "judged", "start"),
    [
        ({"status": "built", "loaded": True, "method": "mtp", "model": "/m", "class": "C"}, True, True, "vLLM builds"),
        ({"status": "failed", "stage": "build", "error": "TypeError: x\ny"}, False, True, "vLLM cannot build"),
        ({"status": "cannot", "reason": "r" * 5000}, True, False, "cannot judge: vLLM's build of"),
        ({"status": "building"}, True, False, "cannot judge: vLLM's build of"),
        ({"status": None}, True, False, "cannot judge"),
    ],
)
def test_each_answer_of_the_build_is_a_finding_and_its_text_is_bounded(drafter_said, ok, judged, start):
    built = drafter_finding({"status": "ok", "drafter": drafter_said})
    assert built is not None and (built.ok, built.judged) == (ok, judged), built
    assert built.message.startswith(start) and len(built.message) < 800 and "\n" not in built.message, built


def test_the_worker_is_told_its_bound_and_no_build_without_one():
    """engine_config.work() builds only when the request gives build_within (a caller that does
    not ask, as the tests of the validation alone, gets no drafter key)."""
    assert engine_config.drafter_built(object(), {}, None, True) is None
    assert engine_config.drafter_built(object(), {}, 0, True) is None
    assert os.path.isfile(Path(engine_config.__file__).with_name("drafter_build.py"))


# vLLM's distributed state not yet made: the build makes it, its gloo file store where the URL says (as torch's does)
FIRST_PROCESS_GROUP = """
import os
STARTED = []


def model_parallel_is_initialized():
    return bool(STARTED)


def init_distributed_environment(world_size, rank, url, local_rank, backend):
    with open(url.removeprefix("file://"), "w") as store:
        store.write("gloo")


def initialize_model_parallel(*sizes):
    STARTED.append(sizes)
"""


def test_the_builds_own_distributed_state_leaves_no_directory_behind(root, tmp_path):
    (root / "lib/vllm/distributed/parallel_state.py").write_text(FIRST_PROCESS_GROUP)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    model = drafter(root, "good", DRAFTER, WEIGHTS)
    spec = json.dumps({"method": "eagle3", "model": model, "num_speculative_tokens": 2})
    launch = ["env", f"TMPDIR={scratch}", f"PYTHONPATH={root / 'lib'}", sys.executable, "-m"]
    launch += ["vllm.entrypoints.openai.api_server", "--model", str(root), "--speculative-config", spec]
    _, built = engine_findings(sys.executable, parse(launch, "0.16.0"))
    assert (built.check, built.ok, built.judged) == (BUILD, True, True), built
    assert list(scratch.iterdir()) == [], list(scratch.iterdir())


def test_under_tp_the_drafter_is_built_again_as_rank_0_and_a_size_it_does_not_split_fails(root):
    """Built whole it passes; as rank 0 of -tp 4 its layer's assert on the shard's size (130 over 4) fails,
    naming where; -tp 2 splits it and the pass says so."""
    model = drafter(root, "odd", {**DRAFTER, "intermediate_size": 130}, {**WEIGHTS, "mlp.weight": [2, 64]})
    _, four = found(root, model, "--tensor-parallel-size", "4")
    assert (four.check, four.ok, four.judged) == (BUILD, False, True), four
    assert "with -tp 4" in four.message and "% TP.world_size == 0" in four.message, four
    _, two = found(root, model, "--tensor-parallel-size", "2")
    assert two.ok and two.judged and "(as rank 0 of -tp 2 too)" in two.message, two
    _, whole = found(root, model)
    assert whole.ok and whole.judged and "rank 0" not in whole.message, whole


def test_the_unread_speculative_quantization_is_fixed_by_dropping_it_not_by_mending_the_config():
    """0.12-0.17's get_quant_config on a drafter whose config.json has no quantization_config."""
    error = "AttributeError: 'function' object has no attribute 'get'"
    built = drafter_finding({"status": "ok", "drafter": {"status": "failed", "stage": "build", "error": error}})
    assert built is not None and not built.ok and built.fix is not None, built
    assert 'drop "quantization" from --speculative-config' in built.fix and "mend" not in built.fix, built


def test_the_unread_speculative_quantization_of_a_draft_model_drafter_fails_not_unjudged():
    """draft_model: create_vllm_config_for_draft_model raises it before the build starts (vLLM 0.16.0, checked):
    the launch fails after the target's load, and the accelerator would not judge otherwise."""
    reason = "vLLM's build does not start here: AttributeError: 'function' object has no attribute 'get'"
    built = drafter_finding(
        {"status": "ok", "drafter": {"status": "cannot", "method": "draft_model", "reason": reason}}
    )
    assert built is not None and not built.ok and built.judged, built
    assert built.fix is not None and built.fix.startswith('drop "quantization" from --speculative-config'), built
    assert "for the draft_model drafter" in built.message and "here" not in built.message, built
    assert built.message.endswith("the launch fails once the target has loaded"), built
