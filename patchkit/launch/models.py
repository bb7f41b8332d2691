"""Finding a model's config.json offline, as vLLM (transformers, huggingface_hub) finds it: a local
directory, else a hub id in the Hugging Face cache at the revision the launch asks for.

Nothing is ever downloaded. The cache is transformers' (utils/hub.py): TRANSFORMERS_CACHE, else
PYTORCH_TRANSFORMERS_CACHE, else PYTORCH_PRETRAINED_BERT_CACHE, else huggingface_hub's (constants.py):
HF_HUB_CACHE, else HUGGINGFACE_HUB_CACHE, else HF_HOME/hub, else XDG_CACHE_HOME/huggingface/hub, else
~/.cache/huggingface/hub, read from the launch's own environment (its `env` prefix; `env -i`: that
alone). A hub id `org/name` at revision REV (default main) is `models--org--name/snapshots/C/config.json`
where C is what refs/REV names (REV itself without such a ref). A model found nowhere, or a revision
whose snapshot is not cached (vLLM would download it), is TargetError (exit 4) naming what was
looked at; a config.json that is not a JSON object is BadInput (exit 2).
"""

from __future__ import annotations

import errno
import fnmatch
import json
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from patchkit.base.errors import BadInput, TargetError, quoted
from patchkit.base.fsutil import unsafe_reason
from patchkit.base.values import Value
from patchkit.launch import observed
from patchkit.launch.values import REF_LIMIT, file_name, load_json, read_head, read_named_file

CONFIG = "config.json"
MISTRAL_CONFIG = "params.json"
WALK_LIMIT = 100_000  # files and directories looked at for a consolidated*.safetensors
MAX_CONFIG_BYTES = 16 << 20
# transformers 4.x's cache_dir default, first set first: never ~- or $-expanded
TRANSFORMERS_CACHE_VARIABLES = ("TRANSFORMERS_CACHE", "PYTORCH_TRANSFORMERS_CACHE", "PYTORCH_PRETRAINED_BERT_CACHE")


