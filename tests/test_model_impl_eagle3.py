"""review37 A8: which class vLLM builds for the target decides EAGLE-3, not config.json's architecture.

With `--model-impl transformers` (and under the default `auto` when vLLM registers none of the
target's architectures, or registers one as the backend itself) vLLM builds its Transformers modeling
backend's class, whose EAGLE-3 calls check_version() with the transformers it needs: the stand-in
tree's backend files say which, the tree's transformers dist-info what the launch has. Under
`--model-impl terratorch` vLLM builds its Terratorch class. The native class's answer passes none of
these. Static (--no-import): the real venv's answer is tests/vllm_import/test_model_impl_real.py.
"""

from __future__ import annotations

import json
import shlex
import sys
import textwrap

import pytest
from helpers import run_cli_in_process
from launch_fixtures import DEEPSEEK_V3, DRAFTER, REGISTRY, REGISTRY_PY, applied, serve, write_eagle3_setup, write_model
from packaging.specifiers import SpecifierSet
from packaging.version import Version

BACKEND = "vllm/model_executor/models/transformers"
BASE_PY = textwrap.dedent("""\
    class Base(nn.Module, VllmModel, SupportsPP, SupportsEagle3):
        @staticmethod
        def check_version(min_version, feature):
            pass

        def set_aux_hidden_state_layers(self, layers):
            self.check_version("REQUIRED", "Eagle3 support")
    """)
MOE_PY = textwrap.dedent("""\
    class MoEMixin(MixtureOfExperts):
        def __init__(self, *, vllm_config, prefix=""):
            if vllm_config.model_config.hf_config.model_type == "aria":  # not every run: not named
                self.check_version("9.0.0", "Aria")
            self.check_version("MOE", "MoE models support")
    """)
BACKEND_TABLE = textwrap.dedent("""\
    _TRANSFORMERS_BACKEND_MODELS = {
        "TransformersForCausalLM": ("transformers", "TransformersForCausalLM"),
        "TransformersMoEForCausalLM": ("transformers", "TransformersMoEForCausalLM"),
    }
    _TRANSFORMERS_SUPPORTED_MODELS = {
        "SmolLM3ForCausalLM": ("transformers", "TransformersForCausalLM"),
    }
    _TERRATORCH = {
        "Terratorch": ("terratorch", "Terratorch"),
    }
    """)
MOE_TARGET = {**DEEPSEEK_V3, "n_routed_experts": 256}


@pytest.fixture
def site(tmp_path):
    """(tree, library, target, drafter): the eagle3 set applied (the native DeepseekV3ForCausalLM
    implements SupportsEagle3), a backend needing transformers>=5.0.0 for EAGLE-3 and MoE, 4.57.6 installed."""
    tree, library = write_eagle3_setup(tmp_path)
    applied(tree, library)
    backend(tree, "5.0.0", "5.0.0")
    (tree / REGISTRY).write_text(REGISTRY_PY + BACKEND_TABLE)
    (tree / "vllm/model_executor/models/terratorch.py").write_text(
        "class Terratorch(nn.Module, SupportsMultiModal):\n    pass\n"
    )
    transformers(tree, "4.57.6")
    pin(tree, "transformers<5,>=4.56.0")
    return tree, library, write_model(tmp_path / "target", MOE_TARGET), write_model(tmp_path / "drafter", DRAFTER)


def backend(tree, eagle3: str | None, moe: str) -> None:
    """The backend's files; `eagle3` None: a backend without EAGLE-3 (0.12.0's)."""
    base = BASE_PY.replace("REQUIRED", eagle3 or "")
    if eagle3 is None:
        base = "class Base(nn.Module, VllmModel, SupportsPP):\n    pass\n"
    (tree / BACKEND).mkdir(parents=True, exist_ok=True)
    (tree / BACKEND / "base.py").write_text(base)
    (tree / BACKEND / "moe.py").write_text(MOE_PY.replace("MOE", moe))


def transformers(tree, version: str) -> None:
    info = tree / "transformers-4.57.6.dist-info"  # its name is not what is read: METADATA's Version is
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: transformers\nVersion: {version}\n\nVersion: 9.9.9\n")
    (tree / "transformers").mkdir(exist_ok=True)


def pin(tree, requirement: str) -> None:
    metadata = tree / "vllm-0.16.0.dist-info" / "METADATA"
    metadata.write_text(
        "Metadata-Version: 2.1\nName: vllm\nVersion: 0.16.0\nRequires-Dist: transformers[torch]; extra == 'x'\n"
        f"Requires-Dist: {requirement}\n"
    )


