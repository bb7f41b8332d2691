"""The EAGLE-3 requirements (issue 3) on the real releases' code, fetched from the package index.

For every supported release the stock files are fetched, the library's series is applied to a copy, and
the patched code is judged by assertions of this test: the whitelist, the EAGLE proposer and the model
methods are run with stand-in objects (no torch, no vLLM import), and the classes are read with ast.
Then the set's declared contract (patches/eagle3/contract.toml, the `contract` check) must pass on the
patched code, fail on the stock code, and pass on upstream releases' own code.
"""

from __future__ import annotations

import ast
import json
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from eagle3_judges import (
    DEEPSEEK,
    EAGLE,
    EAGLE3,
    KIMI,
    KIMI_CLASS,
    MEDIA_TOKEN,
    NEW_TARGETS,
    SPEC,
    UPSTREAM,
    IntermediateTensors,
    base_names,
    compile_function,
    contract,
    deepseek_forward,
    drafter_image_token,
    eagle3_accepts,
    expected_requirements,
    find,
    has_engine_mla_default,
    has_kimi,
    has_whitelist,
    imported_names,
    proposer_file,
    reference_forward,
    selector_file,
    source,
    stock,
    stock_paths,
    whitelist,
)
from helpers import SUPPORTED_RELEASES, lay_out_release, make_patch, snapshot, write_library
from packaging.version import Version

from patchkit.fetch import release_tree
from patchkit.launch import aux_layers
from patchkit.releases.files import files_for

pytestmark = pytest.mark.release


@pytest.fixture(scope="module")
def patched(tmp_path_factory, request):
    """version -> a writable copy of the stock tree with the library's series applied by `patchkit apply`."""
    from click.testing import CliRunner

    from patchkit.cli.main import cli

    trees: dict[str, Path] = {}

    def get(version: str) -> Path:
        if version not in trees:
            target = tmp_path_factory.mktemp(f"patched-{version}") / "site"
            lay_out_release(version, stock_paths(version), target)
            result = CliRunner().invoke(cli, ["apply", "--target", str(target)], catch_exceptions=False)
            assert result.exit_code == 0, result.output[-2000:]
            trees[version] = target
        return trees[version]

    return get


