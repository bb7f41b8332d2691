"""--quantization on a checkpoint whose config.json has no quantization_config (patchkit/launch/quant_file.py):
vLLM's get_quant_config looks for the method's own config file in the model directory, or builds the
method's class bare. Read from the tree: a stand-in of get_quant_config's shape, then 0.16.0's and
0.34.0's stock files. vLLM 0.16.0's own answers: tests/vllm_import/test_quant_match_real.py."""

from __future__ import annotations

import json

import pytest
from helpers import lay_out_release
from launch_fixtures import DEEPSEEK_V3, write_model

from patchkit.launch.command import parse
from patchkit.launch.engine import LaunchContext
from patchkit.launch.models import resolve_model
from patchkit.launch.quant_match import quantization_findings

QUANTIZATION = "vllm/model_executor/layers/quantization"
WEIGHT_UTILS = "vllm/model_executor/model_loader/weight_utils.py"
# get_quant_config's shape (0.12-0.18), its file search and raises as the tree has them
GET_QUANT_CONFIG = """
def get_quant_config(model_config, load_config):
    quant_cls = get_quantization_config(model_config.quantization)
    if model_config.quantization == "gguf":
        return quant_cls()
    hf_quant_config = getattr(model_config.hf_config, "quantization_config", None)
    if hf_quant_config is not None:
        return quant_cls.from_config(hf_quant_config)
    hf_overrides = model_config.hf_overrides
    quantization_config_file = hf_overrides.get("quantization_config_file", None)
    if quantization_config_file is not None:
        return quant_cls.from_config_file(quantization_config_file)
    if model_config.quantization == "bitsandbytes":
        return quant_cls.from_config({})
    possible_config_filenames = quant_cls.get_config_filenames()
    if not possible_config_filenames:
        return quant_cls()
    quant_config_files = [f for f in glob.glob("*.json") if any(f.endswith(x) for x in possible_config_filenames)]
    if len(quant_config_files) == 0:
        raise ValueError(f"Cannot find the config file for {model_config.quantization}")
    if len(quant_config_files) > 1:
        raise ValueError(f"Found multiple config files for {model_config.quantization}")
"""
INIT = """
def get_quantization_config(quantization):
    from .awq import AWQConfig
    from .bitsandbytes import BitsAndBytesConfig
    from .compressed_tensors.compressed_tensors import CompressedTensorsConfig
    from .fp8 import Fp8Config
    from .gguf import GGUFConfig
    from .odd import OddConfig
    method_to_config = {
        "awq": AWQConfig, "fp8": Fp8Config, "gguf": GGUFConfig, "bitsandbytes": BitsAndBytesConfig,
        "compressed-tensors": CompressedTensorsConfig, "odd": OddConfig,
    }
    return method_to_config[quantization]
"""
MODULES = {
    "awq.py": """
class AWQConfig(QuantizationConfig):
    @staticmethod
    def get_config_filenames():
        return ["quant_config.json", "quantize_config.json"]
""",
    "fp8.py": '''
class Fp8Config(QuantizationConfig):
    def __init__(self, is_checkpoint_fp8_serialized=False, activation_scheme="dynamic"):
        super().__init__()

    @classmethod
    def get_config_filenames(cls):
        """No file: quantized at load."""
        return []
''',
    "compressed_tensors/compressed_tensors.py": """
class CompressedTensorsConfig(QuantizationConfig):
    def __init__(self, target_scheme_map, ignore, quant_format, kv_cache_scheme=None):
        super().__init__()

    @classmethod
    def get_config_filenames(cls):
        return []
""",
    "odd.py": """
class OddConfig(QuantizationConfig):
    @classmethod
    def get_config_filenames(cls):
        return NAMES
""",
    "gguf.py": "class GGUFConfig(QuantizationConfig):\n    pass\n",
    "bitsandbytes.py": "class BitsAndBytesConfig(QuantizationConfig):\n    pass\n",
}
AWQ = {"quant_method": "awq", "w_bit": 4, "q_group_size": 128, "zero_point": True}