def supports(site, *options: str, target=None, program: str = "vllm") -> dict:
    tree, library, model, drafter = site
    launch = [program, *serve(target or model, drafter, *options)[1:]]
    done = run_cli_in_process(
        "preflight", "--target", tree, "--patches", library, "--no-import", "--format", "json", "--", *launch
    )
    return next(f for f in json.loads(done.stdout)["findings"] if f["check"] == "supports-eagle3")


def test_model_impl_transformers_is_judged_on_the_backend_and_its_transformers(site):
    native = supports(site)
    assert native["ok"] and "DeepseekV3ForCausalLM has base SupportsEagle3" in native["message"], native

    found = supports(site, "--model-impl", "transformers")
    assert found["result"] == "fail", found
    assert found["message"] == (
        "--model-impl transformers: vLLM builds the target as its Transformers backend's TransformersMoEForCausalLM, "
        "which needs transformers>=5.0.0 (Eagle3 support, MoE models support); the launch's Python has 4.57.6: "
        "vLLM fails loading the target"
    )
    assert found["fix"] == "drop --model-impl transformers: vLLM then builds its own DeepseekV3ForCausalLM"
    config = site[0].parent / "serve.yaml"  # given in the launch's --config file: dropped there
    config.write_text("model-impl: transformers\n")
    found = supports(site, "--config", str(config))
    assert (
        found["fix"]
        == f"drop model-impl from {config} (the --config file): vLLM then builds its own DeepseekV3ForCausalLM"
    )


def test_the_highest_requirement_is_named_and_a_version_that_meets_it_passes(site):
    tree = site[0]
    backend(tree, "5.2.0", "5.0.0")
    dense = write_model(tree.parent / "dense", {**DEEPSEEK_V3, "n_routed_experts": 0})  # 0: vLLM's get_num_experts
    found = supports(site, "--model-impl", "transformers", target=dense)
    assert "TransformersForCausalLM, which needs transformers>=5.2.0 (Eagle3 support);" in found["message"], found
    transformers(tree, "5.2.0")
    found = supports(site, "--model-impl", "transformers")
    assert found["result"] == "pass", found
    assert "transformers>=5.2.0 (Eagle3 support); the launch's Python has 5.2.0;" in found["message"], found


def test_an_architecture_vllm_does_not_register_goes_to_the_backend_under_auto(site):
    tree = site[0]
    unknown = write_model(tree.parent / "unknown", {**MOE_TARGET, "architectures": ["FooForCausalLM"]})
    found = supports(site, target=unknown)
    assert found["result"] == "fail", found
    assert found["message"].startswith("vLLM registers no class of its own for FooForCausalLM: vLLM builds")
    # no class of vLLM's own to go back to, and this vLLM's own requirement refuses transformers 5
    assert found["fix"] == (
        "serve it without --speculative-config: this vLLM requires transformers<5,>=4.56.0, "
        "and its Transformers backend has no EAGLE-3 below 5.0.0"
    )
    assert not SpecifierSet("<5,>=4.56.0").contains(Version("5.0.0"))


def test_the_install_fix_stays_within_vllms_own_requirement(site):
    tree = site[0]
    backend(tree, "5.2.0", "5.0.0")
    pin(tree, "transformers!=5.0.*,!=5.1.*,!=5.2.*,!=5.3.*,!=5.4.*,!=5.5.0,>=4.56.0")  # 0.22.0's
    unknown = write_model(tree.parent / "unknown", {**DEEPSEEK_V3, "architectures": ["FooForCausalLM"]})
    found = supports(site, target=unknown)
    wanted = "!=5.0.*,!=5.1.*,!=5.2.*,!=5.3.*,!=5.4.*,!=5.5.0,>=5.2.0"
    assert found["fix"] == f"install transformers{wanted} into the Python vLLM runs in", found
    script = tree.parent / "vllm"  # a launch whose Python can be told: the command to run in it
    script.write_text(f"#!{sys.executable}\nfrom vllm.entrypoints.cli.main import main\n")
    script.chmod(0o755)
    found = supports(site, target=unknown, program=str(script))
    command = shlex.split(found["fix"].partition(": `")[2].rstrip("`"))
    assert command == [sys.executable, "-m", "pip", "install", f"transformers{wanted}"], found
    # what pip may pick meets both the backend's need and vLLM's own requirement
    assert SpecifierSet(wanted).contains(Version("5.5.1")) and not SpecifierSet(wanted).contains(Version("5.5.0"))


