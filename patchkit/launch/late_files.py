"""What a launch names that vLLM reads only once the model has loaded: uvicorn's TLS files (serve_http,
after the engine is built; patchkit/launch/tls.py builds its context), --generation-config
(patchkit/launch/genconfig.py) and the static LoRA adapters of --lora-modules and --default-mm-loras
(init_static_loras), and the MCP servers of --tool-server. Each refusal fails the launch after a load
of minutes, so preflight and run judge them first, bounded and never blocking on a fifo.

A headless node (`vllm serve --headless`) runs no API server: of these, only the adapters matter
there, as the head's init_static_loras has every engine's workers load them (from the same paths)."""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Callable, Sequence

from packaging.version import Version

from patchkit.base.errors import SHOWN_PROBLEMS, PatchkitError, escaped, few, quoted
from patchkit.base.fsutil import read_regular
from patchkit.launch.command import LaunchCommand
from patchkit.launch.findings import Finding, cannot_judge
from patchkit.launch.genconfig import generation_config_findings, read_on_node
from patchkit.launch.models import fetched_by, hf_download, hf_hub_cache, hub_repo_id, offline, offline_model_path
from patchkit.launch.tls import AFTER_LOAD, tls_findings
from patchkit.launch.values import load_json, read_named_file
from patchkit.launch.weights import LFS, HeaderBudget, file_problem, target_directory, weight_parts

SSL_FILES = ("ssl-certfile", "ssl-keyfile", "ssl-ca-certs")
ADAPTER_CONFIG = "adapter_config.json"  # what vLLM's PEFTHelper.from_local_dir reads first
_LIMIT = 16 << 20  # an adapter's config: far smaller
MAX_LORA_RANK = 16  # LoRAConfig.max_lora_rank's default (vLLM 0.11.0-0.16.0)
MODULES = "modules.json"  # a sentence-transformers model's list of modules
_ST_POOLING = "sentence_transformers.models.Pooling"


def late_file_findings(
    command: LaunchCommand,
    check: str,
    encoding: Callable[[], str],
    ranks: tuple[int, ...] | None = None,
    architectures: Sequence[str] = (),
) -> list[Finding]:
    """Failed `check` findings for each such file or option vLLM would refuse; `encoding`: the one
    the launch's open() reads text in (asked only of a config that is not ASCII); `ranks`: the
    --max-lora-rank values the installed release allows (lora_ranks; None: not known);
    `architectures`: the target's (a headless node's model class may read the generation config)."""
    found = generation_config_findings(command, check, architectures)
    # an adapter judged whole is a pass (no fix): counted, so preflight never says "nothing judged" of it
    lora = [
        cannot_judge(check, message, fix)
        if isinstance(message, NotJudged)
        else Finding(check, fix is None, message, fix)
        for message, fix in _few_refused(_lora_problems(command, encoding, ranks))
    ]
    if command.headless:
        return found + lora
    return _tls_file_findings(command, check) + found + lora


def _few_refused(problems: list[tuple[str, str | None]]) -> list[tuple[str, str | None]]:
    """The adapters' (message, fix): each pass, the first few refusals, then the rest as one (a
    value of thousands of adapters is a few lines, not a page for each)."""
    refused = [(message, fix) for message, fix in problems if _refused(message, fix)]
    if len(refused) <= SHOWN_PROBLEMS + 1:
        return problems
    rest = refused[SHOWN_PROBLEMS:]
    fixes = list(dict.fromkeys(fix for _, fix in rest if fix is not None))
    message = f"{len(rest):,} more adapters vLLM refuses: {few([m for m, _ in rest], shown=1)}"
    kept, shown = [], 0
    for message_fix in problems:  # every pass and what is not judged, and the first refusals, in vLLM's order
        shown += _refused(*message_fix)
        kept += [message_fix] if not _refused(*message_fix) or shown <= SHOWN_PROBLEMS else []
    return [*kept, (message, few(fixes, shown=2))]


class NotJudged(str):
    """An adapter's message that says what patchkit cannot judge of it (its fix: what would tell)."""