def _tree(tmp_path, weight_utils: str = GET_QUANT_CONFIG):
    site = tmp_path / "site"
    for path, text in {WEIGHT_UTILS: weight_utils, f"{QUANTIZATION}/__init__.py": INIT}.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text(text)
    for name, text in MODULES.items():
        (site / QUANTIZATION / name).parent.mkdir(parents=True, exist_ok=True)
        (site / QUANTIZATION / name).write_text(text)
    return site


def _found(site, tmp_path, *options: str, files: dict[str, object] | None = None, config: dict | None = None):
    model = write_model(tmp_path / "target", config or DEEPSEEK_V3)
    for name, content in (files or {}).items():
        (model / name).write_text(json.dumps(content))
    command = parse(["vllm", "serve", str(model), *options], "0.16.0")
    target = resolve_model(str(model), {}, overrides=command.hf_overrides)
    return quantization_findings("command", LaunchContext(command, target, None, site, None, None))


@pytest.mark.parametrize(
    ("options", "files", "says"),
    [
        (["-q", "awq"], {}, 'vLLM refuses --quantization awq at start: the checkpoint\'s config.json has no quantization_config, and its directory has no *.json ending in quant_config.json or quantize_config.json ("Cannot find the config file for awq")'),
        (["-q", "awq"], {"awq_quant_config.json": AWQ, "quantize_config.json": AWQ}, "several config files for it (awq_quant_config.json, quantize_config.json"),
        (["-q", "awq"], {"quant_config.json": AWQ}, "cannot judge: whether awq's config reads quant_config.json"),
        (["-q", "compressed-tensors"], {}, "builds CompressedTensorsConfig() with no arguments, and it needs target_scheme_map, ignore, quant_format (TypeError)"),
        (["-q", "fp8"], {}, None),  # quantized at load: Fp8Config() takes no arguments
        (["-q", "gguf"], {}, None),  # returned for before the search
        (["-q", "bitsandbytes"], {}, None),  # in-flight
        (["-q", "odd"], {}, "cannot judge: how vLLM reads --quantization odd's config on a checkpoint without quantization_config: OddConfig.get_config_filenames is not a literal list"),
        (["-q", "awq", "--hf-overrides", json.dumps({"quantization_config_file": "q.json"})], {}, "cannot judge: how vLLM reads --quantization awq's config on a checkpoint without quantization_config: --hf-overrides names quantization_config_file, read instead"),
        (["-q", "awq"], {"hf_quant_config.json": {"producer": {"name": "modelopt"}}}, "cannot judge: what vLLM takes for --quantization awq"),
    ],
)  # fmt: skip
def test_a_quantization_without_the_checkpoints_config_is_read_as_get_quant_config_reads_it(
    tmp_path, options, files, says
):
    """diff34 D1: vLLM 0.16.0 refuses -q awq/gptq ("Cannot find the config file") and -q compressed-tensors
    (TypeError) on a checkpoint with no quantization_config at start; -q fp8 starts."""
    found = _found(_tree(tmp_path), tmp_path, *options, files=files)
    if says is None:
        assert found == [], [f.message for f in found]
        return
    [finding] = found
    assert says in finding.message, finding.message
    assert finding.ok is says.startswith("cannot judge"), finding.message
    assert finding.ok or "drop --quantization" in (finding.fix or ""), finding.fix


def test_a_checkpoint_with_a_quantization_or_an_unread_function_is_not_judged_here(tmp_path):
    """A quantization_config (text_config's, compression_config) is the mismatch rule's; a get_quant_config
    of another shape: cannot judge, never a verdict."""
    site = _tree(tmp_path)
    for held in ({"quantization_config": AWQ}, {"text_config": {"quantization_config": AWQ}}):
        found = _found(site, tmp_path, "-q", "awq", config={**DEEPSEEK_V3, **held})
        assert not any("config file" in f.message for f in found), [f.message for f in found]
    other = _tree(tmp_path / "other", "def get_quant_config(model_config, load_config):\n    return None\n")
    [finding] = _found(other, tmp_path, "-q", "awq")
    assert "the tree's get_quant_config is not of a shape read here" in finding.message, finding.message


RELEASE_LINES = [("awq", "fail"), ("gptq", "fail"), ("compressed-tensors", "fail"), ("fp8", None)]