def test_a_backend_without_eagle3_and_an_architecture_registered_as_the_backend(site):
    tree = site[0]
    backend(tree, None, "5.0.0")
    smol = write_model(tree.parent / "smol", {**DEEPSEEK_V3, "architectures": ["SmolLM3ForCausalLM"]})
    found = supports(site, target=smol)
    assert found["result"] == "fail", found
    assert found["message"] == (
        "vLLM registers SmolLM3ForCausalLM as its Transformers backend's TransformersForCausalLM: vLLM builds the "
        "target as its Transformers backend's TransformersForCausalLM, which has no EAGLE-3 in this vLLM"
    )
    assert found["fix"].startswith("serve it without --speculative-config"), found


def test_model_impl_terratorch_is_judged_on_the_terratorch_class(site):
    found = supports(site, "--model-impl", "terratorch")
    assert found["result"] == "fail", found
    assert "Terratorch does not have base SupportsEagle3" in found["message"], found
    assert found["fix"] == "drop --model-impl terratorch"


def with_unreadable_transformers(site, version: str | None) -> dict:
    """supports-eagle3 of --model-impl transformers with no transformers (None), or one whose Version is `version`."""
    tree = site[0]
    if version is None:
        (tree / "transformers-4.57.6.dist-info" / "METADATA").unlink()
        (tree / "transformers-4.57.6.dist-info").rmdir()
    else:
        transformers(tree, version)
    return supports(site, "--model-impl", "transformers")


@pytest.mark.parametrize(
    ("version", "said"),
    [(None, "finds no transformers"), ("4.57\x1b[2J", "gives version '4.57\\x1b[2J'")],
)
def test_a_transformers_that_cannot_be_read_cannot_judge(site, version, said):
    tree = site[0]
    pin(tree, "transformers>=4.56.0")  # a vLLM whose own requirement admits the backend's transformers
    found = with_unreadable_transformers(site, version)
    assert found["result"] == "cannot judge" and said in found["message"], found


def test_the_launchs_transformers_is_the_version_importlib_reads(site):
    """A line break str.splitlines knows and email does not (\\u2028) in a METADATA value hides no
    Version: importlib.metadata.version() reads the Version after it."""
    tree = site[0]
    pin(tree, "transformers>=4.56.0")
    metadata = "Metadata-Version: 2.1\nName: transformers\nSummary: a\u2028Version: 9.9.9\nVersion: 4.57.6\n"
    (tree / "transformers-4.57.6.dist-info" / "METADATA").write_text(metadata, encoding="utf-8")
    found = supports(site, "--model-impl", "transformers")
    assert found["result"] == "fail" and "the launch's Python has 4.57.6: vLLM fails" in found["message"], found


def test_hf_overrides_naming_an_architecture_vllm_does_not_register_goes_to_the_backend(site):
    overrides = json.dumps({"architectures": ["FooForCausalLM"]})
    found = supports(site, "--hf-overrides", overrides)
    assert found["result"] == "fail", found
    assert found["message"].startswith("vLLM registers no class of its own for FooForCausalLM: vLLM builds the target")
    assert "TransformersMoEForCausalLM, which needs transformers>=5.0.0" in found["message"]


def test_the_fallback_with_a_transformers_that_meets_the_backend_cannot_judge(site):
    """vLLM falls back to the backend only for a model transformers has (or auto_map names): not
    told statically, so no pass; a tree without a backend keeps "does not register"."""
    tree = site[0]
    transformers(tree, "5.0.0")
    unknown = write_model(tree.parent / "unknown", {**MOE_TARGET, "architectures": ["FooForCausalLM"]})
    found = supports(site, target=unknown)
    assert found["result"] == "cannot judge" and found["message"].endswith(", if transformers has FooForCausalLM")
    (tree / REGISTRY).write_text(REGISTRY_PY)
    found = supports(site, target=unknown)
    assert found["result"] == "fail" and "does not register the target architecture FooForCausalLM" in found["message"]


@pytest.mark.parametrize("version", [None, "4.57\x1b[2J"])
def test_a_transformers_that_cannot_be_read_fails_where_vllms_own_requirement_excludes_what_the_backend_needs(
    site, version
):
    """vLLM 0.12-0.18 require transformers<5 and their backend's EAGLE-3 needs 5.0.0 or later: whatever the
    launch's Python holds, the backend fails (a launch without --python was "cannot judge")."""
    tree = site[0]
    pin(tree, "transformers<5,>=4.56.0")
    found = with_unreadable_transformers(site, version)
    assert found["result"] == "fail", found
    assert "which this vLLM's own requirement transformers<5,>=4.56.0 excludes" in found["message"], found