def _refused(message: str, fix: str | None) -> bool:
    return fix is not None and not isinstance(message, NotJudged)


def _tls_file_findings(command: LaunchCommand, check: str) -> list[Finding]:
    found = []
    serves_tls = command.optional_text("ssl-certfile") is not None or command.optional_text("ssl-keyfile") is not None
    for option in SSL_FILES if serves_tls else ():  # plain HTTP: uvicorn never opens --ssl-ca-certs
        value = command.optional_text(option)
        why = None if value is None else _unreadable(os.path.join(command.working_directory(), value))
        if value is not None and why is not None:
            found.append(Finding(check, False, f"--{option} {value}: {why}: {AFTER_LOAD}", _FIX))
    return found or tls_findings(command, check)


# what the API server alone reads: unused on a headless node (--lora-modules is not: see the module)
API_SERVER_OPTIONS = (
    *SSL_FILES,
    "ssl-ciphers",
    "ssl-cert-reqs",
    "middleware",
    "chat-template",
    "generation-config",
    "tool-server",
    "tool-call-parser",
)


def headless_note(command: LaunchCommand, architectures: Sequence[str] = ()) -> str | None:
    """The note for a headless launch that gives options only the API server reads (None: not
    headless, or none given): not used on this node, so not judged."""
    if not command.headless:
        return None
    engine_reads = read_on_node(command, architectures)
    given = [
        f"--{option}"
        for option in API_SERVER_OPTIONS
        if command.options.get(option) not in (None, "", [], False)
        and not (option == "generation-config" and engine_reads)
    ]
    if not given:
        return None
    unused = f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} not used on this node"
    loaded = "; its workers still load the --lora-modules adapters the head serves" if _lora_entries(command) else ""
    return f"headless: no API server runs here, so {unused}{loaded}"


# the releases whose MCPToolServer.add_tool_server connects to http://ENTRY/sse for each entry
TOOL_SERVER_URL = (Version("0.11.0"), Version("0.35.0"))
# from 0.16.0 on, the API server builds its tool server only for a model serving the generate task
GENERATE_ONLY = Version("0.16.0")
# architecture names vLLM's `--runner auto` resolves to its pooling runner (config/model.py's
# _SUFFIX_TO_DEFAULTS; no registered generative model ends so), bare `...Model` left out
_POOLING_SUFFIXES = (
    "ForTextEncoding", "EmbeddingModel", "ForSequenceClassification", "ForTokenClassification",
    "ForAudioClassification", "ForImageClassification", "ForVideoClassification", "ClassificationModel",
    "ForRewardModeling", "RewardModel",
)  # fmt: skip


def tool_server_findings(
    command: LaunchCommand,
    check: str,
    version: Version | None,
    architectures: Sequence[str] = (),
    model_directory: str | None = None,
) -> tuple[list[Finding], list[str]]:
    """(failed findings, notes) for --tool-server: vLLM's API server connects to each
    comma-separated entry as http://ENTRY/sse once the model has loaded ("demo": its own tools), and
    any failure ends the launch. HOST:PORT (or HOST:PORT/PREFIX) is only noted: the server may well
    start after preflight, and a connect now would say nothing of the launch's minutes later.
    `architectures`: the target's (a pooling model serves no generate task: no tool server);
    `model_directory`: where vLLM reads the model's own files (a modules.json there makes it pooling)."""
    value = command.optional_text("tool-server")
    if value is None or value == "demo" or command.headless:
        return [], []
    if version is not None and version >= GENERATE_ONLY and _pooling(command, architectures, model_directory):
        return [], ["--tool-server: not used: vLLM builds no tool server for a pooling model (no generate task)"]
    entries = value.split(",")
    # a scheme, a space, nothing, a trailing slash (//sse): no MCP server answers the URL vLLM makes
    bad = [e for e in entries if not e or "://" in e or e != e.strip() or e.endswith("/") or not _port_ok(e)]
    if not bad:  # a few named: a value of thousands of entries is a line, not a page
        urls = few([f"http://{entry}/sse" for entry in entries], sep=", ")
        return [], [f"--tool-server: vLLM connects to {urls} once the model has loaded (not judged here)"]
    shown = escaped(quoted(value))
    if version is None or not TOOL_SERVER_URL[0] <= version < TOOL_SERVER_URL[1]:
        checked = "0.11.0-0.34.0 add http:// and /sse to each entry"
        return [], [f"--tool-server {shown}: not judged: vLLM {version or '(unknown)'} was not checked ({checked})"]
    message = (
        f"--tool-server {shown}: vLLM adds http:// and /sse to each entry itself, and connects to "
        f"http://{escaped(quoted(bad[0]))}/sse, which no MCP server answers: {AFTER_LOAD}"
    )
    fix = "give each MCP server as HOST:PORT (a port 1-65535, an IPv6 host in brackets), comma-separated, no spaces"
    return [Finding(check, False, message, fix)], []


