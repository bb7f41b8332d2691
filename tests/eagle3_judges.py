"""The EAGLE-3 requirements judged on a release's code (the eagle3 set's own tests and the real
wheel's): the files they live in, the contract check, and the pieces of the real code run with
stand-in objects (no torch, no vLLM import) or read with ast."""

from __future__ import annotations

import ast
import copy
from itertools import islice
from pathlib import Path
from types import SimpleNamespace

from packaging.version import Version

from patchkit.checks import CheckContext
from patchkit.checks.contract import CHECK
from patchkit.fetch import release_tree
from patchkit.releases.files import files_for
from patchkit.series.library import default_root, load_set

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


def has_engine_mla_default(version: str) -> bool:
    return Version("0.13.0") <= Version(version) < Version("0.18.0")


def selector_file(version: str) -> str:
    return "vllm/attention/selector.py" if Version(version) < Version("0.14.0") else "vllm/v1/attention/selector.py"


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
    """What the patch description says forward returns: hidden + residual before each listed layer (the
    embeddings alone before the first one, where the residual is still None)."""
    collected = []
    for index in range(start, end):
        if index in aux:
            collected.append(hidden if residual is None else hidden + residual)
        hidden, residual = layer_stub(index)(None, hidden, residual)
    return hidden + residual, collected


def base_names(cls: ast.ClassDef) -> list[str]:
    return [ast.unparse(b) for b in cls.bases]


def imported_names(module: ast.Module) -> set[str]:
    return {a.asname or a.name for n in module.body if isinstance(n, ast.ImportFrom) for a in n.names}


# --- 1. the whitelist ----------------------------------------------------------------------------
