"""Small vLLM-shaped trees for the launch checks (preflight, run): just enough of the shape of the files
the eagle3 set patches and its launch checks read, written here (no vLLM source), with an eagle3
library holding the real set's contract and launch checks and a series made for these trees; and the
model and drafter config directories the launches name; a `tools` set beside eagle3, each set needed
by its own launches; and the readers of a preflight's findings and warnings."""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import subprocess
import textwrap
import zipfile
from pathlib import Path

import pytest
from cli_server import run_patchkit_with_pid
from helpers import (
    copy_with_bytecode,
    make_patch,
    run_cli_in_process,
    run_cli_judged,
    stale_pyc_under_prefix,
    write_library,
    write_tree,
)
from packaging.version import Version

from patchkit.series.library import default_root

SPEC = "vllm/config/speculative.py"
EAGLE = "vllm/v1/spec_decode/eagle.py"
DEEPSEEK = "vllm/model_executor/models/deepseek_v2.py"
KIMI = "vllm/model_executor/models/kimi_k25.py"
REGISTRY = "vllm/model_executor/models/registry.py"
WHITELIST = {"0.16.0": "eagle3_target_supported", "0.17.0": "aux_hidden_states_supported"}

SPEC_STOCK = textwrap.dedent("""\
    from typing import Literal

    MTPModelTypes = Literal["deepseek_mtp", "mtp"]
    EagleModelTypes = Literal["eagle", "eagle3", MTPModelTypes]
    SpeculativeMethod = Literal["ngram", "medusa", "mlp_speculator", "draft_model", "suffix", EagleModelTypes]


    class SpeculativeConfig:
        num_speculative_tokens: int = None
        model: str | None = None
        method: SpeculativeMethod | None = None
        draft_tensor_parallel_size: int | None = None
        tensor_parallel_size: int | None = None
        revision: str | None = None
        quantization: str | None = None

        def _verify_args(self):
            VARIABLE = [
                "llama",
                "qwen",
                "minicpm",
            ]
            if (
                self.method == "eagle3"
                and self.target_model_config
                and not any(
                    supported_model in self.target_model_config.hf_text_config.model_type
                    for supported_model in VARIABLE
                )
            ):
                raise ValueError(f"Eagle3 is only supported for {VARIABLE} models.")
            return self
    """)
SPEC_PATCHED = SPEC_STOCK.replace('"minicpm",\n', '"minicpm",\n            "deepseek",\n            "kimi_k2",\n')

EAGLE_STOCK = textwrap.dedent("""\
    class SpecDecodeBaseProposer:
        def load_model(self, target_model):
            image_token_index = None
            if self.is_multimodal:
                image_token_index = target_model.config.image_token_index
            return image_token_index
    """)
EAGLE_PATCHED = EAGLE_STOCK.replace(
    "            image_token_index = target_model.config.image_token_index\n",
    '            if hasattr(target_model.config, "media_placeholder_token_id"):\n'
    "                image_token_index = target_model.config.media_placeholder_token_id\n"
    "            else:\n"
    "                image_token_index = target_model.config.image_token_index\n",
)

DEEPSEEK_STOCK = textwrap.dedent("""\
    from .interfaces import SupportsPP


    class DeepseekV2Model:
        def __init__(self):
            self.layers = []

        def forward(self, x):
            return x


    class DeepseekV2ForCausalLM(SupportsPP):
        pass


    class DeepseekV3ForCausalLM(DeepseekV2ForCausalLM):
        pass
    """)
DEEPSEEK_PATCHED = textwrap.dedent("""\
    from .interfaces import SupportsEagle3, SupportsPP


    class DeepseekV2Model:
        def __init__(self):
            self.layers = []
            self.aux_hidden_state_layers = ()

        def forward(self, x):
            return [x for _ in self.aux_hidden_state_layers]


    class DeepseekV2ForCausalLM(SupportsPP, SupportsEagle3):
        def set_aux_hidden_state_layers(self, layers):
            self.model.aux_hidden_state_layers = layers

        def get_eagle3_aux_hidden_state_layers(self):
            return (2, 3)


    class DeepseekV3ForCausalLM(DeepseekV2ForCausalLM):
        pass
    """)
KIMI_STOCK = textwrap.dedent("""\
    from .interfaces import SupportsMultiModal


    class KimiK25ForConditionalGeneration(SupportsMultiModal):
        pass
    """)
KIMI_PATCHED = textwrap.dedent("""\
    from .interfaces import SupportsEagle3, SupportsMultiModal


    class KimiK25ForConditionalGeneration(SupportsMultiModal, SupportsEagle3):
        def set_aux_hidden_state_layers(self, layers):
            self.language_model.set_aux_hidden_state_layers(layers)

        def get_eagle3_aux_hidden_state_layers(self):
            return self.language_model.get_eagle3_aux_hidden_state_layers()
    """)
