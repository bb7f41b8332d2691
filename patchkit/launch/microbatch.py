"""An EAGLE-3 target under vLLM's micro-batching (--enable-dbo, or --ubatch-size above 1): vLLM runs
each large enough step of the target in parts and joins the parts' outputs. An EAGLE-3 target
returns (hidden states, list of aux hidden states); a join that hands the tuple, or the list, to
torch.cat raises TypeError, after the target's and the drafter's loads. Read from the tree: the V1
runner's UBatchWrapper (0.11-0.30: torch.cat of the parts, or 0.22's _cat_ubatch_outputs, which
splits a tuple but not the list) and the V2 runner's merge_ubatch_outputs (0.30's as 0.22's; 0.34's
joins lists too), who splits (only -dp ranks together; from 0.14 only a model with experts), and
whether a batch can reach the split thresholds."""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping

from patchkit.base import hints
from patchkit.base.errors import escaped
from patchkit.checks.parsed import python_tree
from patchkit.launch.command import LaunchCommand
from patchkit.launch.engine import LaunchContext
from patchkit.launch.findings import Finding, cannot_judge
from patchkit.launch.vllm_env import V2_RUNNER as V2_ENV
from patchkit.launch.vllm_env import int_flag

CHECK = "micro-batching"
V1_WRAPPER = "vllm/v1/worker/gpu_ubatch_wrapper.py"  # UBatchWrapper, the V1 model runner's
V2_UBATCH = "vllm/v1/worker/gpu/ubatch_utils.py"  # UBatchRunner, the V2 model runner's (0.30 on)
V2_RUNNER = "vllm/v1/worker/gpu/model_runner.py"
V1_PARTS = "sorted_results"  # UBatchWrapper's list of the parts' outputs, which it joins
V2_JOIN = "merge_ubatch_outputs"
ENGINE_CORE = "vllm/v1/engine/core.py"
MOE_ONLY = b"data_parallel and vllm_config.model_config.is_moe"  # else a -dp rank runs alone (DP 1)
PARALLEL = "vllm/config/parallel.py"  # ParallelConfig: the split thresholds' defaults
# VllmConfig, whose __post_init__ asserts micro-batching's all2all backend at start (0.11: config/__init__.py)
VLLM_CONFIGS = ("vllm/config/vllm.py", "vllm/config/__init__.py")
REFUSES = b"Microbatching currently only supports"
A2A_ENV = "VLLM_ALL2ALL_BACKEND"
A2A_DEFAULT = "allgather_reducescatter"  # ParallelConfig's (and the variable's) default, 0.11-0.34
THRESHOLDS = ("dbo-decode-token-threshold", "dbo-prefill-token-threshold")
# vLLM's serve batches at least this many tokens on a GPU when --max-num-batched-tokens is not given
# (EngineArgs.get_batch_defaults, 0.11-0.34: 2048, 8192 on a large GPU)
SERVED_BATCH = 2048
EXPERTS_FIX = "judge a whole site-packages (transformers beside vllm/), or give config.json its expert count"
UNLAID = f"the tree has no {V1_WRAPPER} nor {V2_UBATCH} (only the patched files?)"
RUNNERS_DIFFER = "vLLM picks its V1 or V2 model runner by the model and its features, and their joins differ"
Verdict = tuple[bool | None, str]  # (joins EAGLE-3's output, or None: not read; what the join does)


