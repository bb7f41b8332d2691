"""review40a D11: on Blackwell vLLM 0.13-0.17 set one MLA attention backend for a DeepSeek/Kimi
engine, and a named one (C4) does the same anywhere; the EAGLE-3 drafter's non-MLA layers then refuse
it. The eagle3 set's 0006 makes the selector give such a layer the platform's own choice, so the
drafter-architecture finding fails a named MLA backend only where the tree's selector lacks that
change, and names `patchkit apply` where the series brings it."""

from __future__ import annotations

import pytest
from helpers import assert_clean_failure, make_patch, run_cli, run_cli_in_process
from launch_fixtures import DEEPSEEK_V3, DRAFTER, apply_fix, findings, serve, write_eagle3_setup, write_model

# the tree's attention backend registry and the rule its backends share, as 0.16.0 lays them out
ATTENTION_FILES = {
    "vllm/v1/attention/backends/registry.py": "class AttentionBackendEnum(Enum):\n"
    '    FLASH_ATTN = "vllm.v1.attention.backends.flash_attn.FlashAttentionBackend"\n'
    '    TRITON_MLA = "vllm.v1.attention.backends.mla.triton_mla.TritonMLABackend"\n',
    "vllm/v1/attention/backend.py": "class AttentionBackend:\n    def validate_configuration(cls, use_mla):\n"
    "        if use_mla != cls.is_mla():\n"
    '            reasons.append("MLA not supported" if use_mla else "non-MLA not supported")\n',
}
# a selector's get_attn_backend: as stock binds every layer to the engine's backend, as 0006 leaves it
STOCK_SELECTOR = (
    "def get_attn_backend(head_size, use_mla=False):\n"
    "    backend_enum = get_current_vllm_config().attention_config.backend\n"
    "    return _cached_get_attn_backend(backend=backend_enum)\n"
)
CHOSEN_SELECTOR = (
    "def get_attn_backend(head_size, use_mla=False):\n"
    "    vllm_config = get_current_vllm_config()\n"
    "    backend_enum = _engine_backend_for_layer(vllm_config, use_mla)\n"
    "    return _cached_get_attn_backend(backend=backend_enum)\n\n\n"
    "def _engine_backend_for_layer(vllm_config, use_mla):\n"
    "    backend = vllm_config.attention_config.backend\n"
    "    if backend is None or use_mla or not vllm_config.model_config.use_mla:\n"
    "        return backend\n"
    "    return None if backend.get_class().is_mla() else backend\n"
)
# 0006 as revised (2026-12-05): the non-MLA layer's backend shares a kernel block size with the MLA one
BLOCKS_SELECTOR = CHOSEN_SELECTOR.replace(
    "    return None if backend.get_class().is_mla() else backend\n",
    "    engine = backend.get_class()\n"
    "    return _backend_sharing_blocks(vllm_config, engine) if engine.is_mla() else backend\n\n\n"
    "def _backend_sharing_blocks(vllm_config, engine):\n"
    "    from vllm.platforms import current_platform\n\n"
    "    return next(iter(current_platform.get_valid_backends()))\n",
)
# CUTLASS_MLA's and FlashInfer's classes and their kernel block sizes, as 0.13-0.17 write them
KERNEL_BLOCKS = {
    "vllm/v1/attention/backends/mla/cutlass_mla.py": "class CutlassMLABackend(MLACommonBackend):\n"
    "    @staticmethod\n    def get_supported_kernel_block_sizes() -> list[int | MultipleOf]:\n"
    "        return [128]\n",
    "vllm/v1/attention/backends/flashinfer.py": "class FlashInferBackend(AttentionBackend):\n"
    "    @staticmethod\n    def get_supported_kernel_block_sizes() -> list[int | MultipleOf]:\n"
    "        return [16, 32, 64]\n",
    "vllm/v1/attention/backends/registry.py": ATTENTION_FILES["vllm/v1/attention/backends/registry.py"]
    + '    CUTLASS_MLA = "vllm.v1.attention.backends.mla.cutlass_mla.CutlassMLABackend"\n'
    + '    FLASHINFER = "vllm.v1.attention.backends.flashinfer.FlashInferBackend"\n',
}
CUTLASS = ("--attention-backend", "CUTLASS_MLA")
MLA_TARGET = {**DEEPSEEK_V3, "kv_lora_rank": 512}
NAMED = ("--attention-backend", "TRITON_MLA")
SELECTOR = "vllm/v1/attention/selector.py"


def preflight(tree, library, *command):
    return run_cli_in_process(
        "preflight", "--target", tree, "--patches", library, "--format", "json", "--no-import", "--", *command
    )


