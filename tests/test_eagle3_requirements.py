"""The EAGLE-3 requirements (issue 3) on the real releases' code, fetched from the package index.

For every supported release the stock files are fetched, the library's series is applied to a copy, and
the patched code is judged by assertions of this test: the whitelist, the EAGLE proposer and the model
methods are run with stand-in objects (no torch, no vLLM import), and the classes are read with ast.
Then the set's declared contract (patches/eagle3/contract.toml, the `contract` check) must pass on the
patched code, fail on the stock code, and pass on upstream releases' own code.
"""

from __future__ import annotations

import ast
import copy
import json
import shutil
from itertools import islice
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import SUPPORTED_RELEASES, lay_out_release, make_patch, snapshot, write_library
from packaging.version import Version

from patchkit.checks import CheckContext
from patchkit.checks.contract import CHECK
from patchkit.fetch import release_tree
from patchkit.library import default_root, load_set
from patchkit.release_files import files_for

pytestmark = pytest.mark.release

# Upstream ships the support from 0.18.0; 0.20.0 moved the proposer to llm_base_proposer.py, 0.21.0 is
# the last release with the whitelist.
UPSTREAM = ["0.18.0", "0.20.0", "0.20.2", "0.21.0", "0.25.1", "0.33.0"]

SPEC = "vllm/config/speculative.py"
EAGLE = "vllm/v1/spec_decode/eagle.py"
PROPOSER = "vllm/v1/spec_decode/llm_base_proposer.py"
DEEPSEEK = "vllm/model_executor/models/deepseek_v2.py"
KIMI = "vllm/model_executor/models/kimi_k25.py"
NEW_TARGETS = ["deepseek_v2", "deepseek_v3", "kimi_k2", "kimi_k25"]
KIMI_CLASS = "KimiK25ForConditionalGeneration"
MEDIA_TOKEN = 163605

EAGLE3 = load_set(default_root() / "eagle3")
CONTRACT_FILES = sorted({r.file for r in EAGLE3.contract})


def has_kimi(version: str) -> bool:
    return Version(version) >= Version("0.15.0")


def proposer_file(version: str) -> str:
    return PROPOSER if Version(version) >= Version("0.20.0") else EAGLE


def has_whitelist(version: str) -> bool:
    return Version(version) < Version("0.22.0")


# --- trees -------------------------------------------------------------------------------------


def stock_paths(version: str) -> list[str]:
    return sorted(set(files_for(version)) | set(CONTRACT_FILES))


def stock(version: str) -> Path:
    """The cached stock tree (read only)."""
    return release_tree(version, stock_paths(version))


@pytest.fixture(scope="module")
def patched(tmp_path_factory, request):
    """version -> a writable copy of the stock tree with the library's series applied by `patchkit apply`."""
    from click.testing import CliRunner

    from patchkit.cli import cli

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


def source(tree: Path, path: str) -> str:
    return (tree / path).read_text(encoding="utf-8")


def contract(tree: Path, version: str) -> list:
    """The `contract` check on a tree as it is on disk."""

    def disk(path: str) -> bytes | None:
        full = tree / path
        return full.read_bytes() if full.is_file() else None

    return CHECK.run(
        CheckContext(paths=[], read=disk, python=None, root=tree, patch_set=EAGLE3, version=Version(version))
    )


def expected_requirements(version: str) -> int:
    """speculative.py: 1 (while the whitelist exists); eagle/proposer: 2; deepseek_v2.py: 6; kimi_k25.py: 3."""
    return (1 if has_whitelist(version) else 0) + 6 + (2 + 3 if has_kimi(version) else 0)


# --- reading and running pieces of the real code -----------------------------------------------


def find(module: ast.Module, dotted: str):
    body, node = module.body, None
    for part in dotted.split("."):
        node = next(n for n in body if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == part)
        body = node.body
    return node


def compile_function(text: str, dotted: str, namespace: dict | None = None):
    """One function of the file as a plain Python function (annotations and decorators dropped)."""
    node = copy.deepcopy(find(ast.parse(text), dotted))
    node.decorator_list = []
    node.returns = None
    for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs, node.args.vararg, node.args.kwarg]:
        if arg is not None:
            arg.annotation = None
    namespace = dict(namespace or {})
    exec(compile(ast.fix_missing_locations(ast.Module([node], [])), dotted, "exec"), namespace)
    return namespace[node.name]