def microbatch_findings(
    launch: LaunchContext, has_experts: Callable[[], bool | None], aux: bool = True
) -> list[Finding]:
    """The micro-batching finding of an EAGLE-3 launch; none when vLLM never splits its batches, or
    when the target returns no aux hidden states (`aux` False: the drafter's eagle_config says so).
    `has_experts`: vLLM's get_num_experts() > 0 on the target (None: not readable)."""
    split = _split(launch.command)
    if split is None or not aux:
        return []
    given, dp = split
    said = f"{given} with -dp {dp}"
    fix = f"drop {given}: vLLM then runs each batch whole"
    joins, how = _join(launch)
    if joins is None:
        return [cannot_judge(CHECK, f"{said}: {how}", _unjudged_fix(launch, how, fix))]
    if joins:
        return [Finding(CHECK, True, f"{said}: {how}")]
    if MOE_ONLY in (launch.read(ENGINE_CORE) or b""):  # a dense model's -dp ranks run apart: no split
        moe = has_experts()
        if moe is None:
            why = f"{said}: vLLM splits only a model with experts, and the target's count is not read"
            return [cannot_judge(CHECK, why, EXPERTS_FIX)]
        if not moe:
            return []
    reached = _reached(launch, said)
    if reached is not None:
        return reached
    output = "an EAGLE-3 target's (hidden states, aux hidden states)"
    refused = _refused_at_start(launch)
    if refused is not None:
        message = f"{said}: {refused}; with one it takes, {how}: {output} raises TypeError there, after the load"
        return [Finding(CHECK, False, message, fix)]
    message = f"{said}: {how}: {output} raises TypeError there, after the load"
    return [Finding(CHECK, False, message, fix)]


def _refused_at_start(launch: LaunchContext) -> str | None:
    """What VllmConfig's assert on micro-batching's all2all backend (read from the tree) says of the
    launch's backend, when it refuses it at start; None: taken, or the assert not read."""
    found = next(((path, source) for path in VLLM_CONFIGS if REFUSES in (source := launch.read(path) or b"")), None)
    accepted = _accepted_backends(found[1]) if found else set()
    if found is None or not accepted:
        return None
    backend = _backend(launch, found[1])
    if backend in accepted:
        return None
    takes = ", ".join(sorted(accepted))
    return f"vLLM refuses micro-batching at start with the {escaped(backend)} all2all backend (it takes {takes}: {found[0]})"


def _backend(launch: LaunchContext, config: bytes) -> str:
    """The all2all backend vLLM runs: --all2all-backend, else VLLM_ALL2ALL_BACKEND where the release
    reads it (0.11-0.15), else the default."""
    given = launch.command.options.get("all2all-backend")
    if isinstance(given, str) and given not in ("", "None"):
        return given
    reads_env = A2A_ENV.encode() in config + (launch.read(PARALLEL) or b"")
    return launch.command.environ.get(A2A_ENV, A2A_DEFAULT) if reads_env else A2A_DEFAULT


def _accepted_backends(source: bytes) -> set[str]:
    """The backends the assert holding REFUSES takes: its `in [...]` list, or the lists assigned to the
    name it tests against (those every branch takes: 0.34's differ by platform)."""
    tree = python_tree(source)
    if tree is None:
        return set()
    asserts = [n for n in ast.walk(tree) if isinstance(n, ast.Assert)]
    said = REFUSES.decode()
    for node in asserts:
        if node.msg is None or not any(
            isinstance(c, ast.Constant) and isinstance(c.value, str) and said in c.value for c in ast.walk(node.msg)
        ):
            continue
        test = node.test
        if not (isinstance(test, ast.Compare) and isinstance(test.ops[0], ast.In)):
            return set()
        against = test.comparators[0]
        if isinstance(against, ast.Name):
            lists = [a.value for a in ast.walk(tree) if isinstance(a, ast.Assign) and _assigns(a, against.id)]
            taken = [_strings(value) for value in lists]
            return set.intersection(*taken) if taken else set()
        return _strings(against)
    return set()


def _assigns(node: ast.Assign, name: str) -> bool:
    return any(isinstance(t, ast.Name) and t.id == name for t in node.targets)


def _strings(node: ast.expr) -> set[str]:
    if not isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return set()
    return {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}