def laid_out(tmp_path, selector: str | None, where: str = SELECTOR, named=NAMED):
    """(tree, library, launch): the eagle3 setup applied, the backend files, and `selector` at `where`."""
    tree, library = write_eagle3_setup(tmp_path)
    assert run_cli("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    for rel, text in {**ATTENTION_FILES, **KERNEL_BLOCKS, **({where: selector} if selector else {})}.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(text)
    launch = serve(write_model(tmp_path / "target", MLA_TARGET), write_model(tmp_path / "drafter", DRAFTER), *named)
    return tree, library, launch


def series_brings(tmp_path, stock: str, patched: str, what: str, named, files=None):
    """(tree, library, launch): the eagle3 setup, not applied, with the backend files (and `files`) and the
    selector `stock`, whose series then brings a diff of the selector to `patched` (its description `what`)."""
    tree, library = write_eagle3_setup(tmp_path)
    for rel, text in {**ATTENTION_FILES, **(files or {}), SELECTOR: stock}.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(text)
    diff = make_patch(tmp_path, tree, {SELECTOR: patched}, header=f"Description: {what}\n")
    (library / "eagle3" / "0.16.0" / "0002-selector.patch").write_bytes(diff)
    with open(library / "eagle3" / "0.16.0" / "series", "a") as series:
        series.write("0002-selector.patch\n")
    launch = serve(write_model(tmp_path / "target", MLA_TARGET), write_model(tmp_path / "drafter", DRAFTER), *named)
    return tree, library, launch


def assert_apply_is_the_fix(tree, library, launch, words: str) -> None:
    """The launch fails drafter-architecture saying `words`, its fix is apply, and after the apply it passes."""
    done = preflight(tree, library, *launch)
    assert_clean_failure(done, 1)
    finding = findings(done)["drafter-architecture"]
    assert not finding["ok"] and words in finding["message"], finding
    assert finding["fix"] == apply_fix(tree, library), finding
    assert run_cli("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    done = preflight(tree, library, *launch)
    assert done.returncode == 0, done.stdout


@pytest.mark.parametrize("selector", [None, STOCK_SELECTOR])
def test_a_named_mla_backend_fails_where_the_selector_binds_every_layer(tmp_path, selector):
    tree, library, launch = laid_out(tmp_path, selector)
    done = preflight(tree, library, *launch)
    assert_clean_failure(done, 1)
    finding = findings(done)["drafter-architecture"]
    assert not finding["ok"] and "--attention-backend TRITON_MLA is an MLA backend" in finding["message"], finding
    assert finding["fix"] == "drop --attention-backend: vLLM then picks a backend for each layer", finding


@pytest.mark.parametrize("selector", [CHOSEN_SELECTOR, BLOCKS_SELECTOR])
@pytest.mark.parametrize("where", ["vllm/v1/attention/selector.py", "vllm/attention/selector.py"])
def test_a_named_mla_backend_passes_where_the_selector_lets_the_drafter_choose(tmp_path, where, selector):
    """0.14-0.17 keep the selector in vllm/v1/attention/, 0.13 in vllm/attention/. TRITON_MLA's class
    lists no kernel block sizes of its own (any): the older 0006's FlashInfer shares them."""
    tree, library, launch = laid_out(tmp_path, selector, where)
    done = preflight(tree, library, *launch)
    assert done.returncode == 0, done.stdout
    assert findings(done)["drafter-architecture"]["ok"]


def test_the_fix_is_apply_where_the_series_brings_the_change(tmp_path):
    """A stock tree whose series patches the selector: apply is the fix (on Blackwell dropping the
    option is not enough: vLLM sets an MLA backend for the engine itself), and after it the launch passes."""
    tree, library, launch = series_brings(tmp_path, STOCK_SELECTOR, CHOSEN_SELECTOR, "layers choose", NAMED)
    assert_apply_is_the_fix(tree, library, launch, "is an MLA backend")


def test_a_named_cutlass_mla_fails_where_the_drafter_gets_flashinfer_and_passes_where_it_shares_blocks(tmp_path):
    """review D15: CUTLASS_MLA forces the engine's block size to 128 and takes kernel blocks of 128
    only; the 0006 before 2026-12-05 gave the drafter the platform's first choice on Blackwell,
    FlashInfer (16, 32, 64), and vLLM's model runner raised "No common block size for 128" after the
    target's load. The revised 0006 gives it a backend that shares one (FlashAttention's multiples of 16)."""
    tree, library, launch = laid_out(tmp_path / "older", CHOSEN_SELECTOR, named=CUTLASS)
    done = preflight(tree, library, *launch)
    assert_clean_failure(done, 1)
    finding = findings(done)["drafter-architecture"]
    said = "--attention-backend CUTLASS_MLA takes kernel blocks of 128, FlashInfer (the drafter's backend on Blackwell)"
    assert not finding["ok"] and said in finding["message"] and "16, 32, 64: none is common" in finding["message"]
    assert finding["fix"] == "drop --attention-backend: vLLM then picks a backend for each layer", finding
    # where the tree has FLASHINFER_MLA (0.13-0.17), naming it is the fix (dropping the option gives
    # CUTLASS_MLA again on 0.13/0.14's Blackwell)
    flashinfer_mla = {
        "vllm/v1/attention/backends/mla/flashinfer_mla.py": "class FlashInferMLABackend(MLACommonBackend):\n"
        "    @staticmethod\n    def get_supported_kernel_block_sizes() -> list[int | MultipleOf]:\n"
        "        return [32, 64]\n",
        "vllm/v1/attention/backends/registry.py": KERNEL_BLOCKS["vllm/v1/attention/backends/registry.py"]
        + '    FLASHINFER_MLA = "vllm.v1.attention.backends.mla.flashinfer_mla.FlashInferMLABackend"\n',
    }
    for rel, text in flashinfer_mla.items():
        (tree / rel).write_text(text)
    finding = findings(preflight(tree, library, *launch))["drafter-architecture"]
    assert not finding["ok"] and said in finding["message"], finding
    assert finding["fix"] == "name FLASHINFER_MLA in place of CUTLASS_MLA: FlashInfer takes its kernel blocks too"

    tree, library, launch = laid_out(tmp_path / "revised", BLOCKS_SELECTOR, named=CUTLASS)
    done = preflight(tree, library, *launch)
    assert done.returncode == 0, done.stdout
    assert findings(done)["drafter-architecture"]["ok"]


def test_a_tree_with_the_older_0006_is_fixed_by_the_series_that_brings_the_revised_one(tmp_path):
    """The series patches the selector as the revised 0006 does: its fix (apply) is the finding's."""
    tree, library, launch = series_brings(
        tmp_path, CHOSEN_SELECTOR, BLOCKS_SELECTOR, "blocks shared", CUTLASS, KERNEL_BLOCKS
    )
    assert_apply_is_the_fix(tree, library, launch, "none is common")
