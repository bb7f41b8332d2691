"""Reading a vLLM launch command: the arguments vLLM itself reads, nothing run.

Accepted forms, each optionally behind `env [VAR=VALUE ...]`:

    vllm serve MODEL [args]
    python -m vllm.entrypoints.openai.api_server --model MODEL [args]

Options are read as vLLM's FlexibleArgumentParser reads them (checked against vLLM 0.16.0's):
`--name value` and `--name=value`, underscores as dashes in the name, and for the JSON options a
dotted form (`--speculative-config.method eagle3`) that builds the JSON object key by key.
`--config FILE.yaml` splices the YAML's keys in as options; the command line overrides them. Unknown
options are ignored. What cannot be read is BadInput (exit 2).
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
    serve: bool = True  # `vllm serve` (else `python -m vllm.entrypoints.openai.api_server`)
    notes: list[str] = field(default_factory=list)  # what vLLM reads otherwise than it was written

    def short_options(self) -> set[str]:
        """The short aliases the command uses (`-tp`, `-sc`), as written."""
        return {f"-{alias}" for alias in ALIASES for token in self.arguments if _spells(token, f"-{alias}")}

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
        arguments, serve = args[1:], True
    elif name.startswith("python"):
        if len(args) < 2 or args[0] != "-m" or args[1] != API_SERVER:
            raise BadInput(f"not a vLLM launch: expected `{name} -m {API_SERVER} --model MODEL`")
        arguments, serve = args[2:], False
    else:
        raise BadInput(f"not a vLLM launch: {program!r} (expected `vllm serve` or `python -m {API_SERVER}`)")
    notes: list[str] = []
    options, _ = _read_options(_with_config_file(arguments, serve), notes)
    model = _model(arguments, options, serve)
    if model is None:
        raise BadInput("the launch command names no model (positional MODEL or --model)")
    command = LaunchCommand(list(argv), program, env, options, model, list(arguments), serve, notes)
    _ = command.speculative_config, command.hf_overrides, command.tensor_parallel_size  # each read now: exit 2
    return command


def _model(arguments: list[str], options: dict[str, object], serve: bool) -> str | None:
    """`vllm serve`: the command line's --model, else its positional MODEL, else the config file's
    model (vLLM moves a --model to the positional place, which wins); the api_server: --model."""
    cli_options, positional = _read_options(arguments, [])
    found = (cli_options.get("model") or (positional[0] if positional else None)) if serve else None
    found = found or options.get("model")
    return str(found) if found else None


def _spells(token: str, option: str) -> bool:
    return token == option or token.startswith((f"{option}=", f"{option}."))


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


def _read_options(args: list[str], notes: list[str]) -> tuple[dict[str, object], list[str]]:
    """Options as vLLM's FlexibleArgumentParser reads them: the last occurrence wins; underscores
    become dashes in an option's name (not in a key after its first dot); `--name.key VALUE` (the
    next token, whatever it is) builds one JSON object per option, which vLLM passes after every
    other argument: it replaces a JSON value given for the same option."""
    options: dict[str, object] = {}
    positional: list[str] = []
    dotted: dict[str, dict] = {}
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
        base, dot, key = name.partition(".")
        if token.startswith("--"):
            base = base.replace("_", "-")
        base = ALIASES.get(base, base)
        if dot:
            if value is None:
                if index >= len(args):
                    raise BadInput(f"{token} needs a value")
                value = args[index]
                index += 1
            if base in JSON_OPTIONS:
                _merge(dotted.setdefault(base, {}), _dotted_object(key, value))
            continue
        if value is None and base not in FLAGS and index < len(args) and not _is_option(args[index]):
            value = args[index]
            index += 1
        options[base] = True if value is None else value
    for base, built in dotted.items():
        if isinstance(options.get(base), str):
            notes.append(
                f"--{base} is given as JSON and key by key: vLLM keeps only the key-by-key object "
                f"{json.dumps(built)} and drops the JSON"
            )
        options[base] = built
    return options, positional


def _is_option(token: str) -> bool:
    return token.startswith("-") and len(token) > 1 and not _is_number(token)


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def _dotted_object(key: str, value: str) -> dict:
    """`method`, `eagle3` -> {"method": "eagle3"}; `a.b`, `5` -> {"a": {"b": 5}} (a value that is JSON
    is parsed); `ids+`, `1,2` -> {"ids": ["1", "2"]} (a list, appended to)."""
    parsed: object
    if key.endswith("+"):
        key, parsed = key[:-1], value.split(",")
    else:
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = value
    nested: object = parsed
    for part in reversed(key.split(".")):
        nested = {part: nested}
    assert isinstance(nested, dict)
    return nested


def _merge(original: dict, update: dict) -> None:
    """vLLM's merge of key-by-key values: objects key by key, lists appended, anything else replaced."""
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(original.get(key), dict):
            _merge(original[key], value)
        elif isinstance(value, list) and isinstance(original.get(key), list):
            original[key] += value
        else:
            original[key] = value


def _with_config_file(arguments: list[str], serve: bool) -> list[str]:
    """`--config FILE.yaml`: its keys spliced in as options where vLLM puts them (before the command
    line's, which win; after `vllm serve`'s positional MODEL)."""
    if "--config" not in arguments:
        return arguments
    if arguments.count("--config") > 1:
        raise BadInput("--config is given more than once (vLLM takes one config file)")
    index = arguments.index("--config")
    if index == len(arguments) - 1:
        raise BadInput("--config names no file")
    config = _config_file_args(arguments[index + 1])
    if serve and index > 0 and not arguments[0].startswith("-"):
        return [arguments[0], *config, *arguments[1:index], *arguments[index + 2 :]]
    return [*config, *arguments[:index], *arguments[index + 2 :]]


def _config_file_args(path: str) -> list[str]:
    """The options of a YAML config file as vLLM's FlexibleArgumentParser.load_config_file makes them."""
    import yaml

    if path.rsplit(".", 1)[-1] not in ("yaml", "yml"):
        raise BadInput(f"--config {path}: vLLM reads only a .yaml or .yml config file")
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise BadInput(f"--config {path}: cannot read it: {exc.strerror or exc}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise BadInput(f"--config {path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise BadInput(f"--config {path}: expected a mapping of option names to values (vLLM fails on anything else)")
    args: list[str] = []
    for key, value in data.items():
        if isinstance(value, bool):
            args += [f"--{key}"] if value else []
        elif isinstance(value, list):
            args += [f"--{key}", *map(str, value)] if value else []
        elif isinstance(value, dict):
            args += [f"--{key}", json.dumps(value)]
        else:
            args += [f"--{key}", str(value)]
    return args


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