# transformers' auto mapping and DeepseekV3Config as 4.57 lays them out (the launch's transformers beside vllm/),
# and vLLM's own config registry (model types it reads with a class of its own)
AUTO = textwrap.dedent("""\
    CONFIG_MAPPING_NAMES = OrderedDict[str, str](
        [
            ("deepseek_v3", "DeepseekV3Config"),
            ("llama", "LlamaConfig"),
        ]
    )
    SPECIAL_MODEL_TYPE_TO_MODULE_NAME = OrderedDict[str, str]([("openai-gpt", "openai")])
    """)
DEEPSEEK_V3_CONFIG = textwrap.dedent("""\
    class DeepseekV3Config(PreTrainedConfig):
        model_type = "deepseek_v3"

        def __init__(self, vocab_size=129280, hidden_size=7168, n_routed_experts=EXPERTS, num_experts_per_tok=8, **kwargs):
            self.n_routed_experts = n_routed_experts
    """)
VLLM_CONFIGS = 'from x import y\n_CONFIG_REGISTRY = LazyConfigDict(\n    chatglm="ChatGLMConfig",\n    OWN="X",\n)\n'


def config_classes(tree, experts: str = "256", own: str = "kimi_k25") -> None:
    """The transformers config sources patchkit reads the target's config class defaults from."""
    (tree / "transformers/models/auto").mkdir(parents=True, exist_ok=True)
    (tree / "transformers/models/auto/configuration_auto.py").write_text(AUTO)
    (tree / "transformers/models/deepseek_v3").mkdir(parents=True, exist_ok=True)
    source = DEEPSEEK_V3_CONFIG.replace("EXPERTS", experts)
    (tree / "transformers/models/deepseek_v3/configuration_deepseek_v3.py").write_text(source)
    (tree / "vllm/transformers_utils").mkdir(parents=True, exist_ok=True)
    (tree / "vllm/transformers_utils/config.py").write_text(VLLM_CONFIGS.replace("OWN", own))


HEDGE = "(or TransformersMoEForCausalLM, if its config class defaults to experts)"


@pytest.mark.parametrize(
    ("config", "experts", "own", "built"),
    [
        ({}, "256", "kimi_k25", "TransformersMoEForCausalLM,"),  # DeepseekV3Config's default: 256 experts
        ({}, "None", "kimi_k25", "TransformersForCausalLM,"),  # a class defaulting to none
        ({"n_routed_experts": 8}, None, "kimi_k25", "TransformersMoEForCausalLM,"),  # config.json tells
        ({}, None, "kimi_k25", f"TransformersForCausalLM {HEDGE},"),  # no transformers sources to read
        ({}, "256", "deepseek_v3", f"TransformersForCausalLM {HEDGE},"),  # vLLM's own class for it: not read
        ({"num_experts": 0, "n_routed_experts": 8}, None, "kimi_k25", "TransformersForCausalLM,"),  # the first: 0
        ({"num_experts": [4, 4]}, None, "kimi_k25", "TransformersMoEForCausalLM,"),  # a list: its first
        ({"n_routed_experts": 0, "block_configs": [{"block_type": "moe", "n_routed_experts": 8}]}, None, "x", "MoE"),
    ],
)
def test_the_backend_class_named_is_the_one_vllm_picks_by_its_config_classs_expert_count(
    site, config, experts, own, built
):
    """review38 A8 (Low): vLLM's get_num_experts reads the config object, whose class gives defaults config.json
    leaves out (a DeepSeek-V3 config.json without n_routed_experts: DeepseekV3Config's 256, so
    TransformersMoEForCausalLM); said as "or" where the class is not readable here."""
    tree = site[0]
    if experts is not None:
        config_classes(tree, experts, own)
    target = {k: v for k, v in {**MOE_TARGET, **config}.items() if k != "n_routed_experts" or k in config}
    found = supports(site, "--model-impl", "transformers", target=write_model(tree.parent / "t", target))
    assert f"vLLM builds the target as its Transformers backend's {built}" in found["message"] or (
        built == "MoE" and "backend's TransformersMoEForCausalLM," in found["message"]
    ), found