@pytest.mark.parametrize("version", SUPPORTED_RELEASES)
def test_whitelist_accepts_deepseek_and_kimi_targets(patched, version):
    stock_text, patched_text = source(stock(version), SPEC), source(patched(version), SPEC)
    variable, stock_entries, _ = whitelist(stock_text)
    patched_variable, entries, _ = whitelist(patched_text)
    assert (
        patched_variable
        == variable
        == ("eagle3_target_supported" if Version(version) < Version("0.17.0") else "aux_hidden_states_supported")
    )
    assert entries == stock_entries + NEW_TARGETS
    for model_type in ("deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "kimi_k25"):
        assert eagle3_accepts(patched_text, model_type), model_type
        assert not eagle3_accepts(stock_text, model_type), model_type
    assert eagle3_accepts(patched_text, "llama") and eagle3_accepts(stock_text, "llama")
    assert not eagle3_accepts(patched_text, "mistral")


# --- 2. the EAGLE proposer for a Kimi-K2.5 target ------------------------------------------------


@pytest.mark.parametrize("version", [v for v in SUPPORTED_RELEASES if has_kimi(v)])
def test_proposer_takes_kimi_k25_media_placeholder_token(patched, version):
    stock_text, patched_text = source(stock(version), EAGLE), source(patched(version), EAGLE)
    kimi_config = {"media_placeholder_token_id": MEDIA_TOKEN, "vision_config": SimpleNamespace()}
    assert drafter_image_token(patched_text, KIMI_CLASS, **kimi_config) == MEDIA_TOKEN
    with pytest.raises(AttributeError, match="image_token_index"):
        drafter_image_token(stock_text, KIMI_CLASS, **kimi_config)
    # other targets as before
    for text in (stock_text, patched_text):
        assert drafter_image_token(text, "Qwen2_5_VLForConditionalGeneration", image_token_id=7) == 7
        assert drafter_image_token(text, "LlavaForConditionalGeneration", image_token_index=9) == 9


# --- 3. DeepseekV2ForCausalLM implements SupportsEagle3 ------------------------------------------


@pytest.mark.parametrize("version", SUPPORTED_RELEASES)
def test_deepseek_v2_implements_supports_eagle3(patched, version):
    text = source(patched(version), DEEPSEEK)
    module = ast.parse(text)
    assert "SupportsEagle3" in base_names(find(module, "DeepseekV2ForCausalLM"))
    assert base_names(find(module, "DeepseekV3ForCausalLM")) == ["DeepseekV2ForCausalLM"]
    interfaces = next(n for n in module.body if isinstance(n, ast.ImportFrom) and n.module == "interfaces")
    assert "SupportsEagle3" in {a.name for a in interfaces.names}
    assert "SupportsEagle3" not in imported_names(ast.parse(source(stock(version), DEEPSEEK)))

    model = SimpleNamespace(model=SimpleNamespace(layers=[None] * 61))
    compile_function(text, "DeepseekV2ForCausalLM.set_aux_hidden_state_layers")(model, (2, 30, 58))
    assert model.model.aux_hidden_state_layers == (2, 30, 58)
    assert compile_function(text, "DeepseekV2ForCausalLM.get_eagle3_aux_hidden_state_layers")(model) == (2, 30, 58)

    init = find(module, "DeepseekV2Model.__init__")
    [default] = [
        n.value
        for n in ast.walk(init)
        if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "self.aux_hidden_state_layers"
    ]
    assert eval(ast.unparse(default)) == ()


@pytest.mark.parametrize("version", SUPPORTED_RELEASES)
def test_deepseek_v2_forward_returns_aux_hidden_states_when_asked(patched, version):
    stock_text, text = source(stock(version), DEEPSEEK), source(patched(version), DEEPSEEK)
    # no aux layers: exactly the stock output
    assert (
        deepseek_forward(text, inputs_embeds=1, intermediate_tensors=None)
        == deepseek_forward(stock_text, inputs_embeds=1, intermediate_tensors=None)
        == reference_forward(1, 0, (), 0, 5)[0]
    )
    # aux layers on the last rank: (hidden_states, [hidden + residual before each listed layer])
    assert (
        deepseek_forward(text, aux=(1, 3), inputs_embeds=1, intermediate_tensors=None)
        == reference_forward(1, 0, (1, 3), 0, 5)
        == (208, [12, 72])
    )
    # layer 0 on the first rank, before any residual: the embeddings alone (`hidden + None` raised there,
    # in vLLM's start-up profile run, for a drafter trained on layer 0)
    assert (
        deepseek_forward(text, aux=(0, 3), inputs_embeds=1, intermediate_tensors=None)
        == reference_forward(1, None, (0, 3), 0, 5)
        == (208, [1, 72])
    )
    # a later pipeline rank: absolute layer indices
    carried = IntermediateTensors(hidden_states=5, residual=4)
    assert deepseek_forward(
        text, aux=(3,), first=False, start=2, end=5, intermediate_tensors=carried
    ) == reference_forward(5, 4, (3,), 2, 5)
    # not the last rank: the intermediate tensors, as stock
    middle = {"aux": (1,), "last": False, "inputs_embeds": 1, "intermediate_tensors": None}
    assert deepseek_forward(text, **middle) == deepseek_forward(stock_text, **middle)
    assert isinstance(deepseek_forward(text, **middle), IntermediateTensors)


# --- 4. KimiK25ForConditionalGeneration implements SupportsEagle3 ---------------------------------


@pytest.mark.parametrize("version", [v for v in SUPPORTED_RELEASES if has_kimi(v)])
def test_kimi_k25_delegates_supports_eagle3_to_its_language_model(patched, version):
    text = source(patched(version), KIMI)
    module = ast.parse(text)
    assert "SupportsEagle3" in base_names(find(module, KIMI_CLASS))
    assert "SupportsEagle3" in imported_names(module)
    assert "SupportsEagle3" not in imported_names(ast.parse(source(stock(version), KIMI)))

    calls = []
    language_model = SimpleNamespace(
        set_aux_hidden_state_layers=calls.append,
        layers=[None] * 61,
        get_eagle3_aux_hidden_state_layers=lambda: (3, 4, 5),
    )
    kimi = SimpleNamespace(language_model=language_model)
    compile_function(text, f"{KIMI_CLASS}.set_aux_hidden_state_layers")(kimi, (4, 5))
    layers = compile_function(text, f"{KIMI_CLASS}.get_eagle3_aux_hidden_state_layers")(kimi)
    if Version(version) < Version("0.16.0"):
        # 0.15.x builds the language model as a bare DeepseekV2Model: set it there, default layers
        assert calls == [] and language_model.aux_hidden_state_layers == (4, 5)
        assert layers == (2, 30, 58)
    else:  # a DeepseekV2ForCausalLM: delegate
        assert calls == [(4, 5)] and not hasattr(language_model, "aux_hidden_state_layers")
        assert layers == (3, 4, 5)


# --- 5. (0.13-0.17) the drafter's layers are not bound by the engine's MLA backend --------------

CUDA = "vllm/platforms/cuda.py"
ENGINE_BACKEND = "vllm_config.attention_config.backend"


def blackwell_default(version: str) -> tuple[str, int]:
    """(the backend, its line): the MLA backend CudaPlatformBase.check_and_update_config sets for the whole
    engine, under `is_device_capability_family(100)` (Blackwell), when none is given."""
    text = source(release_tree(version, [CUDA]), CUDA)
    found = [
        (ast.unparse(node.value), node.lineno)
        for branch in ast.walk(find(ast.parse(text), "CudaPlatformBase.check_and_update_config"))
        if isinstance(branch, ast.If) and "is_device_capability_family(100)" in ast.unparse(branch.test)
        for node in branch.body
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == ENGINE_BACKEND
    ]
    assert len(found) == 1, found
    return found[0]


REGISTRIES = ("vllm/v1/attention/backends/registry.py", "vllm/attention/backends/registry.py")
# the backends the sizes matter for: Blackwell's MLA defaults and the platform's non-MLA choices
SIZED = ("CUTLASS_MLA", "FLASHINFER_MLA", "FLASHINFER", "FLASH_ATTN", "TRITON_ATTN", "FLEX_ATTENTION")


def kernel_blocks(version: str) -> dict[str, list]:
    """name -> the kernel block sizes each backend's own get_supported_kernel_block_sizes lists in the
    release (None where its class inherits them), read with the launch rule's reader."""
    from patchkit.launch.kernel_blocks import _registered, kernel_block_sizes

    def read_in(tree: Path):
        return lambda path: (tree / path).read_bytes() if (tree / path).is_file() else None

    registries = release_tree(version, [p for p in REGISTRIES if Version(version) >= Version("0.14") or "v1" not in p])
    modules = [_registered(read_in(registries), REGISTRIES, name) for name in SIZED]
    files = [f"{m.rpartition('.')[0].replace('.', '/')}.py" for m in modules if m]
    tree = release_tree(version, [*files, *(p for p in REGISTRIES if (registries / p).is_file())])
    return {name: kernel_block_sizes(read_in(tree), REGISTRIES, name) for name in SIZED}


def blackwell_non_mla_priorities(version: str) -> list[str]:
    """The platform's non-MLA backends on 10.x, in its priority order (the release's cuda.py)."""
    text = source(release_tree(version, [CUDA]), CUDA)
    names = SimpleNamespace(**{name: name for name in SIZED})
    capability = SimpleNamespace(major=10, minor=0)
    return compile_function(text, "_get_backend_priorities", {"AttentionBackendEnum": names})(False, capability)


class Backend:
    def __init__(self, name: str, mla: bool | None, sizes: list | None = None):
        self.name, self.mla = name, mla
        # vLLM's MultipleOf is read by its .base; a class that lists none inherits MultipleOf(1)
        taken = [s if isinstance(s, int) else SimpleNamespace(base=s[1]) for s in sizes or [("multiple", 1)]]
        self.sizes = taken

    def get_class(self):
        if self.mla is None:
            raise ImportError(self.name)
        return SimpleNamespace(is_mla=lambda: self.mla, get_supported_kernel_block_sizes=lambda: self.sizes)


class SelectorConfig(SimpleNamespace):
    def _replace(self, **changed):
        return SelectorConfig(**{**vars(self), **changed})


def selected(text: str, backend, model_mla: bool, layer_mla: bool, monkeypatch, block=16, platform=None):
    """The backend the release's get_attn_backend hands the platform for one layer (run with stand-ins;
    `platform`: the CUDA platform's get_valid_backends, as a list of backends in its priority order)."""
    config = SimpleNamespace(attention_config=SimpleNamespace(backend=backend), model_config=SimpleNamespace())
    config.model_config.use_mla, config.cache_config = model_mla, SimpleNamespace(block_size=block)
    monkeypatch.setitem(sys.modules, "vllm.config", SimpleNamespace(get_current_vllm_config=lambda: config))
    cuda = SimpleNamespace(
        get_device_capability=lambda: SimpleNamespace(major=10, minor=0),
        get_valid_backends=lambda device_capability, attn_selector_config, **more: (
            [(b, i) for i, b in enumerate(platform or ())],
            {},
        ),
    )
    monkeypatch.setitem(sys.modules, "vllm.platforms", SimpleNamespace(current_platform=cuda))
    namespace = {
        "get_args": lambda t: (),
        "cast": lambda t, v: v,
        "CacheDType": str,
        "AttentionSelectorConfig": SelectorConfig,
        "AttentionType": SimpleNamespace(DECODER="decoder"),
        "_cached_get_attn_backend": lambda backend, attn_selector_config, **more: backend,
    }
    helpers = ("_engine_backend_for_layer", "_backend_sharing_blocks", "_share_kernel_block")
    for helper in (h for h in helpers if f"def {h}(" in text):
        namespace[helper] = compile_function(text, helper, namespace)
    for helper in (h for h in helpers if h in namespace):
        namespace[helper].__globals__.update(namespace)  # each compiled into its own copy: let them call each other
    get_attn_backend = compile_function(text, "get_attn_backend", namespace)
    return get_attn_backend(head_size=128, dtype="bfloat16", kv_cache_dtype=None, block_size=None, use_mla=layer_mla)


@pytest.mark.parametrize("version", [v for v in SUPPORTED_RELEASES if has_engine_mla_default(v)])
def test_the_drafters_layers_get_the_platforms_choice_under_the_engines_mla_backend(patched, version, monkeypatch):
    default, line = blackwell_default(version)
    assert default == (
        "AttentionBackendEnum.CUTLASS_MLA" if version < "0.15" else "AttentionBackendEnum.FLASHINFER_MLA"
    )
    sizes = kernel_blocks(version)
    assert sizes["CUTLASS_MLA"] == [128] and sizes["FLASHINFER"] == [16, 32, 64], sizes
    assert sizes["FLASHINFER_MLA"] == [32, 64] and sizes["FLASH_ATTN"] == [("multiple", 16)], sizes
    priorities = blackwell_non_mla_priorities(version)
    assert priorities[:2] == ["FLASHINFER", "FLASH_ATTN"], priorities
    platform = [Backend(name, mla=False, sizes=sizes[name]) for name in priorities]
    # the engine's block size as check_and_update_config forces it for the default (cuda.py:{line})
    name = default.rsplit(".", 1)[1]
    engine, block = Backend(name, mla=True, sizes=sizes[name]), 128 if name == "CUTLASS_MLA" else 64
    stock_text, patched_text = (
        source(stock(version), selector_file(version)),
        source(patched(version), selector_file(version)),
    )

    def pick(text, backend, model_mla=True, layer_mla=False, block=block):
        return selected(text, backend, model_mla, layer_mla, monkeypatch, block, platform)

    # stock: the drafter's non-MLA layer is handed the engine's MLA backend, which it refuses
    assert pick(stock_text, engine) is engine, line
    # patched: the platform's first choice whose kernel blocks meet the engine backend's: FlashInfer
    # under FLASHINFER_MLA (64), FlashAttention under CUTLASS_MLA (128 only: FlashInfer takes at most 64)
    want = "FLASH_ATTN" if name == "CUTLASS_MLA" else "FLASHINFER"
    assert pick(patched_text, engine).name == want, (version, name)
    cutlass = Backend("CUTLASS_MLA", mla=True, sizes=sizes["CUTLASS_MLA"])
    assert pick(patched_text, cutlass, block=128).name == "FLASH_ATTN"  # named (every release)
    assert pick(patched_text, cutlass, block=256).name == "FLASH_ATTN"  # --block-size 256: kernel 128
    # no valid backend shares one: the platform's choice (None), which then reports it
    assert selected(patched_text, cutlass, True, False, monkeypatch, 128, platform[:1]) is None
    # the target's MLA layers keep the backend vLLM set
    assert pick(patched_text, engine, layer_mla=True) is engine
    # as stock: a non-MLA model's layers under a named MLA backend (its own build fails), a named non-MLA
    # backend, none set, and a backend that cannot be loaded (the platform says so)
    assert pick(patched_text, engine, model_mla=False) is engine
    flash = Backend("FLASH_ATTN", mla=False)
    assert pick(patched_text, flash) is flash
    assert pick(patched_text, None) is None
    unloadable = Backend("FLASHINFER_MLA", mla=None)
    assert pick(patched_text, unloadable) is unloadable


# --- the declared contract ---------------------------------------------------------------------


@pytest.mark.parametrize("version", SUPPORTED_RELEASES)
def test_contract_passes_on_patched_and_fails_on_stock(patched, run, version):
    tree = patched(version)
    passed = contract(tree, version)
    assert len(passed) == expected_requirements(version)
    assert all(r.ok for r in passed), [r.message for r in passed if not r.ok]

    result = run("verify", "--target", tree, "--set", "eagle3", "--format", "json")
    assert result.exit_code == 0, result.output[-2000:]
    checks = [c for c in json.loads(result.stdout)["checks"] if c["check"] == "contract"]
    assert len(checks) == expected_requirements(version) and all(c["ok"] for c in checks)

    failed = contract(stock(version), version)
    assert len(failed) == expected_requirements(version)
    assert not any(r.ok for r in failed), [r.message for r in failed if r.ok]  # each one detects the gap


@pytest.mark.parametrize("version", UPSTREAM)
def test_contract_holds_on_upstream_code(version):
    tree = stock(version)
    results = contract(tree, version)
    assert len(results) == (1 if has_whitelist(version) else 0) + 2 + 6 + 3
    assert all(r.ok for r in results), [r.message for r in results if not r.ok]
    assert {r.path for r in results} >= {proposer_file(version), DEEPSEEK, KIMI}
    # and the behaviour the contract stands for
    assert (
        drafter_image_token(source(tree, proposer_file(version)), KIMI_CLASS, media_placeholder_token_id=MEDIA_TOKEN)
        == MEDIA_TOKEN
    )
    if has_whitelist(version):
        assert all(eagle3_accepts(source(tree, SPEC), t) for t in NEW_TARGETS)
    else:
        assert "aux_hidden_states_supported" not in source(tree, SPEC)


# --- planted faults in the real patched files ----------------------------------------------------


def drop_method(text: str, cls: str, method: str) -> str:
    node = find(ast.parse(text), f"{cls}.{method}")
    lines = text.splitlines(keepends=True)
    end = node.end_lineno + (1 if lines[node.end_lineno].strip() == "" else 0)
    return "".join(lines[: node.lineno - 1] + lines[end:])


def drop_line(text: str, line: str) -> str:
    assert text.count(line) == 1, line
    return text.replace(line, "")


def drop_kimi_branch(text: str) -> str:
    start = text.index(f'            elif self.get_model_name(target_model) == "{KIMI_CLASS}":\n')
    end = text.index("            else:\n", start)
    return text[:start] + text[end:]


PLANTED = {
    "method deleted": (
        DEEPSEEK,
        lambda t: drop_method(t, "DeepseekV2ForCausalLM", "set_aux_hidden_state_layers"),
        ["DeepseekV2ForCausalLM lacks method(s) set_aux_hidden_state_layers ("],
    ),
    "kimi_k2 dropped": (
        SPEC,
        lambda t: drop_line(t, '            "kimi_k2",\n'),
        ["eagle3_target_supported in SpeculativeConfig._verify_args does not accept model type(s) kimi_k2 ("],
    ),
    "kimi branch dropped": (
        EAGLE,
        drop_kimi_branch,
        [
            "unguarded read of target_model.config.image_token_index (line ",
            "SpecDecodeBaseProposer.load_model does not read target_model.config.media_placeholder_token_id",
        ],
    ),
}


@pytest.mark.parametrize("fault", list(PLANTED))
def test_planted_fault_in_real_patched_file_fails_verify_naming_it(patched, run, tmp_path, fault):
    version = "0.16.0"
    path, plant, expected = PLANTED[fault]
    good = source(patched(version), path)
    bad = plant(good)
    assert bad != good
    compile(bad, path, "exec")  # still valid Python: only the contract can tell

    target = tmp_path / "site"
    lay_out_release(version, stock_paths(version), target)
    # files_for names files a release may lack (the kimi set's behaviour_reads exist from 0.25.0 on)
    edits = {p: source(patched(version), p) for p in files_for(version) if (patched(version) / p).is_file()}
    edits[path] = bad
    (tmp_path / "scratch").mkdir()
    lib = write_library(tmp_path / "lib", {version: [make_patch(tmp_path / "scratch", target, edits)]})
    manifest = lib / "demo" / "set.toml"
    manifest.write_text('contract = "contract.toml"\n' + manifest.read_text())
    shutil.copy(EAGLE3.directory / "contract.toml", lib / "demo" / "contract.toml")

    result = run("verify", "--target", target, "--patches", lib, "--format", "json")
    assert result.exit_code == 1
    failed = [c["message"] for c in json.loads(result.stdout)["checks"] if c["check"] == "contract" and not c["ok"]]
    assert len(failed) == len(expected), failed
    for message, wanted in zip(failed, expected, strict=False):
        assert message.startswith(wanted), message

    before = snapshot(target)
    result = run("apply", "--target", target, "--patches", lib)
    assert result.exit_code == 1 and expected[0].split(" (")[0] in result.output
    assert snapshot(target) == before


# --- 0.34.0: the model runner v1's proposer is gone ----------------------------------------------

PROPOSER_034 = "vllm/v1/spec_decode/llm_base_proposer.py"
RUNNER_V2_SPECULATORS = [
    "vllm/v1/worker/gpu/spec_decode/speculator.py",
    "vllm/v1/worker/gpu/spec_decode/eagle/speculator.py",
]


def reads_of(text: str, attribute: str) -> list[int]:
    """The lines where `attribute` is read off any object."""
    return [
        n.lineno
        for n in ast.walk(ast.parse(text))
        if isinstance(n, ast.Attribute) and n.attr == attribute and isinstance(n.ctx, ast.Load)
    ]


def test_from_0_34_0_no_proposer_reads_the_targets_image_token_index():
    """0.34.0 deleted vllm/v1/spec_decode/ (llm_base_proposer.py with it); the contract's proposer
    requirements end there, and the speculators that replace it read no image_token_index, so
    Kimi-K2.5 (which lacks it) needs nothing there."""
    tree = release_tree("0.34.0", [*stock_paths("0.34.0"), *RUNNER_V2_SPECULATORS, PROPOSER_034])
    assert not (tree / PROPOSER_034).exists()
    results = contract(tree, "0.34.0")
    assert all(r.ok for r in results), [r.message for r in results if not r.ok]
    assert PROPOSER_034 not in {r.path for r in results}
    assert len(results) == expected_requirements("0.34.0") - 2
    for path in RUNNER_V2_SPECULATORS:
        assert reads_of(source(tree, path), "image_token_index") == [], path
    # the reading that finds nothing here finds 0.33.0's proposer reading it
    assert reads_of(source(stock("0.33.0"), PROPOSER_034), "image_token_index")


@pytest.mark.parametrize("version", [*SUPPORTED_RELEASES, "0.18.0", "0.22.0", "0.34.0"])
def test_the_aux_layer_count_is_held_to_three_where_the_releases_drafter_takes_three(version):
    """drafter-aux-layers holds a drafter to 3 aux layers where the release's EAGLE-3 drafter builds its fc of
    3 x hidden size (through 0.18.x), never where it sizes it from the drafter's config (0.22.0 on)."""
    text = (release_tree(version, [aux_layers.EAGLE3_DRAFTER]) / aux_layers.EAGLE3_DRAFTER).read_bytes()
    takes_three = aux_layers.FC_OF_THREE in text and aux_layers.SIZED_BY_CONFIG not in text
    assert takes_three is (Version(version) <= aux_layers.LAST_FC_OF_THREE), version
    assert takes_three is (b"target_hidden_size * 3" in text), version  # the fc the check reads
