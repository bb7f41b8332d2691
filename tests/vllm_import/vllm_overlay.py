"""A venv laid over the real vLLM venv of `make test-vllm`, for the tests that patch: the real venv is
never written to (other runs and other people use it).

The overlay is a new venv of the same interpreter whose site-packages holds a copy of the vllm
package and its dist-info (the compiled extensions, 1.3 GB of 0.16.0's 1.35, are symlinks: patchkit
writes only the Python sources, by replacing them) and reaches every other package of the real
venv through a .pth; pytest (and pluggy, iniconfig), copied from the venv running these tests,
come after them: the real venv has no pytest. Its `vllm` script is the real venv's, run by the
overlay's interpreter. `patchkit(python, ...)` runs this checkout's patchkit on an interpreter's vLLM.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from launch_fixtures import eagle3_tensors

VLLM_PYTHON = os.environ.get("VLLM_PYTHON")  # the real vLLM venv's interpreter (`make test-vllm` sets it)

PYTEST_DISTRIBUTIONS = ("pytest", "pluggy", "iniconfig")  # packaging and pygments: the vLLM venv's own
# a two-layer Llama config vLLM builds an engine config for without weights (the real tests' target)
TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "max_position_embeddings": 1024,
    "vocab_size": 1000,
    "torch_dtype": "bfloat16",
}

# DeepSeek-V3's shape (MLA), small
TINY_DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 256,
    "intermediate_size": 512, "moe_intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 4, "max_position_embeddings": 1024, "vocab_size": 1000, "q_lora_rank": 64,
    "kv_lora_rank": 32, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32, "n_routed_experts": 4,
    "n_shared_experts": 1, "num_experts_per_tok": 2, "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1,
    "routed_scaling_factor": 1.0, "scoring_func": "sigmoid", "topk_method": "noaux_tc", "norm_topk_prob": True,
}  # fmt: skip

# DeepSeek-V3's shape (MLA, 8 experts) 1024 wide, with vLLM's MLA backends' head counts: each test sets its
# depth, its vocabulary and its attention's ranks and head dims
WIDE_DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 1024,
    "intermediate_size": 2048, "moe_intermediate_size": 256, "num_attention_heads": 8, "num_key_value_heads": 8,
    "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2, "first_k_dense_replace": 1,
    "max_position_embeddings": 4096, "torch_dtype": "bfloat16",
}  # fmt: skip


def site_packages(python: str | Path) -> Path:
    done = subprocess.run(
        [str(python), "-B", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(done.stdout.strip())


def _copy_or_link(source: str, dest: str) -> None:
    """Sources are copied; a compiled extension is linked (read only; patchkit never writes one)."""
    if source.endswith(".so"):
        Path(dest).symlink_to(source)
    else:
        shutil.copy2(source, dest)


def copy_pytest(into: Path) -> None:
    """pytest's files as installed for this interpreter (the same Python version as the vLLM venv's)."""
    for name in PYTEST_DISTRIBUTIONS:
        distribution = importlib.metadata.distribution(name)
        for file in distribution.files or []:
            source = Path(str(distribution.locate_file(file)))
            if source.is_file() and "__pycache__" not in file.parts:
                (into / file).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, into / file)


def copy_vllm_script(base_python: str, python: Path) -> None:
    """The real venv's `vllm` console script with the overlay's interpreter on its #! line."""
    script = Path(base_python).with_name("vllm")
    if script.is_file():
        _, _, body = script.read_text().partition("\n")
        python.with_name("vllm").write_text(f"#!{python}\n{body}")
        python.with_name("vllm").chmod(0o755)


def overlay_venv(base_python: str, dest: Path) -> Path:
    """The python of a new overlay at `dest` over the venv of `base_python`."""
    subprocess.run([base_python, "-B", "-m", "venv", "--without-pip", str(dest)], check=True)
    python = dest / "bin" / "python"
    base_site, site = site_packages(base_python), site_packages(python)
    for entry in base_site.iterdir():
        if entry.name == "vllm" or (entry.name.startswith("vllm-") and entry.name.endswith(".dist-info")):
            shutil.copytree(entry, site / entry.name, symlinks=True, copy_function=_copy_or_link)
    copy_vllm_script(base_python, python)
    pytest_dir = dest / "pytest-lib"
    copy_pytest(pytest_dir)
    # addsitedir, not a bare path line: the real venv's own .pth files are read too
    (site / "_vllm_venv.pth").write_text(f"import site; site.addsitedir({str(base_site)!r})\n")
    (site / "_zz_pytest.pth").write_text(f"{pytest_dir}\n")
    return python


def patchkit(python: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "patchkit", *args, "--python", str(python)], capture_output=True, text=True, timeout=900
    )