def _pooling(command: LaunchCommand, architectures: Sequence[str], model_directory: str | None) -> bool:
    """Whether vLLM certainly runs the model with its pooling runner: --runner pooling, or `auto`
    and a sentence-transformers pooling module in the model's modules.json (ModelConfig's
    _get_default_runner_type asks get_pooling_config first), or a first architecture only pooling
    models have."""
    runner = command.optional_text("runner") or "auto"
    if runner != "auto":
        return runner == "pooling"
    if model_directory is not None and _sentence_transformers_pooling(os.path.join(model_directory, MODULES)):
        return True
    return bool(architectures) and str(architectures[0]).endswith(_POOLING_SUFFIXES)


def _sentence_transformers_pooling(path: str) -> bool:
    """Whether vLLM's get_pooling_config finds a pooling configuration in modules.json at `path`:
    a JSON list holding a module of type sentence_transformers.models.Pooling (one without it, or
    no such file, it takes for none; one it cannot read fails the launch as it starts)."""
    try:
        modules = load_json(read_named_file(path, _LIMIT, "modules.json"), path)
    except (OSError, PatchkitError):
        return False
    if not isinstance(modules, list):
        return False
    return any(isinstance(m, dict) and m.get("type") == _ST_POOLING for m in modules)


def _port_ok(entry: str) -> bool:
    """Whether httpx reads a port in the entry's authority that a connection can use: none, or a
    number 1-65535 (`x:abc` and an IPv6 host without brackets are InvalidURL; 0 and 99999 never connect)."""
    authority = entry.split("/", 1)[0].rpartition("@")[2]
    if authority.startswith("["):
        after = authority.partition("]")[2]
        if after and not after.startswith(":"):
            return False
        port = after[1:]
    else:
        port = authority.partition(":")[2]
    if not port:
        return True
    try:
        return 1 <= int(port) <= 65535
    except ValueError:
        return False


_FIX = "give a readable file's path, as the launch's directory sees it"


def _unreadable(path: str) -> str | None:
    """Why open() in the launch could not read `path` (None: it can), never waiting on a fifo."""
    try:
        read_regular(path, 1, follow_symlinks=True, head=True)
    except FileNotFoundError:
        return "no such file"
    except OSError as exc:  # a fifo, a directory, a device, no permission
        return exc.strerror or str(exc)
    except ValueError:  # a NUL character (a --config YAML's escape): open() raises ValueError too
        return "not a path (it holds a NUL character)"
    return None


def _lora_entries(command: LaunchCommand) -> list[tuple[str, str, str]]:
    """(option, name, path) of each static adapter, in init_static_loras' order: each --lora-modules
    entry (`name=path`, or JSON with "name" and "path"), as written, then each --default-mm-loras
    modality (process_lora_modules adds them, named by their modality, when LoRA is enabled)."""
    entries = command.options.get("lora-modules") or []
    found = []
    for entry in entries if isinstance(entries, list) else []:
        text = str(entry)
        if text.lstrip().startswith("{"):
            module = _json_object(text)
            name, path = module.get("name"), module.get("path")
            found += [("--lora-modules", name, path)] if isinstance(name, str) and isinstance(path, str) else []
        elif "=" in text:
            name, _, path = text.partition("=")
            found.append(("--lora-modules", name, path))
    modal = command.options.get("default-mm-loras") if command.options.get("enable-lora") else None
    modal = _json_object(modal) if isinstance(modal, str) else modal
    pairs = modal.items() if isinstance(modal, dict) else ()
    return found + [("--default-mm-loras", str(k), v) for k, v in pairs if isinstance(v, str)]