REGISTRY_PY = textwrap.dedent("""\
    _TEXT_GENERATION_MODELS = {
        "LlamaForCausalLM": ("llama", "LlamaForCausalLM"),
        "DeepseekV3ForCausalLM": ("deepseek_v2", "DeepseekV3ForCausalLM"),
    }
    _MULTIMODAL_MODELS = {
        "KimiK25ForConditionalGeneration": ("kimi_k25", "KimiK25ForConditionalGeneration"),
    }
    _SPECULATIVE_DECODING_MODELS = {
        "EagleLlamaForCausalLM": ("llama_eagle", "EagleLlamaForCausalLM"),
        "Eagle3LlamaForCausalLM": ("llama_eagle3", "Eagle3LlamaForCausalLM"),
        "LlamaForCausalLMEagle3": ("llama_eagle3", "Eagle3LlamaForCausalLM"),
    }
    """)


def stock_files(version: str) -> dict[str, str]:
    return {
        SPEC: SPEC_STOCK.replace("VARIABLE", WHITELIST.get(version, WHITELIST["0.17.0"])),
        EAGLE: EAGLE_STOCK,
        DEEPSEEK: DEEPSEEK_STOCK,
        KIMI: KIMI_STOCK,
        REGISTRY: REGISTRY_PY,
    }


def patched_files(version: str) -> dict[str, str]:
    return {
        SPEC: SPEC_PATCHED.replace("VARIABLE", WHITELIST.get(version, WHITELIST["0.17.0"])),
        EAGLE: EAGLE_PATCHED,
        DEEPSEEK: DEEPSEEK_PATCHED,
        KIMI: KIMI_PATCHED,
    }


def write_eagle3_setup(tmp: Path, version: str = "0.16.0", patched: dict[str, str] | None = None) -> tuple[Path, Path]:
    """(site-packages-like tree at stock, library root holding an `eagle3` set for it; `patched` replaces
    some of the files its patch makes)."""
    tree = write_tree(tmp / "site", version, stock_files(version))
    made = {**patched_files(version), **(patched or {})}
    patch = make_patch(tmp, tree, made, header="Description: eagle3 for the test trees\n")
    real = default_root() / "eagle3"
    library = tmp / "library"
    (library / "eagle3" / version).mkdir(parents=True)
    shutil.copy(real / "contract.toml", library / "eagle3" / "contract.toml")
    copy_with_bytecode(real / "launch.py", library / "eagle3" / "launch.py")
    (library / "eagle3" / version / "0001-eagle3.patch").write_bytes(patch)
    (library / "eagle3" / version / "series").write_text("0001-eagle3.patch\n")
    # from 0.18.0 the set is upstream: its series then covers a release before (never under upstream's range)
    covered = version if Version(version) < Version("0.18.0") else "0.17.0"
    (library / "eagle3" / "set.toml").write_text(
        'name = "eagle3"\nsupported = ">=0.11.0"\nupstream = ">=0.18.0"\ncontract = "contract.toml"\n'
        f'launch = "launch.py"\n\n[[releases]]\nversions = "=={covered}"\ndir = "{version}"\n'
    )
    return tree, library


DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "num_hidden_layers": 61,
    "vocab_size": 129280,
}
KIMI_K25 = {
    "architectures": ["KimiK25ForConditionalGeneration"],
    "model_type": "kimi_k25",
    "media_placeholder_token_id": 163605,
    "text_config": {"model_type": "kimi_k2", "hidden_size": 7168, "num_hidden_layers": 61, "vocab_size": 163840},
    "vision_config": {"model_type": "moonvit"},
}
DRAFTER = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama",
    "hidden_size": 7168,
    "target_hidden_size": 7168,
    "num_hidden_layers": 1,
    "vocab_size": 129280,
    "draft_vocab_size": 32000,
    "eagle_aux_hidden_state_layer_ids": [1, 29, 57],
}


def eagle3_tensors(
    hidden: int, kv_width: int, intermediate: int, draft_vocab: int, target_hidden: int, target_vocab: int | None
) -> dict[str, list[int]]:
    """The tensor shapes of a one-layer EAGLE-3 drafter as its checkpoint names them (layer 0's q/k/v take the
    embeddings and the states: twice `hidden`); `target_vocab` None: no t2d."""
    q_input = 2 * hidden
    tensors = {"d2t": [draft_vocab], **({"t2d": [target_vocab]} if target_vocab else {})}
    tensors |= {
        "lm_head.weight": [draft_vocab, hidden],
        "fc.weight": [hidden, 3 * target_hidden],
        "norm.weight": [hidden],
    }
    attention = {"q_proj": hidden, "k_proj": kv_width, "v_proj": kv_width}
    tensors |= {f"midlayer.self_attn.{name}.weight": [rows, q_input] for name, rows in attention.items()}
    tensors |= {"midlayer.self_attn.o_proj.weight": [hidden, hidden]}
    tensors |= {f"midlayer.mlp.{name}.weight": [intermediate, hidden] for name in ("gate_proj", "up_proj")}
    tensors |= {"midlayer.mlp.down_proj.weight": [hidden, intermediate]}
    norms = ("input_layernorm", "post_attention_layernorm", "hidden_norm")
    return tensors | {f"midlayer.{name}.weight": [hidden] for name in norms}