def _unjudged_fix(launch: LaunchContext, how: str, fix: str) -> str:
    """What gives an unread join its judgement: the runner named, the whole release laid out; else `fix`."""
    if how == RUNNERS_DIFFER:
        return f"set {V2_ENV}=0 (V1) or =1 (V2) in the launch, or {fix}"
    if how == UNLAID:
        whole = hints.command("fetch", str(launch.version or "VERSION"), "--all", "--dest", str(launch.root))
        return f"lay out the whole release ({whole}), or {fix}"
    return fix


def _split(command: LaunchCommand) -> tuple[str, int] | None:
    """(the options that make vLLM split, as said; -dp) when it may: ParallelConfig.use_ubatching
    (--enable-dbo, or --ubatch-size above 1) with more than one -dp rank (coordinate_batch_across_dp
    returns at once for one: its ranks agree on each split)."""
    options = command.options
    given = ["--enable-dbo"] if options.get("enable-dbo") is True else []
    size = _whole(options.get("ubatch-size"))
    given += [f"--ubatch-size {size}"] if size is not None and size > 1 else []
    dp = _whole(options.get("data-parallel-size"))
    if not given or dp is None or dp < 2:
        return None
    return " and ".join(given), dp


def _reached(launch: LaunchContext, said: str) -> list[Finding] | None:
    """None when a batch can reach a split threshold (a decode step of --dbo-decode-token-threshold
    tokens, a step with a prefill of --dbo-prefill-token-threshold); [] when none can (each above
    --max-num-batched-tokens); a "cannot judge" finding when that cap is the one vLLM picks."""
    options = launch.command.options
    defaults = _defaults(launch.read(PARALLEL))
    given_ = {name: _whole(options.get(name)) for name in THRESHOLDS}
    thresholds = [defaults.get(name) if given_[name] is None else given_[name] for name in THRESHOLDS]
    cap = _whole(options.get("max-num-batched-tokens"))
    least = SERVED_BATCH if cap is None else cap
    if any(t is not None and t <= least for t in thresholds):
        return None
    if None in thresholds:
        why = f"{said}: the split thresholds' defaults are not read from {PARALLEL}"
        return [cannot_judge(CHECK, why, f"give --{THRESHOLDS[0]} and --{THRESHOLDS[1]}")]
    if cap is not None:
        return []
    why = f"{said}: whether a batch reaches the split thresholds depends on the batch size vLLM picks"
    return [cannot_judge(CHECK, why, "give --max-num-batched-tokens")]


def _defaults(source: bytes | None) -> dict[str, int]:
    """The thresholds' defaults in the tree's ParallelConfig (`name: int = 32`, or Field(default=32))."""
    tree = python_tree(source)
    found: dict[str, int] = {}
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            value = node.value
            if isinstance(value, ast.Call):
                value = next((k.value for k in value.keywords if k.arg == "default"), value)
            name = node.target.id.replace("_", "-")
            whole = _whole(value.value) if isinstance(value, ast.Constant) else None
            if name in THRESHOLDS and whole is not None:
                found[name] = whole
    return found


def _join(launch: LaunchContext) -> Verdict:
    """How the runner vLLM uses joins the parts: V1's, or V2's where VLLM_USE_V2_MODEL_RUNNER picks it
    or the tree has no V1 wrapper; both there and vLLM choosing, judged only where they agree."""
    v1 = _v1_join(launch.read(V1_WRAPPER))
    v2 = _v2_join(launch.read(V2_UBATCH))
    chosen = _runner_chosen(launch.command.environ)
    given = escaped(launch.command.environ.get(V2_ENV, "").strip())
    if chosen and launch.read(V2_RUNNER) is not None:
        if v2 is not None or b"ubatch" in (launch.read(V2_RUNNER) or b""):
            return v2 or (None, f"{V2_ENV}={given} picks the V2 model runner, whose join is not read")
        return True, f"{V2_ENV}={given} picks vLLM's V2 model runner, which splits no batch here"
    if v1 is None or v2 is None or chosen is False:
        return v1 or v2 or (None, UNLAID)
    if v1[0] == v2[0]:
        return v1
    return None, RUNNERS_DIFFER