def _json_object(text: str) -> dict[str, object]:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # the reading of the command refused it already
        return {}
    return value if isinstance(value, dict) else {}


def _lora_problems(
    command: LaunchCommand, encoding: Callable[[], str], ranks: tuple[int, ...] | None
) -> list[tuple[str, str | None]]:
    """(message, fix) for what init_static_loras refuses of the adapters, in vLLM's order: LoRA not
    enabled (the worker's _ensure_lora_enabled), a name or path left empty, a name already loaded,
    then each adapter's own refusal (a local one, or a hub id's snapshot in an offline launch)."""
    entries = _lora_entries(command)
    found: list[tuple[str, str | None]] = []
    head = command.headless  # the head's API server refuses a name; this node's workers load each adapter
    if entries and not command.options.get("enable-lora"):  # only --lora-modules: mm ones need LoRA on
        message = f"--lora-modules without --enable-lora: vLLM's worker refuses each adapter (LoRA is not enabled): {AFTER_LOAD}"
        found.append((message, "add --enable-lora to the launch"))
    seen: set[str] = set()
    budget = HeaderBudget()  # thousands of adapters' headers are not hours of reading
    layers = functools.partial(_target_layers, command)  # read only for an adapter with layers to judge
    for option, name, path in entries:
        if head and (not name or not path or name in seen):
            continue
        if not name or not path:
            message = f"{option} {name}={path}: vLLM needs both a name and a path: {AFTER_LOAD}"
            found.append((message, "give each adapter as NAME=PATH"))
            continue
        if name in seen:
            message = f"{option} {name}={path}: the adapter name {name} is given twice, and vLLM refuses the second: {AFTER_LOAD}"
            found.append((message, "give each adapter a name of its own"))
        seen.add(name)
        found += _lora_problem(option, path, command, encoding, (ranks, budget, layers))
    return found


def _home_expanded(path: str, command: LaunchCommand) -> str:
    """`~` as the launch's Python expands it: its HOME (`~user`: that user's home)."""
    home = command.environ.get("HOME")
    if home and (path == "~" or path.startswith("~/")):
        return home + path[1:]
    return os.path.expanduser(path)


def _lora_problem(
    option: str,
    path: str,
    command: LaunchCommand,
    encoding: Callable[[], str],
    bounds: tuple[tuple[int, ...] | None, HeaderBudget, Callable[[], frozenset[str] | str]],
) -> list[tuple[str, str | None]]:
    """What vLLM refuses of one adapter: a local one (an absolute or `~` path, or a relative one that
    exists: vLLM's get_adapter_absolute_path), or a hub id vLLM finds only in huggingface_hub's cache
    (an offline launch); a hub id online is vLLM's to download, not judged. `bounds`: the ranks the
    release allows (None: not known), the header bytes left to parse of the launch's adapters, and
    the target's layers (_target_layers)."""
    ranks, budget, layers = bounds
    cwd = command.working_directory()
    local = _home_expanded(path, command) if path.startswith("~") else os.path.join(cwd, path)
    if not (os.path.isabs(path) or path.startswith("~") or os.path.lexists(local)) and hub_repo_id(path):
        if not offline(command.environ) or command.environ.get("VLLM_USE_MODELSCOPE", "").lower() == "true":
            return []
        try:  # snapshot_download(repo_id) offline: the cache's snapshot of main, or the id kept as a path
            local = offline_model_path(path, None, command.environ, role=f"{option} adapter")
        except PatchkitError:
            message = f"{option} {path}: HF_HUB_OFFLINE is set, and {hf_hub_cache(command.environ)} holds no snapshot of it (revision main): {AFTER_LOAD}"
            download = fetched_by(hf_download(path, None, hf_hub_cache(command.environ)), "the whole adapter")
            return [(message, f"fetch it into that cache: {download}, or give the adapter's local directory")]
    config = os.path.join(local, ADAPTER_CONFIG)
    why = _unreadable(config)
    if why is not None:
        fix = f"give the directory of a LoRA adapter (it holds {ADAPTER_CONFIG}), as the launch's directory sees it"
        return [(f"{option} {path}: {ADAPTER_CONFIG} there: {why}: {AFTER_LOAD}", fix)]
    rank = _max_lora_rank(command)
    refused: list[tuple[str, str | None]] = [
        (f"{option} {path}: its {ADAPTER_CONFIG}: {why}: {AFTER_LOAD}", fix)
        for why, fix in _peft_refusals(config, (rank, ranks), encoding, command.release)
    ]
    return refused or _no_adapter_weights(option, path, local, (budget, layers))