# a drafter trained for Kimi-K2.5: its vocabulary is the target's (DRAFTER's is DeepSeek-V3's)
KIMI_DRAFTER = {**DRAFTER, "vocab_size": KIMI_K25["text_config"]["vocab_size"]}
# the EAGLE-1 proposer (EAGLE) as 0.16.0 sizes its buffer (the drafter's hidden size) and fills it (the target's states)
EAGLE1_FEEDS = """
class EagleProposer:
    def __init__(self, vllm_config):
        self.hidden_size = self.draft_model_config.get_hidden_size()

    def set_inputs_first_pass(self, target_hidden_states, num_tokens):
        self.hidden_states[:num_tokens] = target_hidden_states
"""
# a DeepSeek EAGLE-1 head narrower (128) than its DeepSeek-V3 target (7168)
DEEPSEEK_EAGLE1 = {**DEEPSEEK_V3, "architectures": ["DeepSeekMTPModel"], "num_hidden_layers": 1, "hidden_size": 128}


WEIGHTS = "model.safetensors"  # a name vLLM's DefaultModelLoader globs for (*.safetensors)
TOKENIZER = "tokenizer_config.json"  # a name AutoTokenizer reads a tokenizer from
# a safetensors file holding no tensor: its 8-byte header length, then the header (what safetensors reads first)
EMPTY_SAFETENSORS = b"\x02" + b"\x00" * 7 + b"{}"
LFS_POINTER = "version https://git-lfs.github.com/spec/v1\noid sha256:4d7a2f\nsize 1234567890\n"


def safetensors_file(header: object, data: int, *, length: int | None = None) -> bytes:
    """A safetensors file with `header` (JSON) and `data` bytes of tensor data; `length` overrides
    the header length its first 8 bytes give."""
    text = json.dumps(header).encode()
    return (len(text) if length is None else length).to_bytes(8, "little") + text + b"\x00" * data