def run_statements(statements: list[ast.stmt], namespace: dict) -> dict:
    exec(compile(ast.fix_missing_locations(ast.Module(statements, [])), "<fragment>", "exec"), namespace)
    return namespace


def whitelist(text: str) -> tuple[str, list[str], list[ast.stmt]]:
    """(variable, entries, [the assignment, the `if` that raises]) in SpeculativeConfig._verify_args."""
    body = find(ast.parse(text), "SpeculativeConfig._verify_args").body
    for i, stmt in enumerate(body):
        if (
            isinstance(stmt, ast.Assign)
            and isinstance(stmt.value, ast.List)
            and stmt.targets[0].id in ("eagle3_target_supported", "aux_hidden_states_supported")
        ):
            return stmt.targets[0].id, [e.value for e in stmt.value.elts], [stmt, body[i + 1]]
    raise AssertionError("no whitelist in SpeculativeConfig._verify_args")


def eagle3_accepts(text: str, model_type: str) -> bool:
    """Run the real whitelist check for method='eagle3' and a target reporting `model_type`."""
    _, _, statements = whitelist(text)
    config = SimpleNamespace(
        method="eagle3", target_model_config=SimpleNamespace(hf_text_config=SimpleNamespace(model_type=model_type))
    )
    try:
        run_statements(statements, {"self": config})
    except ValueError:
        return False
    return True


def drafter_image_token(text: str, target_class: str, **config) -> object:
    """Run the proposer's multimodal if/elif chain for a target of `target_class` with `config`."""
    load_model = find(ast.parse(text), "SpecDecodeBaseProposer.load_model")
    multimodal = next(
        n
        for n in ast.walk(load_model)
        if isinstance(n, ast.If) and ast.unparse(n.test) == "supports_multimodal(target_model)"
    )
    chain = next(s for s in multimodal.body if isinstance(s, ast.If))
    proposer = SimpleNamespace(
        model=SimpleNamespace(config=SimpleNamespace()), get_model_name=lambda model: type(model).__name__
    )
    target = type(target_class, (), {})()
    target.config = SimpleNamespace(**config)
    run_statements([chain], {"self": proposer, "target_model": target})
    return proposer.model.config.image_token_index


class IntermediateTensors(dict):
    pass


def layer_stub(index: int):
    def layer(positions, hidden_states, residual, *rest):
        return hidden_states * 2 + index, (residual or 0) + 10 * (index + 1)

    return layer


def deepseek_forward(text: str, *, aux=(), first=True, last=True, start=0, end=5, **inputs):
    """DeepseekV2Model.forward of the file, run on numbers: layer i maps (h, r) to (2h + i, r + 10(i + 1))."""
    pp = SimpleNamespace(is_first_rank=first, is_last_rank=last)
    stubs = {"get_pp_group": lambda: pp, "islice": islice, "IntermediateTensors": IntermediateTensors}
    forward = compile_function(text, "DeepseekV2Model.forward", stubs)
    model = SimpleNamespace(
        layers=[layer_stub(i) for i in range(end)],
        start_layer=start,
        end_layer=end,
        aux_hidden_state_layers=aux,
        config=SimpleNamespace(),
        norm=lambda h, r: (h + r, None),
        embed_input_ids=None,
        get_input_embeddings=None,
    )
    return forward(model, input_ids=None, positions=None, **inputs)


def reference_forward(hidden, residual, aux, start, end):
    """What the patch description says forward returns: hidden + residual before each listed layer."""
    collected = []
    for index in range(start, end):
        if index in aux:
            collected.append(hidden + residual)
        hidden, residual = layer_stub(index)(None, hidden, residual)
    return hidden + residual, collected


def base_names(cls: ast.ClassDef) -> list[str]:
    return [ast.unparse(b) for b in cls.bases]


def imported_names(module: ast.Module) -> set[str]:
    return {a.asname or a.name for n in module.body if isinstance(n, ast.ImportFrom) for a in n.names}


# --- 1. the whitelist ----------------------------------------------------------------------------


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


# --- the declared contract ---------------------------------------------------------------------


@pytest.mark.parametrize("version", SUPPORTED_RELEASES)
def test_contract_passes_on_patched_and_fails_on_stock(patched, run, version):
    tree = patched(version)
    passed = contract(tree, version)
    assert len(passed) == expected_requirements(version)
    assert all(r.ok for r in passed), [r.message for r in passed if not r.ok]

    result = run("verify", "--target", tree, "--format", "json")
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
    edits = {p: source(patched(version), p) for p in files_for(version)}
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