@dataclass(eq=False, repr=False)
class ModelConfig(Value):
    """A model the launch names: its name, its directory and its config.json."""

    name: str  # as the command names it
    path: Path  # its config.json
    config: dict[str, Any]  # --hf-overrides applied
    overrides: dict[str, Any] = field(default_factory=dict)  # the --hf-overrides applied to it
    own: dict[str, Any] = field(default_factory=dict)  # config.json's, before them

    def get(self, key: str, default: Any = None) -> Any:  # config.json's values: JSON, checked where used
        return self.config.get(key, default)

    @property
    def text_config(self) -> dict[str, Any]:
        """The language model's config: text_config when present (Kimi-K2.5), else the config."""
        inner = self.config.get("text_config")
        return inner if isinstance(inner, dict) else self.config

    @property
    def architecture(self) -> str | None:
        archs = self.config.get("architectures")
        return archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None

    @property
    def architectures(self) -> list[str]:
        """config.json's architectures, in order (vLLM builds the first its registry can load); the
        names only, when the list holds anything else."""
        archs = self.config.get("architectures")
        return [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []


def hub_cache(environ: dict[str, str]) -> Path:
    """The cache transformers reads a hub model's config.json from, for a process with environment
    `environ`: its own TRANSFORMERS_CACHE (and the two older names, taken as they are) over
    huggingface_hub's HF_HUB_CACHE (transformers/utils/hub.py, huggingface_hub/constants.py)."""
    for name in TRANSFORMERS_CACHE_VARIABLES:
        if name in environ:
            return Path(environ[name])
    return hf_hub_cache(environ)


def hf_hub_cache(environ: dict[str, str]) -> Path:
    """huggingface_hub's own cache (constants.HF_HUB_CACHE) for a process with environment `environ`."""
    home = environ.get("HOME") or str(Path.home())
    hf_home = environ.get(
        "HF_HOME", os.path.join(environ.get("XDG_CACHE_HOME", os.path.join(home, ".cache")), "huggingface")
    )
    hf_home = _expanded(hf_home, environ)
    return Path(
        _expanded(
            environ.get("HF_HUB_CACHE", environ.get("HUGGINGFACE_HUB_CACHE", os.path.join(hf_home, "hub"))), environ
        )
    )


def _expanded(path: str, environ: dict[str, str]) -> str:
    """os.path.expandvars(os.path.expanduser(path)) with `environ` as the environment."""
    if path.startswith("~") and (path == "~" or path[1] == "/") and environ.get("HOME"):
        path = environ["HOME"] + path[1:]
    path = os.path.expanduser(path)
    return re.sub(r"\$(\w+|\{[^}]*\})", lambda m: environ.get(m.group(1).strip("{}"), m.group(0)), path)


def resolve_model(
    name: str,
    environ: dict[str, str],
    *,
    overrides: dict[str, Any] | None = None,
    role: str = "model",
    revision: str | None = None,
    config_path: str | None = None,
    config_format: str = "auto",
) -> ModelConfig:
    """The config.json vLLM reads for model `name` (`config_path`: --hf-config-path, read instead of
    the model's own; `revision`: --revision, for a hub id; `config_format`: --config-format)."""
    looked: list[str] = []
    file_name(name, role)
    if revision is not None:
        file_name(revision, f"{role} '{name}': revision")
    source = file_name(config_path, "--hf-config-path") if config_path else name
    local = Path(source)  # never ~-expanded: neither vLLM nor transformers expands it
    _refuse_too_long(local, role, source)
    _refuse_a_file(local, role, source)
    if os.path.isdir(local):
        _refuse_other_formats(local, config_format, role, source)
    looked.append(_where(local / CONFIG))
    raw = _config_bytes(local / CONFIG)
    if raw is not None:
        return _load(name, local / CONFIG, raw, overrides)
    if os.path.isdir(local):  # transformers reads a directory of that name, not the hub cache
        raise TargetError(
            f"{role} '{source}': the directory {local.resolve()} has no config.json (vLLM reads it, not the hub cache)",
            hint=_empty_directory_hint(source, local.resolve(), config_path is not None),
        )
    candidate = _in_hub_cache(source, revision or "main", looked, role, config_format, environ)
    if candidate is not None:
        return _load(name, *candidate, overrides)
    hint = _config_hint(source, len(looked) > 1, None if config_path else revision, environ)
    if source.startswith("~"):
        hint = f"write the full path: vLLM never expands ~ (only a shell does, in a word of its own); {hint}"
    raise TargetError(f"{role} '{source}': no config.json found (looked at: {'; '.join(looked)})", hint=hint)


def _empty_directory_hint(source: str, directory: Path, config_only: bool) -> str:
    """What makes vLLM find the model a directory without config.json stands for: moving away helps
    only a relative name that is also a hub id (./org/m shadows org/m); anything else names that directory."""
    what = "config.json" if config_only else "config.json and weights"
    if _a_hub_id_here(source):
        return f"run from a directory without {source} in it (vLLM then takes it as a hub id), or put the model's {what} into {directory}"
    if config_only:
        return f"put the model's config.json into {directory}, or give --hf-config-path the directory holding it"
    return f"put the model's config.json and weights into {directory}, or give the directory that holds them"


def _a_hub_id_here(name: str) -> bool:
    """Whether a local path `name` stands where vLLM would otherwise take a hub id: a relative name
    huggingface_hub takes, which running elsewhere frees (no directory changes an absolute one)."""
    return not os.path.isabs(name) and hub_repo_id(name)


def _where(path: Path) -> str:
    """A path looked at, as the user can find it: a relative one with the directory it is read in
    (vLLM reads it there too; the user may be elsewhere when reading this)."""
    if path.is_absolute():
        return str(path)
    try:
        return f"{path} under the current directory {os.getcwd()}"
    except OSError:  # the working directory was removed
        return f"{path} under the current directory"


def config_download(name: str, revision: str | None, cache: Path | str, *more: str) -> str:
    """The command that fetches a hub model's config.json alone (and `more` files), at `revision`,
    into `cache` (the one file preflight reads: without a file name `hf download` fetches every
    file, weights included)."""
    return hf_download(name, revision, cache, files=("config.json", *more))


def hf_download(
    name: str, revision: str | None, cache: Path | str, *, files: tuple[str, ...] = (), force: bool = False
) -> str:
    """`hf download` of hub id `name` (`files` alone, else the whole model) at `revision` into
    `cache`, the cache the launch reads: named with --cache-dir when the plain command, run where
    patchkit runs, would fill another (the launch's `env` set HF_HUB_CACHE, HF_HOME, ...)."""
    words = ["hf", "download", name, *files]
    if revision and revision != "main":
        words += ["--revision", revision]
    if force:
        words.append("--force-download")
    where = os.path.abspath(cache)
    if where != os.path.abspath(hf_hub_cache(dict(os.environ))):
        words += ["--cache-dir", where]
    return shlex.join(words)


def fetched_by(download: str, aside: str = "no weights") -> str:
    """An `hf download` command and where `hf` comes from (huggingface_hub's, not patchkit's): every
    hint that names it says it the same way."""
    return (
        f"`{download}` ({aside}; `hf` comes with huggingface_hub: vLLM's venv has it, "
        f"`python3 -m pip install huggingface_hub` gets it, or `pipx run --spec huggingface_hub {download}`)"
    )


def _config_hint(source: str, hub_id: bool, revision: str | None, environ: dict[str, str]) -> str:
    """What gives preflight the model: online, a hub model's config.json alone (vLLM downloads the
    weights); offline, the whole model, whose weights preflight then reads the heads of."""
    if hub_id:
        return f"{_fetch_hint(source, revision, environ)}, or a folder with it"
    return "give the directory holding the model's config.json and weights (preflight reads their heads; it never downloads)"


def _fetch_hint(name: str, revision: str | None, environ: dict[str, str]) -> str:
    """Online, config.json into transformers' cache (where vLLM reads it); offline, the whole model
    into huggingface_hub's, where vLLM's snapshot_download(local_files_only) looks."""
    if not offline(environ):  # one file into the cache
        download = config_download(name, revision, hub_cache(environ))
        return f"preflight needs the model's config.json (vLLM downloads the rest): {fetched_by(download)}"
    whole = fetched_by(hf_download(name, revision, hf_hub_cache(environ)), "weights too: preflight reads their heads")
    return f"an offline launch needs the whole model in the cache: {whole}"


def _refuse_too_long(path: Path, role: str, name: str) -> None:
    """A path the file system refuses as too long (a name in it, or the whole): no model is there,
    for vLLM either (it then takes the name for a hub id, which it is not). Named once, its head only."""
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise TargetError(
                f"{role} '{quoted(name, 80)}': the path is longer than the file system allows ({exc.strerror}): "
                "no model is there, and vLLM finds none either",
                hint="give the model's directory by a path the file system takes (a shorter one, or a symlink to it)",
            ) from None


def _refuse_a_file(path: Path, role: str, name: str) -> None:
    """vLLM takes any existing path as the model's own (repo_utils.file_or_path_exists): a file there
    that is not a GGUF model it refuses; a GGUF file it reads, and patchkit cannot judge it."""
    if not os.path.exists(path) or os.path.isdir(path):
        return
    if path.suffix == ".gguf" or read_head(path, 4) == b"GGUF":
        raise TargetError(
            f"cannot judge: {role} '{name}' is a GGUF file, and patchkit reads config.json only",
            hint="check this launch by hand; patchkit judges Hugging Face format models (config.json)",
        )
    raise TargetError(
        f"{role} '{name}': {path.resolve()} is a file, not a model directory, and vLLM takes an existing "
        "path as the model's own: it refuses the launch",
        hint="give the model's directory"
        + (", or run from a directory where that name is no file" if _a_hub_id_here(name) else ""),
    )


def _refuse_other_formats(directory: Path, config_format: str, role: str, name: str) -> None:
    """vLLM's get_config reads params.json, not config.json, for --config-format mistral, and for
    `auto` when the model has params.json and a consolidated*.safetensors file (at any depth): then,
    and for a format of a plugin's, patchkit cannot judge (it reads config.json only)."""
    if config_format == "hf":
        return
    if config_format == "auto" and not (_is_file(directory / MISTRAL_CONFIG) and _has_consolidated(directory)):
        return
    reads = "a format of its own" if config_format not in ("auto", "mistral") else f"{directory / MISTRAL_CONFIG}"
    raise TargetError(
        f"cannot judge: {role} '{name}': vLLM reads {reads} (config format {config_format}), "
        "and patchkit reads config.json only",
        hint="check this launch by hand; patchkit judges Hugging Face format models (config.json)",
    )


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:
        return False


def _has_consolidated(directory: Path) -> bool:
    """A file named consolidated*.safetensors under `directory` (vLLM's is_mistral_model_repo); a tree
    too large to walk counts as having one: the verdict is then "cannot judge", never a wrong pass."""
    seen = 0
    for _, _, files in os.walk(directory):
        seen += len(files) + 1
        if seen > WALK_LIMIT or any(fnmatch.fnmatch(f, "consolidated*.safetensors") for f in files):
            return True
    return False


def _config_bytes(path: Path) -> bytes | None:
    """A config.json's bytes (bounded, never blocking: a fifo or a device is refused); None when absent."""
    try:
        return read_named_file(path, MAX_CONFIG_BYTES, "model config")
    except (FileNotFoundError, NotADirectoryError):
        return None


def _in_hub_cache(
    name: str, revision: str, looked: list[str], role: str, config_format: str, environ: dict[str, str]
) -> tuple[Path, bytes] | None:
    cache = hub_cache(environ)
    parts = name.split("/")
    if len(parts) != 2 or any(unsafe_reason(p) or not p or "/" in p for p in parts):
        return None
    repo = cache / f"models--{parts[0]}--{parts[1]}"
    if not os.path.isdir(repo):  # False for a name no directory can have (too long), as for none
        looked.append(f"the Hugging Face cache {cache}/")  # no glob under it: a path short enough to copy whole
        return None
    commit = _snapshot_of(repo, revision, role, name)
    if os.path.isdir(repo / "snapshots" / commit):
        _refuse_other_formats(repo / "snapshots" / commit, config_format, role, name)
    path = repo / "snapshots" / commit / CONFIG
    looked.append(str(path))
    raw = _config_bytes(path)
    if raw is None:
        raise TargetError(
            f"{role} '{name}' not found at revision {revision}: the cache holds no config.json for it "
            f"({path} absent; vLLM would download it)",
            hint=f"{_fetch_hint(name, revision, environ)}, or point at a local directory",
        )
    return path, raw


def _snapshot_of(repo: Path, revision: str, role: str, name: str) -> str:
    """The snapshot directory a revision names, as huggingface_hub finds it: the commit refs/REV holds,
    else REV itself. A ref that cannot be read (a fifo, a device, not a commit) judges nothing."""
    if not revision or revision.startswith("/") or any(p in ("", ".", "..") for p in revision.split("/")):
        raise BadInput(f"revision '{revision}' is no revision name")
    ref = repo / "refs" / revision
    try:
        text = _ref_commit(repo, revision, role, name)
    except FileNotFoundError:
        return revision
    if not text or unsafe_reason(text) or "/" in text:
        raise TargetError(f"{role} '{name}' not found: {ref} names no snapshot", hint=f"fetch the model again ({name})")
    if text != text.strip() and not os.path.isdir(repo / "snapshots" / text):
        raise TargetError(
            f"{role} '{name}' not found: {ref} holds {quoted(repr(text))}: huggingface_hub reads it as it is, "
            "space or line break included, finds no snapshot by that name, and vLLM would download the model",
            hint=f"write the commit alone into {ref} (no newline), or fetch the model again ({name})",
        )
    return text


def _ref_commit(repo: Path, revision: str, role: str, name: str) -> str:
    """The commit the hub cache ref `repo`/refs/`revision` holds, read as huggingface_hub reads it
    (`open(ref).read()`: text, line ends as \n, nothing stripped), bounded; FileNotFoundError when
    there is none."""
    ref = repo / "refs" / revision
    try:
        raw = read_named_file(ref, REF_LIMIT, "hub cache ref").decode("utf-8")
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError, BadInput) as exc:
        raise TargetError(
            f"{role} '{name}' not found: {ref} names no snapshot ({exc})",
            hint=f"fetch its config.json again: {fetched_by(config_download(name, revision, repo.parent))}, "
            "or point at a local directory",
        ) from None
    return raw.replace("\r\n", "\n").replace("\r", "\n")