# What LoRAModel.from_local_checkpoint loads, in its order (os.path.isfile: a link to a file counts)
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin", "adapter_model.pt")


def _no_adapter_weights(
    option: str, path: str, local: str, read: tuple[HeaderBudget, Callable[[], frozenset[str] | str]]
) -> list[tuple[str, str | None]]:
    """An adapter whose config vLLM accepts, but with none of the weight files it loads next, or
    with the first of them one its reader (safe_open, torch.load) refuses before any tensor, or
    whose layers the target lacks (`read`: the header budget and the target's layers); else its pass
    (no fix), and what is not judged of its layers."""
    whole = "give the adapter's whole directory, as PEFT saved it (its weights beside adapter_config.json)"
    budget, layers = read
    for name in ADAPTER_WEIGHTS:
        weights = os.path.join(local, name)
        if os.path.isfile(weights):
            skipped, keys = budget.skipped, list[list[str]]()
            why = file_problem(weights, name.endswith(".safetensors"), budget=budget, names=keys)
            if why is None:
                part = budget.said(adapters=True) if budget.skipped > skipped else ""
                saved = _saved_modules(os.path.join(local, ADAPTER_CONFIG)) if keys and keys[0] else frozenset()
                foreign = _foreign_layers(f"{option} {path}", keys[0] if keys else None, (layers, saved), name)
                passed = (f"{option} {path}: its config and {name} read as vLLM reads them{part}", None)
                return foreign if foreign and not isinstance(foreign[0][0], NotJudged) else [passed, *foreign]
            fix = f"run `git lfs pull` in {path}" if LFS in why else whole
            return [(f"{option} {path}: {why}: {AFTER_LOAD}", fix)]
    said = ", ".join(ADAPTER_WEIGHTS)
    return [(f"{option} {path}: no adapter weights there (vLLM loads {said}): {AFTER_LOAD}", whole)]


# what vLLM's is_base_embeddding_weights skips: the base weights of the adapter's embedding layers
_BASE_EMBEDDINGS = (".embed_tokens.base_layer.weight", ".lm_head.base_layer.weight")
# layers vLLM takes by its model class's embedding_modules, whatever the weights hold
_EMBEDDINGS = ("embed_tokens", "lm_head")
_OWN_MODEL = "serve the adapter on the model it was trained for, or train one on this model's layers"
_CHECK_OWN = "check that the adapter was trained for this model"


def _lora_module(key: str) -> str | None:
    """The module of an adapter's tensor as vLLM's parse_fine_tuned_lora_name reads its name (the
    model's weights mapper aside); None for a name it does not take."""
    parts = key.split(".")
    start = 2 if key.startswith("base_model.model.") else 0
    if len(parts) > 1 and parts[-1] == "weight" and parts[-2] in ("lora_A", "lora_B"):
        return ".".join(parts[start:-2])
    if parts[-1] in ("lora_embedding_A", "lora_embedding_B"):
        return ".".join(parts[start:-1])
    return None


