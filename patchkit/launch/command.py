"""Reading a vLLM launch command: the arguments vLLM itself reads, nothing run.

Accepted forms, each optionally behind `env [VAR=VALUE ...]`:

    vllm serve MODEL [args]
    python -m vllm.entrypoints.openai.api_server --model MODEL [args]

Options are read as vLLM's FlexibleArgumentParser reads them: `--name value` and `--name=value`,
underscores as dashes, and for the JSON options a dotted form (`--speculative-config.method eagle3`)
that builds the JSON object key by key. `--config FILE.yaml` supplies options as YAML keys; the
command line overrides them. Unknown options are ignored. What cannot be read is BadInput (exit 2).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from patchkit.errors import BadInput

API_SERVER = "vllm.entrypoints.openai.api_server"
JSON_OPTIONS = ("speculative-config", "hf-overrides")
ALIASES = {"sc": "speculative-config", "tp": "tensor-parallel-size"}
FLAGS = frozenset({"trust-remote-code", "no-trust-remote-code", "enforce-eager", "headless", "help"})
_ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass
class LaunchCommand:
    argv: list[str]  # what `run` executes (the whole command, env prefix included)
    program: str  # `vllm` or the python interpreter as written
    env: dict[str, str] = field(default_factory=dict)  # the `env VAR=VALUE` prefix
    options: dict[str, object] = field(default_factory=dict)  # option name (dashed) -> value
    model: str | None = None
    arguments: list[str] = field(default_factory=list)  # what vLLM's parser reads (after `serve` / the module)

    def engine_args(self) -> list[str]:
        """The arguments for vLLM's engine parser: the positional model as --model."""
        rest = list(self.arguments)
        if "model" not in self.options and self.model in rest:
            rest.remove(self.model)
        return rest if "model" in self.options else ["--model", str(self.model), *rest]

    @property
    def speculative_config(self) -> dict | None:
        return self._json("speculative-config")

    @property
    def hf_overrides(self) -> dict:
        return self._json("hf-overrides") or {}

    @property
    def tokenizer(self) -> str | None:
        value = self.options.get("tokenizer")
        return str(value) if value is not None else None

    @property
    def trust_remote_code(self) -> bool:
        return bool(self.options.get("trust-remote-code")) and not self.options.get("no-trust-remote-code")

    @property
    def tensor_parallel_size(self) -> int:
        value = self.options.get("tensor-parallel-size", 1)
        try:
            return int(str(value))
        except ValueError:
            raise BadInput(f"--tensor-parallel-size {value!r} is not a whole number") from None

    def _json(self, name: str) -> dict | None:
        value = self.options.get(name)
        if value is None or isinstance(value, dict):
            return value
        try:
            parsed = json.loads(str(value))
        except json.JSONDecodeError as exc:
            raise BadInput(f"--{name} is not valid JSON: {exc.msg} at column {exc.colno}: {value}") from None
        if not isinstance(parsed, dict):
            raise BadInput(f"--{name} must be a JSON object, got: {value}")
        return parsed

    def interpreter(self) -> str | None:
        """The Python that will run this launch: the `vllm` script's shebang, or the `python` named."""
        found = shutil.which(self.program, path=self.env.get("PATH", os.environ.get("PATH")))
        if found is None:
            return None
        if Path(self.program).name.startswith("python"):
            return found
        return _shebang_interpreter(Path(found))