def _load(name: str, path: Path, raw: bytes, overrides: dict[str, Any] | None) -> ModelConfig:
    try:
        text = raw.decode("utf-8")  # as transformers reads it: a BOM or UTF-16 is no JSON to it
    except UnicodeDecodeError as exc:
        raise BadInput(f"{path} is not valid JSON to transformers (not UTF-8: {exc.reason})") from None
    config = load_json(text, str(path))
    if not isinstance(config, dict):
        raise BadInput(f"{path} is not a JSON object")
    return with_overrides(ModelConfig(name, path, config, own=config), overrides or {})


def with_overrides(model: ModelConfig, overrides: dict[str, Any]) -> ModelConfig:
    if not overrides:
        return model
    own = model.own or model.config
    return ModelConfig(model.name, model.path, _merged(model.config, overrides), {**model.overrides, **overrides}, own)


# dict-valued attributes of a loaded config (get_config sets quantization_config from config.json's dict)
NOT_NESTED = ("quantization_config", "compression_config")


def _merged(config: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """--hf-overrides applied as vLLM applies them: a value replaces the config's own whole (0.12+ sets
    a dict-valued one after loading, 0.11 updates the config), save a nested config's (text_config ...),
    which 0.12+ updates key by key, dicts in it too (_update_nested)."""
    merged = dict(config)
    for key, value in overrides.items():
        nested = key.endswith("_config") and key not in NOT_NESTED
        merged[key] = nested_update(merged[key], value) if nested and _both_dicts(merged.get(key), value) else value
    return merged


def nested_update(config: dict[str, Any], updates: dict[str, Any]) -> dict[str, Any]:
    """ModelConfig._update_nested on a nested config: a dict merged into the dict it names, key by key."""
    merged = dict(config)
    for key, value in updates.items():
        merged[key] = nested_update(merged[key], value) if _both_dicts(merged.get(key), value) else value
    return merged


def _both_dicts(held: object, value: object) -> bool:
    return isinstance(held, dict) and isinstance(value, dict)


REDIRECT_LIMIT = 1 << 20  # VLLM_MODEL_REDIRECT_PATH: a table of model names
_TRUE = ("1", "ON", "YES", "TRUE")  # huggingface_hub's ENV_VARS_TRUE_VALUES, read upper-cased
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_REPO_ID = re.compile(r"^(\b[\w\-.]+\b/)?\b[\w\-.]{1,96}\b$")


def offline(environ: dict[str, str]) -> bool:
    """huggingface_hub.constants.HF_HUB_OFFLINE for a process with environment `environ`."""
    value = environ.get("HF_HUB_OFFLINE") or environ.get("TRANSFORMERS_OFFLINE")
    return value is not None and value.upper() in _TRUE


def offline_model_path(name: str, revision: str | None, environ: dict[str, str], role: str = "model") -> str:
    """What vLLM's EngineArgs makes of its model (or tokenizer) when offline, before anything else
    reads it (repo_utils.get_model_path): an existing path as it is, else the snapshot directory
    huggingface_hub's snapshot_download(local_files_only=True) finds in HF_HUB_CACHE (never
    transformers' TRANSFORMERS_CACHE). TargetError where vLLM raises (no such snapshot, no repo id)."""
    file_name(name, role)
    if os.path.exists(name):
        return name
    revision = revision or "main"
    file_name(revision, f"{role} '{name}': revision")
    cache = hf_hub_cache(environ)
    why = _offline_refusal(name)
    if why is None:
        storage = cache / ("models--" + name.replace("/", "--"))
        snapshot = _offline_snapshot(storage, revision, role, name)
        if snapshot is not None:
            return str(snapshot)
        why = f"{cache} holds no snapshot of it for revision {revision}"
    raise TargetError(
        f"{role} '{name}': HF_HUB_OFFLINE is set, so vLLM takes it as a path or a snapshot in "
        f"huggingface_hub's cache, and it is neither ({why}): vLLM refuses the launch",
        hint=f"fetch it into that cache: {fetched_by(hf_download(name, revision, cache), 'the whole model, as an offline launch needs')}, "
        "or give the model's local directory",
    )


def hub_repo_id(name: str) -> bool:
    """Whether huggingface_hub's validate_repo_id takes `name`: vLLM then asks the hub (or, offline,
    its cache) for it; any other name a download refuses, and vLLM reads it as a path."""
    return _offline_refusal(name) is None


def _offline_refusal(name: str) -> str | None:
    """Why huggingface_hub's validate_repo_id refuses `name`; None when it takes it."""
    if name.count("/") > 1 or not _REPO_ID.match(name):
        return "no local path by that name, and no hub repo id"
    if "--" in name or ".." in name or name.endswith(".git"):
        return "no local path by that name, and a repo id huggingface_hub refuses"
    return None


def offline_snapshot(name: str, revision: str | None, cache: Path) -> Path | None:
    """The snapshot of hub id `name` at `revision` (default main) that huggingface_hub's
    snapshot_download(local_files_only=True) finds under `cache`; None when it finds none."""
    if _offline_refusal(name) is not None:
        return None
    return _offline_snapshot(cache / ("models--" + name.replace("/", "--")), revision or "main", "drafter", name)


def _offline_snapshot(storage: Path, revision: str, role: str, name: str) -> Path | None:
    """snapshot_download's offline look-up: a commit hash names its snapshot; another revision, the
    commit its refs/ file holds (read as it is); the snapshot when it exists, else None."""
    commit = revision if _COMMIT.match(revision) else None
    ref = storage / "refs" / revision
    if commit is None and observed.exists(ref):
        try:
            commit = _ref_commit(storage, revision, role, name)
        except FileNotFoundError:
            commit = None
    if commit is None or "\0" in commit:
        return None
    snapshot = storage / "snapshots" / commit
    return snapshot if observed.exists(snapshot) else None


def redirected(name: str, environ: dict[str, str], cwd: str | None = None) -> str:
    """`name` as vLLM's maybe_model_redirect (transformers_utils/utils.py) rewrites it: looked up in
    the file VLLM_MODEL_REDIRECT_PATH names, read as a JSON object, else as lines of `NAME TARGET`."""
    setting = environ.get("VLLM_MODEL_REDIRECT_PATH")
    if not setting:
        return name
    path = os.path.join(cwd or os.getcwd(), setting)
    if not observed.exists(path):  # vLLM too goes on without it
        return name
    try:
        raw = read_named_file(path, REDIRECT_LIMIT, "VLLM_MODEL_REDIRECT_PATH")
        text = raw.decode("utf-8")  # vLLM's open(): the locale's encoding
    except (FileNotFoundError, UnicodeDecodeError) as exc:
        raise TargetError(f"cannot judge: VLLM_MODEL_REDIRECT_PATH {setting} cannot be read: {exc}") from None
    table = _json_table(text) or _line_table(text)
    if not isinstance(table, dict):
        raise BadInput(f"VLLM_MODEL_REDIRECT_PATH {setting} holds JSON that is not an object: vLLM fails on it")
    target = table.get(name)
    if not target:
        return name
    if not isinstance(target, str):
        raise BadInput(f"VLLM_MODEL_REDIRECT_PATH {setting} redirects {name} to {target!r}, not a model name")
    return file_name(target, f"VLLM_MODEL_REDIRECT_PATH {setting} redirects {name} to")


def _json_table(text: str) -> object:
    try:
        return json.loads(text)
    except Exception:  # vLLM's own `except Exception`: anything not JSON is read as lines
        return {}


def _line_table(text: str) -> dict[str, str]:
    """`NAME TARGET` lines (universal newlines, as vLLM's readlines), any other line skipped."""
    table = {}
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        parts = line.strip().split()
        if len(parts) == 2:
            table[parts[0]] = parts[1]
    return table