def torch_file() -> bytes:
    """What torch.save({}) writes, the smallest torch.load(weights_only=True) takes: a zip of its pickle."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("archive/data.pkl", pickle.dumps({}, protocol=2))
        archive.writestr("archive/byteorder", "little")
        archive.writestr("archive/version", "3\n")
    return buffer.getvalue()


def write_model(directory: Path, config: dict) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    (directory / WEIGHTS).write_bytes(EMPTY_SAFETENSORS)  # vLLM's loader globs for a weight file, then reads its header
    (directory / TOKENIZER).write_text("{}")  # vLLM loads the tokenizer from the model's directory at start
    return directory


def write_weights(directory: Path, shapes: dict[str, list[int]]) -> None:
    """A model.safetensors of one-byte tensors with these shapes (the data as long as the header says)."""
    header, start = {}, 0
    for name, shape in shapes.items():
        size = 1
        for dim in shape:
            size *= dim
        header[name] = {"dtype": "I8", "shape": shape, "data_offsets": [start, start + size]}
        start += size
    (directory / "model.safetensors").write_bytes(safetensors_file(header, start))


def weighted_model(directory: Path, config: dict, shapes: dict[str, list[int]]) -> Path:
    """A model directory: `config` and a model.safetensors of tensors of these shapes."""
    write_weights(write_model(directory, config), shapes)
    return directory


INDEX = "model.safetensors.index.json"


def index_of(*shards: str) -> str:
    return json.dumps({"metadata": {}, "weight_map": {f"w{i}": shard for i, shard in enumerate(shards)}})


ST = EMPTY_SAFETENSORS
PT = torch_file()
ONE_TENSOR = {"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}
# weight-file layouts (test_launch_weights.py; held against vLLM's loader in vllm_import/test_weights_real.py)
# (files: name -> content, or None for a link to nothing; load format; vLLM loads it whole and reads each file)
LAYOUTS: dict[str, tuple[dict[str, str | bytes | None], str, bool]] = {
    "config_only": ({"config.json": "{}"}, "auto", False),
    "safetensors": ({"config.json": "{}", "model.safetensors": ST}, "auto", True),
    "bin": ({"pytorch_model.bin": PT}, "auto", True),
    "training_args_only": ({"training_args.bin": PT, "optimizer.pt": PT}, "auto", False),
    "pt": ({"model.pt": PT}, "auto", True),
    # vLLM's glob stops at *.bin (training_args.bin), filters it out, and never reaches *.pt
    "training_args_before_pt": ({"training_args.bin": PT, "pytorch_model.pt": PT}, "auto", False),
    "optimizer_bin_before_pt_npcache": ({"optimizer.bin": PT, "model.pt": PT}, "npcache", False),
    "hidden_only": ({".model.safetensors": ST}, "auto", False),
    "in_a_subdirectory_only": ({"weights/model.safetensors": ST}, "auto", False),
    "sharded_whole": (
        {"a.safetensors": ST, "b.safetensors": ST, INDEX: index_of("a.safetensors", "b.safetensors")},
        "auto",
        True,
    ),
    "sharded_one_shard_missing": (
        {"a.safetensors": ST, INDEX: index_of("a.safetensors", "b.safetensors")},
        "auto",
        False,
    ),
    "index_names_none_there": ({"model.safetensors": ST, INDEX: index_of("other.safetensors")}, "auto", False),
    "index_not_json": ({"model.safetensors": ST, INDEX: "{not json"}, "auto", False),
    "index_without_weight_map": ({"model.safetensors": ST, INDEX: "{}"}, "auto", False),
    # review36 W5: json's decoder raises RecursionError past ~1,000 levels (was exit 70)
    "index_nested_deep": ({"model.safetensors": ST, INDEX: "[" * 100_000 + "]" * 100_000}, "auto", False),
    "bin_beside_an_index": ({"pytorch_model.bin": PT, INDEX: index_of("a.safetensors")}, "auto", True),
    "mistral_consolidated": ({"consolidated.safetensors": ST}, "auto", True),
    "consolidated_deeper_only": ({"model.safetensors": ST, "original/consolidated.safetensors": ST}, "auto", False),
    "a_link_to_nothing": ({"model.safetensors": None}, "auto", False),
    "safetensors_format_bin_only": ({"pytorch_model.bin": PT}, "safetensors", False),
    "pt_format_safetensors_only": ({"model.safetensors": ST}, "pt", False),
    "npcache_bin": ({"pytorch_model.bin": PT}, "npcache", True),
    # the files themselves: what safetensors' reader and torch.load refuse before any tensor (review35 N6)
    "one_tensor": ({"model.safetensors": safetensors_file(ONE_TENSOR, 8)}, "auto", True),
    "header_after_a_space": ({"model.safetensors": b"\x03" + b"\x00" * 7 + b" {}"}, "auto", True),
    "lfs_pointer": ({"config.json": "{}", "model.safetensors": LFS_POINTER}, "auto", False),
    "lfs_pointer_shard": (
        {"a.safetensors": ST, "b.safetensors": LFS_POINTER, INDEX: index_of("a.safetensors", "b.safetensors")},
        "auto",
        False,
    ),
    "lfs_pointer_bin": ({"pytorch_model.bin": LFS_POINTER}, "auto", False),
    "lfs_pointer_pt": ({"model.pt": LFS_POINTER}, "pt", False),
    "empty_safetensors": ({"model.safetensors": ""}, "auto", False),
    "empty_bin": ({"pytorch_model.bin": ""}, "auto", False),
    "too_short_for_a_header": ({"model.safetensors": b"\x02\x00\x00"}, "auto", False),
    "a_directory_named_safetensors": ({"model.safetensors/x": ST}, "auto", False),
    "a_directory_named_bin": ({"pytorch_model.bin/x": PT}, "auto", False),
    "header_past_the_end": ({"model.safetensors": safetensors_file({}, 0, length=10)}, "auto", False),
    "header_over_the_limit": ({"model.safetensors": safetensors_file({}, 0, length=100_000_001)}, "auto", False),
    "header_not_an_object": ({"model.safetensors": safetensors_file([], 0)}, "auto", False),
    "header_not_utf8": ({"model.safetensors": b"\x03" + b"\x00" * 7 + b'"\xff"'}, "auto", False),
    "tensor_data_cut_short": ({"model.safetensors": safetensors_file(ONE_TENSOR, 4)}, "auto", False),
    "bytes_past_the_tensors": ({"model.safetensors": safetensors_file(ONE_TENSOR, 9)}, "auto", False),
    "safetensors_format_torch_pt": ({"model.pt": PT}, "safetensors", False),
    "npcache_lfs_pointer": ({"pytorch_model.bin": LFS_POINTER}, "npcache", False),
    "npcache_lfs_pointer_dumped": ({"pytorch_model.bin": LFS_POINTER, "np/weight_names.json": "[]"}, "npcache", True),
}


def raw_safetensors(header: str, data: int) -> bytes:
    """A safetensors file whose header is the text `header` as written (NaN, -0, a key twice)."""
    return len(header.encode()).to_bytes(8, "little") + header.encode() + b"\x00" * data


def _tensor(dtype: str = '"F32"', shape: str = "[4]", offsets: str = "[0, 16]") -> str:
    return f'{{"dtype": {dtype}, "shape": {shape}, "data_offsets": {offsets}}}'


# headers that are a JSON object, each with its data length and whether safetensors' reader takes it
# (review36 W1: safetensors 0.8.0 refuses each False one before any tensor)
SAFETENSORS_HEADERS: dict[str, tuple[str, int, bool]] = {
    "tensor_an_integer": ('{"w": 1}', 0, False),
    "tensor_a_list_of_two": ('{"w": [1, 2]}', 0, False),
    "tensor_a_list_of_three": ('{"w": ["F32", [4], [0, 16]]}', 16, True),
    "tensor_a_list_of_four": ('{"w": ["F32", [4], [0, 16], 1]}', 16, False),
    "offset_a_float": ('{"w": ' + _tensor(offsets="[0, 16.0]") + "}", 16, False),
    "offsets_strings": ('{"w": ' + _tensor(offsets='["0", "16"]') + "}", 16, False),
    "offsets_booleans": ('{"w": ' + _tensor(offsets="[false, true]") + "}", 16, False),
    "offsets_three": ('{"w": ' + _tensor(offsets="[0, 16, 16]") + "}", 16, False),
    "offset_minus_zero": ('{"w": ' + _tensor(offsets="[-0, 16]") + "}", 16, False),
    "offset_infinity": ('{"w": ' + _tensor(offsets="[0, Infinity]") + "}", 16, False),
    "offset_past_a_usize": ('{"w": ' + _tensor('"U8"', "[1]", "[0, 18446744073709551616]") + "}", 1, False),
    "dtype_unknown": ('{"w": ' + _tensor('"F99"') + "}", 16, False),
    "dtype_lower_case": ('{"w": ' + _tensor('"f32"') + "}", 16, False),
    "dtype_as_a_map": ('{"w": ' + _tensor('{"F32": null}') + "}", 16, True),
    "dtype_complex": ('{"w": ' + _tensor('"C64"', "[2]") + "}", 16, True),
    "dtype_four_bits_whole_bytes": ('{"w": ' + _tensor('"F4"', "[4]", "[0, 2]") + "}", 2, True),
    "dtype_four_bits_half_a_byte": ('{"w": ' + _tensor('"F4"', "[3]", "[0, 2]") + "}", 2, False),
    "dtype_six_bits": ('{"w": ' + _tensor('"F6_E2M3"', "[4]", "[0, 3]") + "}", 3, True),
    "shape_not_the_offsets": ('{"w": ' + _tensor(shape="[3, 3]") + "}", 16, False),
    "shape_negative": ('{"w": ' + _tensor(shape="[-2, -2]") + "}", 16, False),
    "shape_nan": ('{"w": ' + _tensor(shape="[NaN]") + "}", 16, False),
    "shape_null": ('{"w": ' + _tensor(shape="null") + "}", 16, False),
    "shape_a_scalar": ('{"w": ' + _tensor(shape="[]", offsets="[0, 4]") + "}", 4, True),
    "shape_overflowing": ('{"w": ' + _tensor('"U8"', "[2305843009213693952]", "[0, 4]") + "}", 4, False),
    "shape_overflowing_before_a_zero": (
        '{"w": ' + _tensor('"U8"', "[9223372036854775808, 9223372036854775808, 0]", "[0, 0]") + "}",
        0,
        False,
    ),
    "shape_zero_first": (
        '{"w": ' + _tensor('"U8"', "[0, 9223372036854775808, 9223372036854775808]", "[0, 0]") + "}",
        0,
        True,
    ),
    "a_gap_before": ('{"w": ' + _tensor(offsets="[16, 32]") + "}", 32, False),
    "offsets_reversed": ('{"w": ' + _tensor(shape="[0]", offsets="[16, 0]") + "}", 16, False),
    "two_at_one_place": ('{"w": ' + _tensor() + ', "v": ' + _tensor() + "}", 16, False),
    "two_one_after_the_other": ('{"w": ' + _tensor() + ', "v": ' + _tensor(offsets="[16, 32]") + "}", 32, True),
    "empty_tensor_beside": ('{"w": ' + _tensor(shape="[0]", offsets="[0, 0]") + ', "v": ' + _tensor() + "}", 16, True),
    "field_missing": ('{"w": {"dtype": "F32", "data_offsets": [0, 16]}}', 16, False),
    "field_twice": ('{"w": {"dtype": "F32", "dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}', 16, False),
    "other_field_twice": ('{"w": {"x": 1, "x": 2, "dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}', 16, True),
    "tensor_twice_the_last_taken": (
        '{"w": ' + _tensor(shape="[8]", offsets="[0, 32]") + ', "w": ' + _tensor() + "}",
        16,
        True,
    ),
    "metadata_an_integer_value": ('{"__metadata__": {"a": 1}}', 0, False),
    "metadata_a_list": ('{"__metadata__": [1]}', 0, False),
    "metadata_nan": ('{"__metadata__": {"a": NaN}}', 0, False),
    "metadata_null": ('{"__metadata__": null}', 0, True),
    "metadata_twice": ('{"__metadata__": {"a": "b"}, "__metadata__": {"a": "b"}}', 0, False),
    "metadata_strings": ('{"__metadata__": {"format": "pt"}, "w": ' + _tensor() + "}", 16, True),
    # review36 W1's residual: a lone surrogate escape anywhere; Python's json takes it, serde refuses it
    "key_lone_surrogate": ('{"w\\ud800": ' + _tensor() + "}", 16, False),
    "key_lone_trailing_surrogate": ('{"w\\udc00": ' + _tensor() + "}", 16, False),
    "key_surrogate_pair": ('{"w\\ud83d\\ude00": ' + _tensor() + "}", 16, True),
    "key_escaped_backslash_then_u": ('{"w\\\\ud800": ' + _tensor() + "}", 16, True),
    "metadata_value_lone_surrogate": ('{"__metadata__": {"a": "b\\ud800"}, "w": ' + _tensor() + "}", 16, False),
    "other_field_lone_surrogate": ('{"w": {"x": ["a", ["\\uDBFF"]], ' + _tensor()[1:] + "}", 16, False),
}
LAYOUTS.update(
    {
        f"header_{name}": ({"model.safetensors": raw_safetensors(text, data)}, "auto", loads)
        for name, (text, data, loads) in SAFETENSORS_HEADERS.items()
    }
)


def write_layout(directory: Path, files: dict[str, str | bytes | None]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if content is None:
            path.symlink_to(directory / "gone" / name)
        else:
            path.write_bytes(content.encode() if isinstance(content, str) else content)
    return directory


def serve(model: Path | str, drafter: Path | str, *extra: str) -> list[str]:
    spec = json.dumps({"method": "eagle3", "model": str(drafter), "num_speculative_tokens": 3})
    return ["vllm", "serve", str(model), "--trust-remote-code", "-tp", "4", "--speculative-config", spec, *extra]


def stand_in_launch(tmp: Path, *serve_options: str) -> tuple[Path, Path, list[str], dict[str, str], Path]:
    """(tree, library, command, env, marker): the eagle3 setup, a Kimi-K2.5 launch with its drafter
    (and `serve_options`), and an environment whose PATH starts with a stand-in `vllm` that prints
    its PID and arguments, touches `marker` and exits 7."""
    tree, library = write_eagle3_setup(tmp)
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    marker = tmp / "launched"
    script = bin_dir / "vllm"
    script.write_text(f'#!/bin/sh\necho "pid $$"\necho "args $*"\ntouch {marker}\nexit 7\n')
    script.chmod(0o755)
    command = serve(write_model(tmp / "kimi", KIMI_K25), write_model(tmp / "drafter", KIMI_DRAFTER), *serve_options)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PATCHKIT_DEBUG", None)
    return tree, library, command, env, marker


def patchkit_run(
    tree: Path, library: Path, command: list[str], env: dict[str, str], *options: str
) -> tuple[int, subprocess.CompletedProcess[str]]:
    """`patchkit run` of `command` in a process of its own (a fork of cli_server's warm interpreter,
    or a fresh one where `env` changes what start-up reads): (its PID, its CompletedProcess)."""
    args = ["run", "--target", str(tree), "--patches", str(library), *options, "--", *command]
    return run_patchkit_with_pid(args, env, None, 120)


def stale_under_a_prefix(
    site: Path, library: Path, command: list[str], env: dict[str, str], marker: Path, prefix: Path, path: str
) -> tuple[list[str], Path, subprocess.CompletedProcess[str]]:
    """`patchkit run` of `command` under the pycache `prefix` launches (7) while nothing is stale there;
    then, an unchecked-hash .pyc of other bytes than `path`'s planted there, it runs again:
    (the launch under the prefix, the .pyc, that run)."""
    prefixed = ["env", f"PYTHONPYCACHEPREFIX={prefix}", *command]
    assert patchkit_run(site, library, prefixed, env)[1].returncode == 7  # launched: nothing stale yet
    marker.unlink()
    pyc = stale_pyc_under_prefix(prefix, site, path)
    return prefixed, pyc, patchkit_run(site, library, prefixed, env)[1]


def findings(done: subprocess.CompletedProcess[str]) -> dict[str, dict]:
    """A `--format json` preflight's findings by check name."""
    document = json.loads(done.stdout)
    return {f["check"]: f for f in document["findings"]}