@pytest.mark.release
@pytest.mark.parametrize(
    ("version", "given", "result"),
    [
        *((v, given, result) for v in ("0.16.0", "0.34.0") for given, result in RELEASE_LINES),
        ("0.34.0", "fp8_per_tensor", None),  # an online shorthand (config/quantization.py)
    ],
)
def test_release_files_say_which_quantizations_need_their_own_config(tmp_path, version, given, result):
    """0.16.0's and 0.34.0's stock get_quant_config, quantization/__init__.py, its methods' classes and
    (0.34.0) the online shorthands of config/quantization.py."""
    classes = ["awq", "gptq"] if version == "0.16.0" else ["auto_awq", "auto_gptq"]  # 0.34.0's awq: AutoAWQConfig
    paths = [WEIGHT_UTILS, *(f"{QUANTIZATION}/{m}.py" for m in ["__init__", *classes, "fp8"])]
    paths += [f"{QUANTIZATION}/compressed_tensors/compressed_tensors.py"]
    paths += ["vllm/config/quantization.py"] if version == "0.34.0" else []
    site = lay_out_release(version, paths, tmp_path / "site")
    found = [f for f in _found(site, tmp_path, "-q", given) if "quantization_config" in f.message]
    if result is None:
        assert found == [], [f.message for f in found]
        return
    [finding] = found
    assert finding.result == result, finding.message


# transformers' PretrainedConfig as 4.57.6 has it (configuration_utils.py from_dict :839, to_dict :962-967)
TRANSFORMERS = """
class PretrainedConfig:
    @classmethod
    def from_dict(cls, config_dict, **kwargs):
        config = cls(**config_dict)
        logger.info(f"Model config {config}")
        return config

    def to_dict(self):
        output = {}
        if hasattr(self, "quantization_config"):
            output["quantization_config"] = (
                self.quantization_config.to_dict()
                if not isinstance(self.quantization_config, dict)
                else self.quantization_config
            )
        return output
"""
GUARDED = TRANSFORMERS.replace(
    "if not isinstance(self.quantization_config, dict)", "if not isinstance(self.quantization_config, dict | None)"
)
AROUND = TRANSFORMERS.replace('if hasattr(self, "quantization_config"):', "if self.quantization_config is not None:")
NOT_LOGGED = TRANSFORMERS.replace('logger.info(f"Model config {config}")', 'logger.info("Model config loaded")')


@pytest.mark.parametrize(
    ("transformers", "held", "options", "result"),
    [
        (TRANSFORMERS, {"quantization_config": None}, [], "fail"),
        (TRANSFORMERS, {"quantization_config": None}, ["-q", "fp8"], "fail"),
        (TRANSFORMERS, {"quantization_config": None, "compression_config": {"quant_method": "compressed-tensors"}}, [], "fail"),
        (GUARDED, {"quantization_config": None}, [], "cannot judge"),
        (AROUND, {"quantization_config": None}, [], "cannot judge"),
        (NOT_LOGGED, {"quantization_config": None}, [], "cannot judge"),
        (None, {"quantization_config": None}, [], "cannot judge"),  # no transformers beside vllm/
        (TRANSFORMERS, {"text_config": {"quantization_config": None}}, [], "cannot judge"),  # a dict to from_dict
        # null only by --hf-overrides: config.json loads; what vLLM does with the override is not read here
        (TRANSFORMERS, {}, ["--hf-overrides", json.dumps({"quantization_config": None})], "cannot judge"),
    ],
)  # fmt: skip
def test_a_null_quantization_config_fails_where_the_launchs_transformers_raises_on_it(
    tmp_path, transformers, held, options, result
):
    """diff34 D2: transformers 4.57.6 (vLLM 0.16.0's) raises AttributeError loading a config.json with
    "quantization_config": null, whatever the command; read from the transformers beside vllm/."""
    site = _tree(tmp_path)
    if transformers is not None:
        (site / "transformers").mkdir()
        (site / "transformers" / "configuration_utils.py").write_text(transformers)
    found = _found(site, tmp_path, *options, config={**DEEPSEEK_V3, **held})
    null = [f for f in found if '"quantization_config": null' in f.message]
    assert len(null) == 1 and null[0].result == result, [f.message for f in found]
    if result == "fail":
        assert (
            "PretrainedConfig.to_dict" in null[0].message
            and null[0].fix == 'drop "quantization_config" from config.json'
        )