def _runner_chosen(environ: Mapping[str, str]) -> bool | None:
    """VLLM_USE_V2_MODEL_RUNNER as vLLM reads it; None: unset, or a value vLLM refuses at start."""
    try:
        return int_flag(environ, V2_ENV, None)
    except ValueError:  # the vllm-environment finding fails the launch
        return None


def _v1_join(source: bytes | None) -> Verdict | None:
    """UBatchWrapper's join of `sorted_results`: torch.cat itself, or a function of the module."""
    tree = python_tree(source)
    if tree is None:
        return None
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef)]  # a join function's own calls aside
    for call in (n for c in classes for n in ast.walk(c) if isinstance(n, ast.Call)):
        if not (call.args and isinstance(call.args[0], ast.Name) and call.args[0].id == V1_PARTS):
            continue
        if _is_cat(call.func):
            return False, f"vLLM splits the target's batches and torch.cat()s the parts' outputs ({V1_WRAPPER})"
        if isinstance(call.func, ast.Name):
            return _joined_by(_function(tree, call.func.id), V1_WRAPPER)
    return None, f"{V1_WRAPPER} joins the parts in a way patchkit does not read"


def _v2_join(source: bytes | None) -> Verdict | None:
    tree = python_tree(source)
    return None if tree is None else _joined_by(_function(tree, V2_JOIN), V2_UBATCH)


def _joined_by(function: ast.FunctionDef | None, path: str) -> Verdict:
    """Whether `function` joins (tensor, [tensor, ...]): it must take a tuple apart and a list apart,
    each part joined again by itself; else torch.cat gets the tuple or the list."""
    name = function.name if function is not None else ""
    if function is None or not any(_is_cat(n.func) for n in ast.walk(function) if isinstance(n, ast.Call)):
        return None, f"{path} joins the parts in a way patchkit does not read"
    recurses = {kind: _branch_recurses(function, kind) for kind in ("tuple", "list")}
    if recurses["tuple"] and recurses["list"]:
        return True, f"vLLM splits the target's batches and its {name}() joins tuples and lists ({path})"
    left = "a tuple" if not recurses["tuple"] and not _has_branch(function, "tuple") else "a list"
    return False, f"vLLM splits the target's batches and its {name}() hands torch.cat {left} ({path})"


def _branch_recurses(function: ast.FunctionDef, kind: str) -> bool:
    """Whether an `if isinstance(..., kind)` of `function` calls `function` again in its body."""
    for branch in _branches(function, kind):
        calls = (n for statement in branch.body for n in ast.walk(statement) if isinstance(n, ast.Call))
        if any(isinstance(c.func, ast.Name) and c.func.id == function.name for c in calls):
            return True
    return False


def _has_branch(function: ast.FunctionDef, kind: str) -> bool:
    return bool(_branches(function, kind))


def _branches(function: ast.FunctionDef, kind: str) -> list[ast.If]:
    """The `if`s of `function` whose test asks isinstance(..., kind) (alone, or within an and)."""
    return [node for node in ast.walk(function) if isinstance(node, ast.If) and _asks(node.test, kind)]


def _asks(test: ast.expr, kind: str) -> bool:
    return any(
        isinstance(n, ast.Call)
        and isinstance(n.func, ast.Name)
        and n.func.id == "isinstance"
        and len(n.args) == 2
        and isinstance(n.args[1], ast.Name)
        and n.args[1].id == kind
        for n in ast.walk(test)
    )


def _is_cat(func: ast.expr) -> bool:
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "cat"
        and isinstance(func.value, ast.Name)
        and func.value.id == "torch"
    )


def _function(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _whole(value: object) -> int | None:
    """An option's whole number (the parser's int; a --config YAML's may be text)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    try:
        return int(str(value)) if value is not None else None
    except ValueError:
        return None