def apply_fix(tree: Path, library: Path, python: str | None = None) -> str:
    """The fix a finding apply settles gives: apply on the tree and library checked (hints.py)."""
    interpreter = f" --python {python}" if python else ""
    return f"run `patchkit apply --target {tree}{interpreter} --patches {library}`"


def applied(tree: Path, library: Path, files: dict[str, str | None] | None = None) -> None:
    """eagle3 applied to `tree`, then `files` written into it (None: left out), as a release lays them out."""
    assert run_cli_judged("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    for path, text in (files or {}).items():
        if text is not None:
            (tree / path).parent.mkdir(parents=True, exist_ok=True)
            (tree / path).write_text(text)


def speculative_launch(tree: Path, library: Path, served: Path | str, spec: dict, *extra: str) -> dict:
    """The JSON document of a static preflight (judged: run_cli_judged) of `vllm serve SERVED
    --speculative-config SPEC EXTRA...` on `tree` with `library`."""
    done = run_cli_judged(
        "preflight", "--target", tree, "--patches", library, "--no-import", "--format", "json",
        "--", "vllm", "serve", str(served), "--speculative-config", json.dumps(spec), *extra,
    )  # fmt: skip
    return json.loads(done.stdout)


def applied_finding(tmp_path: Path, files: dict[str, str | None], command: list[str], check: str) -> dict | None:
    """The `check` finding (None: none) of a static preflight of `command` on a 0.16.0 stand-in tree with eagle3
    applied and `files` written into it (None: left out); a failing finding fails the command."""
    tree, library = write_eagle3_setup(tmp_path)
    applied(tree, library, files)
    done = run_cli_in_process(
        "preflight", "--target", tree, "--patches", library, "--no-import", "--format", "json", "--", *command
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr
    found = [f for f in json.loads(done.stdout)["findings"] if f["check"] == check]
    assert len(found) <= 1 and (done.returncode == 1 or all(f["result"] != "fail" for f in found)), done.stdout
    return found[0] if found else None


# Named by `name=`: a test that takes `launch` then shadows no name its module imports.
@pytest.fixture(name="launch")
def plain_launch(tmp_path: Path) -> tuple[Path, Path, list[str], dict[str, str], Path]:
    """stand_in_launch's launch with no serve options of its own."""
    return stand_in_launch(tmp_path)


WARNING = "warning: plugins not judged: "


def warnings(stderr: str) -> list[str]:
    """The plugin warnings `run` gives (its other warnings, the stand-in's `#!/bin/sh` vllm that
    launch-target cannot judge, say, are not these tests' subject)."""
    return [line for line in stderr.splitlines() if line.startswith("warning: plugins")]


# --- a `tools` set beside eagle3, each needed by its own launches ([needed_by]) ---------------------

PARSER = "vllm/tool_parsers/demo_tool_parser.py"
TOOLS = ("--enable-auto-tool-choice", "--tool-call-parser", "demo_v2")
LEFT_OUT = "this launch needs tools (--tool-call-parser demo/demo_v2), which --set leaves out: not judged"


def declare(set_dir: Path, table: str) -> None:
    """Put a [needed_by] table into a set.toml, before its [[releases]] tables."""
    manifest = set_dir / "set.toml"
    text = manifest.read_text()
    at = text.index("[[releases]]")
    manifest.write_text(text[:at] + f"[needed_by]\n{table}\n\n" + text[at:])


@pytest.fixture(name="setup")  # see plain_launch
def eagle3_and_tools(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    """(tree, library, target model, drafter): eagle3 needed by eagle3 launches, `tools` by
    --tool-call-parser demo or demo_v2; library.toml puts eagle3 first."""
    tree, lib = write_eagle3_setup(tmp_path)
    (tree / PARSER).parent.mkdir(parents=True, exist_ok=True)
    parser_class = "class DemoToolParser:\n    pass\n\n\n"  # a class a plugin may build on
    (tree / PARSER).write_text(parser_class + "def parse(text):\n    return text\n")
    patch = make_patch(tmp_path, tree, {PARSER: parser_class + "def parse(text):\n    return text.strip()\n"})
    write_library(lib, {"0.16.0": [patch]}, name="tools", upstream=None)
    declare(lib / "eagle3", 'speculative_methods = ["eagle3"]')
    declare(lib / "tools", 'tool_call_parsers = ["demo", "demo_v2"]')
    (lib / "library.toml").write_text('order = ["eagle3", "tools"]\n')
    return tree, lib, write_model(tmp_path / "target", DEEPSEEK_V3), write_model(tmp_path / "drafter", DRAFTER)


_SELF_SIGNED = ["-days", "30", "-subj", "/CN=patchkit-test"]


def tls_files(directory: Path) -> Path:
    """cert.pem with its key.pem, cert2.pem with other.pem (another key), enc.pem (key.pem encrypted),
    junk.pem, both.pem (cert.pem and key.pem in one file)."""
    directory.mkdir(exist_ok=True)
    for cert, key in (("cert.pem", "key.pem"), ("cert2.pem", "other.pem")):
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert, *_SELF_SIGNED],
            cwd=directory,
            check=True,
            capture_output=True,
        )
    subprocess.run(
        ["openssl", "pkey", "-in", "key.pem", "-aes256", "-passout", "pass:secret", "-out", "enc.pem"],
        cwd=directory,
        check=True,
        capture_output=True,
    )
    (directory / "junk.pem").write_text("not PEM\n")
    (directory / "both.pem").write_bytes((directory / "cert.pem").read_bytes() + (directory / "key.pem").read_bytes())
    return directory


# names and whether huggingface_hub's validate_repo_id takes them (test_launch_hub_ids.py, and against the
# real one in vllm_import/test_hub_cache_real.py)
REPO_IDS = [
    ("a" * 96, True),
    ("a" * 97, False),
    ("org/" + "a" * 96, True),
    ("org/" + "a" * 97, False),
    ("o" * 200 + "/a", True),  # the namespace has no length limit
    ("_adapter", True),
    ("adapter_", True),
    ("-adapter", False),
    ("adapter.", False),
    ("a--b", False),
    ("a..b", False),
    ("adapter.git", False),
    ("a/b/c", False),
    ("a b", False),
    ("émoji-free", True),  # \w is Unicode's
    ("org/Model-1.5_x", True),
]


# what vLLM 0.16.0's ServeSubcommand.cmd does with each (vLLM asked in vllm_import/test_headless_real.py):
# from 0.15.0 on, a count not given defaults to --data-parallel-size, 1 under an external load balancer,
# and --data-parallel-size-local (or 1) under a hybrid one
DATA_PARALLEL_CASES = [
    (["-dp", "0"], True),
    (["--data-parallel-size", "0"], True),
    (["--data-parallel-size=0"], True),
    (["-dp=0"], True),
    (["-dp", "-1"], True),
    (["-dp", "00"], True),
    (["-dp", "0", "-asc", "1"], False),
    (["-dp", "0", "--data-parallel-rank", "0"], False),
    (["-dp", "0", "--data-parallel-external-lb"], False),
    (["-dp", "0", "--data-parallel-start-rank", "0"], False),
    (["-dp", "0", "--data-parallel-hybrid-lb"], False),
    (["-dp", "0", "-dpl", "0", "--data-parallel-hybrid-lb"], False),
    (["-dp", "2", "-dpl", "0", "--data-parallel-start-rank", "1"], False),
]


# generation_config.json contents, each with whether transformers' GenerationConfig (4.57, the 0.16.0
# venv's) takes it: review36 W4 (tests/test_generation_config_refusals.py; vLLM asked in
# vllm_import/test_after_load_real.py)
GENERATION_CASES = {
    "max_new_tokens_negative": ('{"max_new_tokens": -1}', False),
    "max_new_tokens_zero": ('{"max_new_tokens": 0}', False),
    "max_new_tokens_false": ('{"max_new_tokens": false}', False),
    "max_new_tokens_string": ('{"max_new_tokens": "5"}', False),
    "max_new_tokens_true": ('{"max_new_tokens": true}', True),
    "max_new_tokens_one": ('{"max_new_tokens": 1}', True),
    "cache_nosuch": ('{"cache_implementation": "nosuch"}', False),
    "cache_a_number": ('{"cache_implementation": 5}', False),
    "cache_static": ('{"cache_implementation": "static"}', True),
    "cache_hybrid": ('{"cache_implementation": "hybrid"}', True),
    "watermarking_a_number": ('{"watermarking_config": 5}', False),
    "watermarking_null": ('{"watermarking_config": null}', True),
    "early_stopping_maybe": ('{"early_stopping": "maybe"}', False),
    "early_stopping_null": ('{"early_stopping": null}', False),
    "early_stopping_half": ('{"early_stopping": 0.5}', False),
    "early_stopping_a_list": ('{"early_stopping": [1]}', False),
    "early_stopping_never": ('{"early_stopping": "never"}', True),
    "early_stopping_one": ('{"early_stopping": 1}', True),
    "compile_config_an_object": ('{"compile_config": {}}', False),
    "two_returned_greedy": ('{"num_return_sequences": 2}', False),
    "two_returned_sampled": ('{"num_return_sequences": 2, "do_sample": true}', True),
    "more_returned_than_beams": ('{"num_beams": 2, "num_return_sequences": 3}', False),
    "fewer_returned_than_beams": ('{"num_beams": 4, "num_return_sequences": 2}', True),
    "one_returned_as_a_float": ('{"num_return_sequences": 1.0}', True),
    "a_generate_argument": ('{"streamer": null}', False),
    "a_generate_argument_from_model_config": ('{"_from_model_config": true, "streamer": null}', True),
    "pad_a_string": ('{"pad_token_id": "x"}', False),
    "pad_negative": ('{"pad_token_id": -1}', True),
    "sampling_values_greedy": ('{"temperature": 0.6, "top_p": 0.9}', True),
}