def ask_vllm(script: str, *args: str) -> object:
    """The JSON a script run by the real vLLM venv's interpreter prints last, with this checkout's
    patchkit importable there (its _target workers) and no hub asked."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(Path(__file__).parents[2])}
    asked = subprocess.run(
        [str(VLLM_PYTHON), "-B", "-c", script, *args], capture_output=True, text=True, timeout=1200, env=env, check=True
    )
    return json.loads(asked.stdout.strip().splitlines()[-1])


def preflight_findings(*launch: str, static: bool = True) -> list[dict]:
    """Every finding of this checkout's `patchkit preflight` of `launch` on the real vLLM venv's
    interpreter (--python); static: without importing vLLM (--no-import)."""
    no_import = ["--no-import"] if static else []
    done = subprocess.run(
        [sys.executable, "-m", "patchkit", "preflight", "--python", str(VLLM_PYTHON), *no_import, "--format", "json",
         "--", *launch],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    return json.loads(done.stdout)["findings"]


def speculative_findings(target: Path, spec: dict, check: str, *options: str) -> list[dict]:
    """The `check` findings of preflight_findings of `vllm serve TARGET --speculative-config SPEC OPTIONS`."""
    found = preflight_findings("vllm", "serve", str(target), "--speculative-config", json.dumps(spec), *options)
    return [f for f in found if f["check"] == check]


def drafted(drafter: Path, method: str = "eagle3", **more: object) -> dict:
    """A speculative config of `method` with `drafter` proposing 2 tokens."""
    return {"method": method, "model": str(drafter), "num_speculative_tokens": 2, **more}


# the head of a script for ask_vllm: vLLM imported with its CPU platform forced
ON_CPU = """\
import json, sys
from patchkit._target.engine_config import _force_cpu_platform_when_none
import vllm
_force_cpu_platform_when_none()
"""
# and vLLM's EngineArgs imported
ENGINE_ARGS_ON_CPU = ON_CPU + "from vllm.engine.arg_utils import EngineArgs\n"


def engine_configs(method: str, answer: str, cut: int) -> str:
    """A script for ask_vllm: for each drafter (argv[2:]) vLLM's own EngineArgs(model=argv[1],
    skip_tokenizer_init=True, a speculative config of `method`).create_engine_config() on CPU; it says,
    of each, `answer` (an expression of the engine's `config`) or its error's words (cut to `cut`)."""
    return ENGINE_ARGS_ON_CPU + textwrap.dedent(f"""\
        said = {{}}
        for drafter in sys.argv[2:]:
            spec = {{"method": "{method}", "model": drafter, "num_speculative_tokens": 2}}
            try:
                config = EngineArgs(model=sys.argv[1], skip_tokenizer_init=True, speculative_config=spec).create_engine_config()
                said[drafter] = {answer}
            except Exception as exc:
                said[drafter] = f"{{type(exc).__name__}}: {{exc}}"[:{cut}]
        print(json.dumps(said))
        """)


# ask_vllm(REFUSED, json.dumps({name: [target, speculative config]})): of each, vLLM's own
# EngineArgs.create_engine_config() on CPU: None where it takes it, else its error's words
REFUSED = ENGINE_ARGS_ON_CPU + textwrap.dedent("""\
    refused = {}
    for name, (target, spec) in json.loads(sys.argv[1]).items():
        try:
            EngineArgs(model=target, speculative_config=spec, skip_tokenizer_init=True).create_engine_config()
            refused[name] = None
        except Exception as exc:
            refused[name] = f"{type(exc).__name__}: {exc}"[:300]
    print(json.dumps(refused))
    """)

# review38 B5's class: vLLM builds the EAGLE-3 drafter (llama_eagle3.py, of llama.py's layers) and loads its
# weights only after the target's load; both asked here on CPU, for each drafter directory in turn
DRAFTER_BUILT = """
import glob, json, os, sys, tempfile
from patchkit._target.engine_config import _force_cpu_platform_when_none
import vllm
_force_cpu_platform_when_none()
from vllm.config import set_current_vllm_config
from vllm.distributed import init_distributed_environment, initialize_model_parallel
from vllm.engine.arg_utils import EngineArgs
from vllm.model_executor.model_loader.weight_utils import safetensors_weights_iterator
init_distributed_environment(1, 0, f"file://{tempfile.mktemp()}", 0, "gloo")
initialize_model_parallel(1, 1)
from vllm.model_executor.models.llama_eagle3 import Eagle3LlamaForCausalLM
said = {}
for drafter in sys.argv[2:]:
    spec = {"method": "eagle3", "model": drafter, "num_speculative_tokens": 2}
    config = EngineArgs(model=sys.argv[1], skip_tokenizer_init=True, speculative_config=spec).create_engine_config()
    try:
        with set_current_vllm_config(config):
            built = Eagle3LlamaForCausalLM(vllm_config=config)
        built.load_weights(safetensors_weights_iterator(sorted(glob.glob(os.path.join(drafter, "*.safetensors"))), False))
        said[drafter] = None
    except Exception as exc:
        said[drafter] = f"{type(exc).__name__}: {exc}"
print(json.dumps(said))
"""
# a drafter for TINY_LLAMA (vLLM's EAGLE-3 whitelist takes a Llama target unpatched)
TINY_DRAFTER = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama",
    "num_hidden_layers": 1,
    "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 1000,
    "draft_vocab_size": 500,
    "eagle_aux_hidden_state_layer_ids": [0, 1, 1],
}


# TINY_DRAFTER's tensors as vLLM's llama_eagle3.py takes them (layer 0's q/k/v take 2 x 256: embeds and states)
TINY_WEIGHTS = eagle3_tensors(256, 128, 512, 500, 256, 1000)