def _foreign_layers(
    adapter: str,
    keys: list[str] | None,
    against: tuple[Callable[[], frozenset[str] | str], frozenset[str]],
    file: str,
) -> list[tuple[str, str | None]]:
    """What vLLM's check_unexpected_modules refuses of an adapter's tensors (`keys`; None: not read):
    a layer (a module's last name) none of the target's weight names holds, where vLLM takes only
    the model's LoRA-able layers, each named as its weights are. A NotJudged message for the tensors
    vLLM judges by what the weights do not tell (experts, embeddings, names it skips or refuses, and
    the adapter's modules_to_save, which a later release takes). `against`: the target's layers, and
    the adapter's modules_to_save."""
    layers, saved = against
    if keys is None:
        reason = f"{adapter}: its layers: the tensor names of its {file} are not read here"
        return [(NotJudged(reason), _CHECK_OWN)]
    judged: set[str] = set()
    unsure: list[str] = []
    for key in keys:
        if key.endswith(_BASE_EMBEDDINGS) or "base_layer" in key:
            continue  # vLLM skips them
        module = _lora_module(key)
        if module is None or ".experts" in module or ".mtp." in key or key.startswith("mtp."):
            unsure.append(module or key)  # the model's class decides: its experts, skipped prefixes, mapped names
        elif module.rsplit(".", 1)[-1] in (*_EMBEDDINGS, *saved):
            unsure.append(module)
        else:
            judged.add(module.rsplit(".", 1)[-1])
    target = layers() if judged else None
    foreign = sorted(judged - target) if isinstance(target, frozenset) else []
    if foreign:
        names = few(foreign, sep=", ")
        message = f"{adapter}: it adapts {names}, which no weight of the target names: {AFTER_LOAD}"
        return [(message, _OWN_MODEL)]
    if isinstance(target, str):
        return [(NotJudged(f"{adapter}: whether the target has its layers: {target}"), _CHECK_OWN)]
    if unsure:
        names = few(list(dict.fromkeys(unsure)), shown=2, sep=", ")
        reason = f"{adapter}: its {names}: vLLM takes or refuses them by the model's class, not its weight names"
        return [(NotJudged(reason), _CHECK_OWN)]
    return []


def _saved_modules(config: str) -> frozenset[str]:
    """The modules_to_save of an adapter_config.json PEFTHelper took (none where it is not read)."""
    try:
        saved = json.loads(read_regular(config, _LIMIT, follow_symlinks=True)).get("modules_to_save")
    except (OSError, ValueError, RecursionError, AttributeError):
        return frozenset()
    return frozenset([saved] if isinstance(saved, str) else map(str, saved) if isinstance(saved, list) else ())


def _target_layers(command: LaunchCommand) -> frozenset[str] | str:
    """The parts of the target's weight names (every layer vLLM may take LoRA on is named so: its
    packed layers by their parts); else why they are not read."""
    load_format = command.optional_text("load-format") or "auto"
    if load_format not in ("auto", "hf", "safetensors", "fastsafetensors"):
        return f"--load-format {load_format}: patchkit reads only a Hugging Face checkpoint's weight names"
    found = target_directory(command)
    if found is None:
        return f"the target {escaped(str(command.model))} is not a directory here (vLLM downloads it)"
    name, directory, local = found
    parts = weight_parts(os.path.join(command.working_directory(), directory), local=local and load_format == "auto")
    if isinstance(parts, str) or not parts:
        return f"the target {escaped(name)}: {parts or 'its weights name no tensor'}"
    return parts


def _max_lora_rank(command: LaunchCommand) -> int:
    value = command.options.get("max-lora-rank")
    try:
        return int(str(value)) if value is not None else MAX_LORA_RANK
    except ValueError:  # the reading of the command refused it already
        return MAX_LORA_RANK