def parse(argv: list[str]) -> LaunchCommand:
    if not argv:
        raise BadInput("no launch command given", hint="patchkit preflight -- vllm serve MODEL [args]")
    env, rest = _env_prefix(argv)
    if not rest:
        raise BadInput("the launch command names no program after `env`")
    program, args = rest[0], rest[1:]
    name = Path(program).name
    if name == "vllm":
        if not args or args[0] != "serve":
            raise BadInput(f"not a vLLM launch: `vllm {args[0] if args else ''}` (expected `vllm serve MODEL`)")
        arguments = args[1:]
        options, positional = _read_options(arguments)
        model = positional[0] if positional else None
    elif name.startswith("python"):
        if len(args) < 2 or args[0] != "-m" or args[1] != API_SERVER:
            raise BadInput(f"not a vLLM launch: expected `{name} -m {API_SERVER} --model MODEL`")
        arguments = args[2:]
        options, _ = _read_options(arguments)
        model = None
    else:
        raise BadInput(f"not a vLLM launch: {program!r} (expected `vllm serve` or `python -m {API_SERVER}`)")
    options = {**_config_file_options(options.get("config")), **options}
    model = str(options.get("model") or model or "") or None
    if model is None:
        raise BadInput("the launch command names no model (positional MODEL or --model)")
    command = LaunchCommand(list(argv), program, env, options, model, list(arguments))
    _ = command.speculative_config, command.hf_overrides, command.tensor_parallel_size  # each read now: exit 2
    return command


def _env_prefix(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    if Path(argv[0]).name != "env":
        return {}, argv
    env: dict[str, str] = {}
    index = 1
    while index < len(argv) and (_ENV_ASSIGNMENT.match(argv[index]) or argv[index] in ("-i", "--")):
        if "=" in argv[index]:
            key, value = argv[index].split("=", 1)
            env[key] = value
        index += 1
    return env, argv[index:]


def _read_options(args: list[str]) -> tuple[dict[str, object], list[str]]:
    options: dict[str, object] = {}
    positional: list[str] = []
    index = 0
    while index < len(args):
        token = args[index]
        index += 1
        if not token.startswith("-") or token in ("-", "--"):
            positional.append(token)
            continue
        name, value = token.lstrip("-"), None
        if "=" in name:
            name, value = name.split("=", 1)
        name = name.replace("_", "-")
        base, _, key = name.partition(".")
        base = ALIASES.get(base, base)
        if value is None and base not in FLAGS and index < len(args) and not _is_option(args[index]):
            value = args[index]
            index += 1
        if key and base in JSON_OPTIONS:
            _set_dotted(options, base, key, value)
        else:
            options[base] = True if value is None else value
    return options, positional


def _is_option(token: str) -> bool:
    return token.startswith("-") and len(token) > 1 and not _is_number(token)


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def _set_dotted(options: dict[str, object], base: str, key: str, value: str | None) -> None:
    """`--speculative-config.method eagle3`: one key of the JSON object (a value that is JSON is parsed)."""
    current = options.get(base)
    if isinstance(current, str):
        raise BadInput(f"--{base} is given both as JSON and key by key (--{base}.{key})")
    target = current if isinstance(current, dict) else {}
    options[base] = target
    parts = key.split(".")
    for part in parts[:-1]:
        target = target.setdefault(part, {})
        if not isinstance(target, dict):
            raise BadInput(f"--{base}.{key}: {part} is not an object")
    try:
        parsed = json.loads(value) if value is not None else True
    except json.JSONDecodeError:
        parsed = value
    target[parts[-1]] = parsed


def _config_file_options(path: object) -> dict[str, object]:
    """--config FILE.yaml: its keys as options (the command line overrides them)."""
    if path is None:
        return {}
    import yaml

    try:
        data = yaml.safe_load(Path(str(path)).read_text(encoding="utf-8"))
    except OSError as exc:
        raise BadInput(f"--config {path}: cannot read it: {exc.strerror or exc}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise BadInput(f"--config {path}: not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise BadInput(f"--config {path}: expected a mapping of option names to values")
    return {str(k).replace("_", "-"): v for k, v in data.items()}


def _shebang_interpreter(script: Path) -> str | None:
    try:
        with script.open("rb") as handle:
            first = handle.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode(errors="replace").split()
    if not words:
        return None
    if Path(words[0]).name == "env" and len(words) > 1:
        return shutil.which(words[1])
    return words[0]