def _peft_refusals(
    path: str, limit: tuple[int, tuple[int, ...] | None], encoding: Callable[[], str], release: str | None
) -> list[tuple[str, str]]:
    """(why, fix) for what vLLM's PEFTHelper refuses of an adapter_config.json (from_local_dir's
    json.load, from_dict, __post_init__'s scaling, validate_legal): the rules 0.15.0-0.33.0 share
    (a later release refuses more: lora_bias, init_lora_weights, ...; not judged). `limit`: the
    launch's max_lora_rank and the values the release allows for it (None: not known)."""
    rank, ranks = limit
    own = "give the adapter's own adapter_config.json, as PEFT saved it"
    try:
        raw = read_regular(path, _LIMIT, follow_symlinks=True)
        text = raw.decode("ascii") if raw.isascii() else raw.decode(encoding())
        config = json.loads(text)
    except OSError as exc:
        return [(exc.strerror or str(exc), own)]
    except UnicodeDecodeError as exc:
        return [(f"not {exc.encoding} text, the encoding vLLM's open() reads it in", own)]
    except (ValueError, RecursionError) as exc:
        return [(f"not JSON ({str(exc)[:60]})", own)]
    if not isinstance(config, dict):
        return [("not a JSON object", own)]
    missing = [key for key in ("r", "lora_alpha", "target_modules") if key not in config]
    if missing:
        return [(f"Missing required configuration fields: {', '.join(missing)}", own)]
    r, alpha = config["r"], config["lora_alpha"]
    if not all(isinstance(x, (int, float)) for x in (r, alpha)) or r == 0 or (config.get("use_rslora") and r < 0):
        return [(f"vLLM cannot scale lora_alpha {alpha!r} by r {r!r}", own)]
    found = []
    saved = _unsupported_saved(config.get("modules_to_save"), release)
    if saved:
        found.append((f"vLLM does not support its modules_to_save {saved}", "give an adapter trained without them"))
    if config.get("use_dora"):
        found.append(("vLLM does not yet support DoRA", "give a LoRA adapter (use_dora false)"))
    if r > rank:
        found.append((f"LoRA rank {r} is greater than max_lora_rank {rank}", _rank_fix(r, ranks)))
    if config.get("bias", "none") != "none":
        found.append(
            (f"Adapter bias is not supported (bias {config['bias']!r})", 'give an adapter trained with bias "none"')
        )
    return found


def lora_ranks(source: bytes | None) -> tuple[int, ...] | None:
    """The --max-lora-rank values a release's vllm/config/lora.py allows: its MaxLoRARanks Literal
    (0.12.0 on: the parser refuses any other) or its possible_max_ranks tuple (0.11.0: LoRAConfig
    refuses any other at start); None when neither is found."""
    text = (source or b"").decode("utf-8", "replace")
    found = re.search(r"^MaxLoRARanks = Literal\[([^\]\n]*)\]", text, re.M) or re.search(
        r"^\s*possible_max_ranks = \(([^)\n]*)\)", text, re.M
    )
    values = [v.strip() for v in found[1].split(",") if v.strip()] if found else []
    return tuple(sorted(int(v) for v in values)) if values and all(v.isdigit() for v in values) else None


def _rank_fix(r: float, ranks: tuple[int, ...] | None) -> str:
    """The --max-lora-rank that serves an adapter of rank `r`: the smallest the release allows."""
    if r == float("inf"):  # JSON's 1e400: no rank serves it
        return "give the adapter's own adapter_config.json, as PEFT saved it (its r a whole number)"
    if ranks is None:  # the release's values are unknown: its parser lists them when it refuses one
        return f"give a --max-lora-rank of at least {r} that this vLLM allows (refusing another, it lists them)"
    fits = [value for value in ranks if value >= r]
    if fits:
        return f"give --max-lora-rank {fits[0]} (the smallest this vLLM allows at or above {r})"
    return f"give an adapter of rank {ranks[-1]} or less: this vLLM allows no --max-lora-rank above {ranks[-1]}"


def _unsupported_saved(saved: object, release: str | None) -> str | None:
    """The modules_to_save vLLM refuses: any up to 0.16.0; a later one (0.32.0 on) serves a
    classification model's "classifier" and "score"."""
    if not saved:
        return None
    try:
        strict = release is not None and Version(release) <= Version("0.16.0")
    except ValueError:
        strict = False
    if strict or not isinstance(saved, (list, str)):
        return json.dumps(saved)[:60]
    others = [m for m in saved if m not in ("classifier", "score")]
    return json.dumps(others)[:60] if others else None
