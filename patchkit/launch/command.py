"""Reading a vLLM launch command: the arguments vLLM itself reads, nothing run.

Accepted forms, each optionally behind `env [VAR=VALUE ...]`:

    vllm serve MODEL [args]
    python -m vllm.entrypoints.cli.main serve MODEL [args]   (what the `vllm` script runs)
    python -m vllm.entrypoints.openai.api_server --model MODEL [args]

`frame` reads the program and its `env` prefix; `read` then reads the arguments as the installed
release's own parser does (patchkit/launch/serve_parser.py). What cannot be read is BadInput (exit 2).
"""

from __future__ import annotations

import dataclasses
import errno
import os
import re
import shlex
import stat
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from packaging.version import Version

from patchkit.base import hints
from patchkit.base.errors import BadInput, TargetError, escaped
from patchkit.base.values import Value
from patchkit.launch.interpreter import cannot_tell, exec_search, read_python_options, script_python
from patchkit.launch.mla import Reader, deepseek_mla
from patchkit.launch.models import redirected
from patchkit.launch.serve_parser import read as read_arguments
from patchkit.launch.serve_parser import spec_for
from patchkit.launch.values import load_json
from patchkit.launch.vllm_env import MLA_DISABLE, int_flag

API_SERVER = "vllm.entrypoints.openai.api_server"
CLI = "vllm.entrypoints.cli.main"  # the `vllm` script's module: `python -m CLI serve` is `vllm serve`
# a release's own flags for keys of the speculative config (option dest, dashed -> key)
SPECULATIVE_FLAGS = (("spec-method", "method"), ("spec-model", "model"), ("spec-tokens", "num_speculative_tokens"))
ALIASES = {"sc": "speculative-config", "tp": "tensor-parallel-size"}
# The patterns here are text, compiled on first use (re keeps them): start-up compiles none a run does not use.
_ENV_ASSIGNMENT = r"^[A-Za-z_][A-Za-z0-9_]*="
# GNU env's long options (getopt_long: an unambiguous prefix is the option); None: not read by patchkit
_ENV_LONG = {
    "--ignore-environment": "-i",
    "--unset": "-u",
    "--chdir": "-C",
    "--debug": "-v",
    "--null": None,
    "--split-string": None,
    "--default-signal": None,
    "--ignore-signal": None,
    "--block-signal": None,
    "--list-signal-handling": None,
    "--help": None,
    "--version": None,
}


@dataclass(eq=False, repr=False)
class LaunchCommand(Value):
    """A vLLM launch command as vLLM would read it: its environment, its options, its model."""

    argv: list[str]  # what `run` executes (the whole command, env prefix included)
    program: str  # `vllm` or the python interpreter as written
    env: dict[str, str] = field(default_factory=dict)  # the `env VAR=VALUE` prefix
    clean_env: bool = False  # `env -i`: the launch inherits no environment
    unset: list[str] = field(default_factory=list)  # `env -u NAME`: taken out of what it inherits
    cwd: str | None = None  # `env -C DIR`: the directory the launch runs in (None: patchkit's own)
    options: dict[str, object] = field(default_factory=dict)  # option name (dashed) -> value
    model: str | None = None
    arguments: list[str] = field(default_factory=list)  # what vLLM's parser reads (after `serve` / the module)
    serve: bool = True  # `vllm serve` (else `python -m vllm.entrypoints.openai.api_server`)
    notes: list[str] = field(default_factory=list)  # what vLLM reads otherwise than it was written
    release: str | None = None  # the release whose recorded parser read the arguments (None: not read yet)
    exact: bool = True  # that parser is the installed release's own (else the nearest recorded one)
    unread: list[str] = field(default_factory=list)  # arguments that parser does not know (not exact)
    config_ignored: str | None = None  # `--config=FILE`, which vLLM ignores (serve_parser.ignored_config)
    config_file: str | None = None  # `--config FILE`
    in_config: dict[str, str] = field(default_factory=dict)  # option -> its key in that file (serve_parser.Reading)
    from_config: tuple[str, ...] = ()  # those whose value is the file's (the command line gives them not)
    python_flags: list[str] = field(default_factory=list)  # `python -E -m ...`: the interpreter's options
    xoptions: list[str] = field(default_factory=list)  # `python -X NAME[=VALUE]`: each value, in order
    hash_pycs: str = "default"  # `python --check-hash-based-pycs MODE`: never loads checked-hash .pyc unchecked

    @property
    def environ(self) -> dict[str, str]:
        """The environment vLLM runs with: patchkit's own (unless `env -i`) under the `env` prefix."""
        return {**self._inherited, **self.env}

    @cached_property
    def _inherited(self) -> dict[str, str]:
        """What the launch inherits of patchkit's environment, read once a command: each read of
        os.environ decodes every variable, and a `run` of three sets asked ~45 times."""
        return {} if self.clean_env else {k: v for k, v in os.environ.items() if k not in self.unset}

    def uses_mla(self, config: dict[str, Any], read: Reader | None = None, *, eagle: bool = False) -> bool:
        """vLLM's use_mla for a model config: its is_deepseek_mla, by the tree's rule where `read` shows it
        (patchkit/launch/mla.py; `eagle`: a drafter under eagle or eagle3), unless the launch's
        VLLM_MLA_DISABLE says otherwise."""
        try:
            disabled = int_flag(self.environ, MLA_DISABLE)
        except ValueError:  # vLLM raises reading it, at start (the vllm-environment finding)
            disabled = False
        return not disabled and deepseek_mla(config, read, eagle=eagle)

    @property
    def sets_search_path(self) -> bool:
        """Whether the command itself says the PATH its program is looked up on (`env -i`, `env -u
        PATH`, `env PATH=...`), rather than inheriting the one it is started with."""
        return self.clean_env or "PATH" in self.unset or "PATH" in self.env

    def working_directory(self) -> str:
        """The directory the launch runs in (absolute)."""
        return os.path.abspath(os.path.join(os.getcwd(), self.cwd or os.curdir))

    def first_path(self) -> str | None:
        """What the launch's Python puts first on sys.path: `python -m`'s working directory, a
        script's own directory; None in safe-path mode (-P, -I, or PYTHONSAFEPATH where -E or -I
        does not make it ignore it), or no such script."""
        options = "".join(self.interpreter_settings()[0])
        ignores_environment = "E" in options or "I" in options
        if "P" in options or "I" in options or (self.environ.get("PYTHONSAFEPATH") and not ignores_environment):
            return None
        cwd = self.working_directory()
        if Path(self.program).name.startswith("python"):
            return cwd
        found = exec_search(self.program, self.environ.get("PATH"))
        return os.path.dirname(os.path.realpath(os.path.join(cwd, found))) if found else None

    def pycache_prefix(self) -> str | None:
        """The pycache prefix the launch's Python reads bytecode under (its sys.pycache_prefix), made
        absolute against the launch's working directory: the first `-X pycache_prefix` (without a value:
        none, the variable ignored), else PYTHONPYCACHEPREFIX unless -E or -I; None: __pycache__."""
        flags, xoptions, _ = self.interpreter_settings()
        for option in xoptions:
            name, _, value = option.partition("=")
            if name == "pycache_prefix":
                return os.path.join(self.working_directory(), value) if value else None
        value = self.environ.get("PYTHONPYCACHEPREFIX", "")
        if not value:  # the usual launch
            return None
        options = "".join(flags)
        return None if "E" in options or "I" in options else os.path.join(self.working_directory(), value)

    def loading_options(self) -> list[str]:
        """The launch's own interpreter options that change which bytecode its imports load (its -X
        pycache_prefix, its --check-hash-based-pycs): a subprocess asking vLLM runs with them too."""
        _, xoptions, mode = self.interpreter_settings()
        options = [f"-X{x}" for x in xoptions if x.partition("=")[0] == "pycache_prefix"]
        return options + (["--check-hash-based-pycs", mode] if mode != "default" else [])

    def hash_pycs_mode(self) -> str:
        """The --check-hash-based-pycs the launch's Python runs with (no variable sets it)."""
        return self.interpreter_settings()[2]

    def interpreter_settings(self) -> tuple[list[str], list[str], str]:
        """(its flag clusters, its -X values, its --check-hash-based-pycs mode): what the launch's
        Python runs with, a `python` launch's own options or its `vllm` script's #! line's (through
        `env -S` or pip's /bin/sh wrapper, a plain #! line's one word); none when that line cannot be
        told (launch_python says why)."""
        if Path(self.program).name.startswith("python"):
            return self.python_flags, self.xoptions, self.hash_pycs
        modes = ["default"]
        flags, xoptions, _ = read_python_options(self.python_options(), modes)
        return flags, xoptions, modes[-1]

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
    def speculative_config(self) -> dict[str, Any] | None:
        """The JSON given (None when not, or given as vLLM's optional_type reads no config: "", None or
        null), with the keys of the releases' own flags (--spec-method, --spec-model, --spec-tokens:
        0.33.0's create_speculative_config) merged in."""
        unset = self.options.get("speculative-config") in ("", "None")
        given = None if unset else self._json("speculative-config", optional=True)
        flags = {key: self.options[flag] for flag, key in SPECULATIVE_FLAGS if self.options.get(flag) is not None}
        if not flags:
            return given
        merged = dict(given or {})
        for flag, key in SPECULATIVE_FLAGS:
            if key in flags and key in merged:
                raise BadInput(
                    f"--{flag} and --speculative-config's '{key}' exclude each other: vLLM refuses the launch"
                )
        return {**merged, **flags}

    @property
    def named_method(self) -> str | None:
        """The method as the command names it (config/speculative.py, the same rule in every release
        0.11.0-0.33.0): a method other than eagle/eagle3, ngram or suffix, or none, is replaced by what
        the drafter's name says ("eagle-" in it: eagle; else "eagle3": eagle3). A model's own MTP method
        (deepseek_mtp, ...) is kept as written: which are mtp is the tree's table. Not what vLLM settles
        on: rules read patchkit/launch/method.py's settled_method."""
        spec = self.speculative_config or {}
        method, drafter = spec.get("method"), spec.get("model")
        if method in ("eagle", "eagle3", "ngram", "[ngram]", "suffix") or not isinstance(drafter, str):
            return method if isinstance(method, str) else None
        if drafter in ("ngram", "[ngram]"):
            return "ngram" if method is None else str(method)
        name = self.draft_model_name(drafter).lower()
        if "eagle-" in name:
            return "eagle"
        if "eagle3" in name:
            return "eagle3"
        return method if isinstance(method, str) else None

    def draft_model_name(self, drafter: str) -> str:
        """The drafter's name as vLLM's draft ModelConfig holds it, the one its method is told from:
        redirected (VLLM_MODEL_REDIRECT_PATH), offline too."""
        return redirected(drafter, self.environ, self.cwd)

    @property
    def hf_overrides(self) -> dict[str, Any]:
        return self._json("hf-overrides") or {}

    def optional_text(self, name: str) -> str | None:
        """The text of option `name` as vLLM reads an option of type `str | None` (its optional_type:
        --revision, --hf-config-path, --tokenizer-revision): None when not given, "" or "None" (what
        an empty value in a --config YAML becomes)."""
        value = self.options.get(name)
        return None if value is None or str(value) in ("", "None") else str(value)

    @property
    def attention_backend(self) -> tuple[str, str, str] | None:
        """(where it is named, how to drop it, the name) of the attention backend given: --attention-backend,
        or the "backend" of --attention-config (0.13 on; vLLM refuses both at once, at start), on the
        command line or in its --config file; None when neither."""
        given = self.optional_text("attention-backend")
        if given is not None:
            return *self.where("attention-backend", "--attention-backend"), given
        try:
            backend = (self._json("attention-config") or {}).get("backend")
        except BadInput:  # vLLM refuses it at start, before any load
            return None
        if not isinstance(backend, str) or not backend:
            return None
        return *self.where("attention-config", "--attention-config's backend", "'s backend"), backend

    def where(self, option: str, said: str, part: str = "") -> tuple[str, str]:
        """(where `option` is given, how to drop it): `said` on the command line, or its key (and `part`
        of its value) in the --config file, or both (vLLM takes the command line's: dropping it leaves the file's)."""
        key = self.in_config.get(option)
        if key is None:
            return said, f"drop {said}"
        file = escaped(str(self.config_file))
        in_file = f"{escaped(key)}{part} from {file} (the --config file)"
        if option in self.from_config:
            return f"{file}'s {escaped(key)}{part}", f"drop {in_file}"
        return said, f"drop {said} and {in_file}"

    @property
    def tokenizer(self) -> str | None:
        value = self.options.get("tokenizer")
        return str(value) if value is not None else None

    @property
    def trust_remote_code(self) -> bool:
        return bool(self.options.get("trust-remote-code"))  # `--no-trust-remote-code` stores False

    @property
    def auto_tool_choice(self) -> bool:
        """--enable-auto-tool-choice: without it vLLM builds no tool parser (ParserManager.get_tool_parser)."""
        return bool(self.options.get("enable-auto-tool-choice"))

    @property
    def headless(self) -> bool:
        """Whether `vllm serve` runs engine cores only, no API server (its run_headless, the worker
        nodes of a multi-node launch): --headless, or --api-server-count below 1 (given, or from 0.15.0
        on its default: `-dp 0` alone), in every release 0.11.0-0.34.0; not under --grpc or --data-parallel-multi-port-external-lb, which serve
        otherwise first. The api_server module serves whatever it is given."""
        if not self.serve or self.options.get("grpc") or self.options.get("data-parallel-multi-port-external-lb"):
            return False
        count = self.options.get("api-server-count")
        if count is None and self.release is not None and Version(self.release) >= Version("0.15.0"):
            count = self._default_api_server_count()
        return bool(self.options.get("headless")) or (isinstance(count, int) and count < 1)

    def _default_api_server_count(self) -> object:
        """The API server count `vllm serve` takes when none is given (0.15.0 on): 1 under an
        external load balancer, --data-parallel-size-local (or 1) under a hybrid one, else
        --data-parallel-size, so `-dp 0` alone runs headless."""
        options = self.options
        if options.get("data-parallel-external-lb") or options.get("data-parallel-rank") is not None:
            return 1
        if self.environ.get("VLLM_RUST_FRONTEND_PATH"):  # later releases: its front end is one process
            return 1
        if options.get("data-parallel-hybrid-lb") or options.get("data-parallel-start-rank") is not None:
            return options.get("data-parallel-size-local") or 1
        return options.get("data-parallel-size", 1)

    @property
    def tensor_parallel_size(self) -> int:
        value = self.options.get("tensor-parallel-size", 1)
        try:
            return int(str(value))
        except ValueError:
            raise BadInput(f"--tensor-parallel-size '{value}' is not a whole number") from None

    def _json(self, name: str, *, optional: bool = False) -> dict[str, Any] | None:

        value = self.options.get(name)
        if value is None or isinstance(value, dict):
            return value
        parsed = load_json(str(value), f"--{name}")
        if parsed is None and optional:
            return None
        if not isinstance(parsed, dict):
            raise BadInput(f"--{name} must be a JSON object, got: {value}")
        return parsed

    def interpreter(self) -> str:
        """The Python that will run this launch (launch_python)."""
        return self.launch_python()[0]

    def python_options(self) -> list[str]:
        """The options the launch's Python runs with (its `vllm` script's #! line); [] when that
        cannot be told (interpreter() says why)."""
        try:
            return self.launch_python()[1]
        except TargetError:
            return []

    def launch_python(self) -> tuple[str, list[str]]:
        """(the Python that will run this launch, its interpreter options): the `vllm` script's
        (patchkit/launch/interpreter.py), or the `python` named; a relative path made absolute against
        the launch's working directory, as execvp finds it there. TargetError when that cannot be told."""
        path = self.environ.get("PATH")  # None (`env -i`, `env -u PATH`): execvp's default
        found = exec_search(self.program, path)
        if found is None:
            raise cannot_tell(self.program, "it is not on the launch's PATH")
        python, options = (
            (found, list(self.python_flags))
            if Path(self.program).name.startswith("python")
            else script_python(Path(found), path)
        )
        return os.path.abspath(os.path.join(self.cwd or os.getcwd(), python)), options


def parse(argv: list[str], version: Version | str | None = None) -> LaunchCommand:
    """The launch read whole, as the parser of vLLM `version` reads it (None: the newest recorded)."""
    return read(frame(argv), version)


def frame(argv: list[str], invoked: tuple[str, list[str]] | None = None) -> LaunchCommand:
    """The program, its `env` prefix and the arguments its parser will read, not read yet.
    `invoked`: the patchkit command framing it (its verb, and its words before the launch)."""
    if not argv:
        raise BadInput(
            "no launch command given",
            hint=f"give it after --: {hints.command('preflight', '--', 'vllm', 'serve', 'MODEL')}",
        )
    if re.match(_ENV_ASSIGNMENT, argv[0]):
        raise _assigned(argv, invoked)
    prefix = _EnvPrefix()
    rest = prefix.read(argv) if Path(argv[0]).name == "env" else argv
    if prefix.cwd is not None:
        prefix.cwd = _same_directory_only(prefix, argv, invoked)
    if not rest:
        raise BadInput("the launch command names no program after `env`")
    program, args = rest[0], rest[1:]
    if rest is not argv and program.startswith("-"):
        raise BadInput(
            f"env runs '{program}' as the command (it reads options only before NAME=VALUE): the launch never runs",
            hint="give env's options first: env -i NAME=VALUE vllm serve MODEL",
        )
    name = Path(program).name
    flags: list[str] = []
    xoptions: list[str] = []
    hash_pycs = ["default"]
    if name == "vllm":
        if not args or args[0] != "serve":
            raise BadInput(f"not a vLLM launch: `vllm {args[0] if args else ''}` (expected `vllm serve MODEL`)")
        arguments, serve = args[1:], True
    elif name.startswith("python"):
        flags, xoptions, args = read_python_options(args, hash_pycs)
        if args and Path(args[0]).name == "vllm":  # the console script run as a file: sys.path[0] is its directory
            raise _script_run(argv[: len(argv) - len(rest)], rest[: len(rest) - len(args)], args)
        arguments, serve = _module_arguments(name, args)
    elif name in WRAPPERS:
        raise _wrapped(argv[: len(argv) - len(rest)], rest, invoked)
    elif name in ENV_RUNNERS and _runs(rest):
        raise _env_run(argv[: len(argv) - len(rest)], rest, invoked)
    else:
        raise BadInput(f"not a vLLM launch: '{program}' (expected `vllm serve` or `python -m {API_SERVER}`)")
    return LaunchCommand(
        list(argv),
        program,
        prefix.env,
        prefix.clean,
        prefix.unset,
        prefix.cwd,
        arguments=list(arguments),
        serve=serve,
        python_flags=flags,
        xoptions=xoptions,
        hash_pycs=hash_pycs[-1],
    )


# programs that run the command after their own options (CPU or memory binding, priority, a time
# limit): the binding holds for what they exec, so they go before patchkit, whose `run` execs the launch
WRAPPERS = frozenset(
    {"numactl", "taskset", "nice", "ionice", "chrt", "nohup", "setsid", "stdbuf", "timeout", "prlimit", "cgexec"}
    | {"srun", "time", "sudo"}  # a Slurm step, /usr/bin/time, another user: each execs what follows too
)


def _wrapped(env: list[str], rest: list[str], invoked: tuple[str, list[str]] | None) -> BadInput:
    """The refusal of a launch behind a wrapper (`numactl -N 0 vllm serve M`): patchkit reads the
    launch itself; the wrapper goes before `patchkit run`, which execs the launch. The user's own
    command (`invoked`), where it is that run or that check, is named with every option it gave."""
    at = _launch_at(rest, run=False)
    if at == UNSURE:
        return _unsure(rest)
    # an `env ...` between the wrapper and vLLM stays in the launch: before patchkit, `env -i` would
    # hide patchkit itself, and its variables would reach patchkit's own Python
    at = next((i for i, word in enumerate(rest[1:at], 1) if Path(word).name == "env"), at)
    wrapper, launch = (rest[:at], rest[at:]) if at is not None else (rest, ["vllm", "serve", "MODEL"])
    run, check = _named_again(invoked, [*env, *launch])
    return BadInput(
        f"not a vLLM launch: '{rest[0]}' runs the launch, and patchkit reads only the launch itself",
        hint=f"check it with {_pasted(check)}; launch it with {rest[0]} before patchkit: {_pasted([*wrapper, *run])} "
        f"(run execs the launch, so {rest[0]}'s setting holds for vLLM)",
    )


def _assigned(argv: list[str], invoked: tuple[str, list[str]] | None) -> BadInput:
    """The refusal of `NAME=VALUE ... vllm serve M`: a shell gives the launch's environment so, but
    patchkit execs the launch itself, no shell between. The hint writes the assignments as env takes
    them, in the launch (preflight judges them there too), or before patchkit, as the shell's own (not
    a PYTHON* variable: before patchkit it would reach patchkit's own Python too)."""
    count = next((i for i, word in enumerate(argv) if not re.match(_ENV_ASSIGNMENT, word)), len(argv))
    assigned, launch = argv[:count], argv[count:] or ["vllm", "serve", "MODEL"]
    verb = 1 if invoked is not None and invoked[0] == "preflight" else 0
    inside, outside = (_named_again(invoked, words)[verb] for words in (["env", *assigned, *launch], launch))
    hint = f"write them as env takes them: {_pasted(inside)}"
    if not any(word.startswith("PYTHON") for word in assigned):
        before = " ".join(_shell_assignment(word) for word in assigned)
        hint += f", or before patchkit: `{before} {shlex.join(outside)}`"
    return BadInput(
        f"not a vLLM launch: '{argv[0]}' is a shell's variable assignment, and patchkit runs the launch with no shell",
        hint=hint,
    )


def _pasted(words: list[str]) -> str:
    return "`" + shlex.join(words) + "`"


def _shell_assignment(word: str) -> str:
    """NAME=VALUE as a shell takes it for an assignment: the value quoted, never the name (a
    quoted `NAME=` is run as a command)."""
    name, value = word.split("=", 1)
    return f"{name}={shlex.quote(value)}"


# programs whose `run` runs a command in an environment they pick, activate and may first install
# or sync (uv, pixi, hatch, pdm, poetry, pipenv: the project's; conda, mamba, micromamba: -n/-p):
# which environment, and what its activation sets, only the tool knows. Put before patchkit, it makes
# patchkit's own launch run inside that environment (its PATH finds the environment's vllm).
ENV_RUNNERS = frozenset({"uv", "conda", "mamba", "micromamba", "pixi", "poetry", "hatch", "pdm", "pipenv"})


def _runs(tool: list[str]) -> bool:
    """`TOOL [its options] run ...`: the tool's first word that is no option nor an option's value
    is `run` (`uv tool run`, uvx, installs the program it names from the index instead: no
    environment to run patchkit in). An option patchkit does not know before a `run`: still a run."""
    at = _first_word(tool, 1, _OPTIONS[Path(tool[0]).name])
    return (tool[at] if 0 < at < len(tool) else None) == "run" or (at == UNSURE and "run" in tool)


def _named_again(invoked: tuple[str, list[str]] | None, launch: list[str]) -> tuple[list[str], list[str]]:
    """The words of `patchkit run -- LAUNCH` and `patchkit preflight -- LAUNCH` as a hint names them:
    the user's own command (`invoked`: its verb, its words before the launch) where it is that one,
    every option it gave kept (a dropped --apply no longer applies after an upgrade); else with the
    selection. Each starts with the program's own word (patchkit)."""
    verb, own = invoked or ("", [])
    run, check = (
        [*own, *launch] if verb == said else hints.command_words(said, "--", *launch) for said in ("run", "preflight")
    )
    return run, check


def _env_run(env: list[str], rest: list[str], invoked: tuple[str, list[str]] | None) -> BadInput:
    """The refusal of `uv run vllm serve M` (`conda run -n ENV ...`, `hatch run ENV:vllm ...`): the
    fix runs patchkit inside the tool's environment, every word of the user's own command kept."""
    at = _launch_at(rest, run=True)
    if at == UNSURE:
        return _unsure(rest)
    tool, launch = (rest[:at], rest[at:]) if at is not None else (rest, ["vllm", "serve", "MODEL"])
    named, _, program = launch[0].rpartition(":")  # hatch run ENV:vllm: the environment named on the word
    launch = [program, *launch[1:]]
    run, check = _named_again(invoked, [*env, *launch])

    def inside(words: list[str]) -> str:  # the tool's words, then patchkit's (hatch: ENV:patchkit)
        return _pasted([*tool, f"{named}:{words[0]}" if named else words[0], *words[1:]])

    return BadInput(
        f"not a vLLM launch patchkit reads: `{rest[0]} run` runs it in an environment {rest[0]} picks and "
        "activates, which patchkit reads only from inside",
        hint=f"put `{shlex.join(tool)}` before patchkit: check with {inside(check)}, launch with "
        f"{inside(run)} (its PATH finds that environment's {Path(program).name})",
    )


# each tool's (options that take the next word as their value, options that take none), from its
# documented usage: a value may be the word `vllm` (`conda run -n vllm`, `sudo -u vllm`, `-p /e/vllm`)
def _table(valued: str, flags: str) -> tuple[frozenset[str], frozenset[str]]:
    return frozenset(valued.split()), frozenset((flags + " -h --help").split())


_CONDA = (
    "-n --name -p --prefix --cwd",
    "-v --verbose -q --quiet --dev --debug-wrapper-scripts -s --no-capture-output --live-stream --no-plugins",
)
_MICROMAMBA = (
    "-n --name -p --prefix -r --root-prefix -a --attach --cwd --label -e --env --rc-file --log-level",
    "-d --detach --clean-env -v --verbose -q --quiet --no-rc --no-env --json --offline",
)
_OPTIONS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "uv": _table(
        "--with -w --with-editable --with-requirements --extra --no-extra --group --no-group --only-group "
        "--env-file --package --python -p --directory --project --index --default-index --index-url -i "
        "--extra-index-url --find-links -f --index-strategy --keyring-provider --resolution --prerelease "
        "--fork-strategy --exclude-newer --exclude-newer-package --no-build-isolation-package --config-setting "
        "-C --config-settings-package --no-binary-package --no-build-package --link-mode --refresh-package "
        "--reinstall-package --upgrade-package -P --python-platform --cache-dir --config-file --color "
        "--allow-insecure-host --preview-features --max-recursion-depth",
        "--all-extras --no-all-extras --dev --no-dev --no-default-groups --all-groups --only-dev --editable "
        "--no-editable --inexact --exact --no-env-file --isolated --active --no-active --no-sync --locked "
        "--frozen -s --script --gui-script --all-packages --no-project --show-resolution -U --upgrade --reinstall "
        "--refresh --no-build-isolation --no-build --no-binary --no-sources --compile-bytecode --no-index "
        "--offline -n --no-cache --native-tls --no-progress --no-config --preview --no-python-downloads "
        "--managed-python --no-managed-python -q --quiet -v --verbose",
    ),
    "conda": _table(*_CONDA),
    "mamba": _table(_CONDA[0] + " " + _MICROMAMBA[0], _CONDA[1] + " " + _MICROMAMBA[1]),
    "micromamba": _table(*_MICROMAMBA),
    "pixi": _table(
        "-e --environment --manifest-path -p --platform --auth-file --concurrent-downloads --concurrent-solves "
        "--pinning-strategy --pypi-keyring-provider --tls-root-certs --color --config-file",
        "-x --executable --experimental --clean-env --skip-deps --templated -n --dry-run --frozen --locked "
        "--no-install --no-lockfile-update --revalidate --force-activate --no-completions --as-is "
        "--run-post-link-scripts --tls-no-verify --use-environment-activation-cache --no-config --no-progress "
        "-v --verbose -q --quiet",
    ),
    "poetry": _table(
        "-C --directory -P --project",
        "-q --quiet -v -vv -vvv --verbose -n --no-interaction --ansi --no-ansi --no-plugins --no-cache",
    ),
    "hatch": _table(
        "-e --env -p --project --data-dir --cache-dir --config",
        "-v --verbose -q --quiet --color --no-color --interactive --no-interactive",
    ),
    "pdm": _table(
        "-c --config -p --project --venv",
        "-g --global -l --list -j --json -s --site-packages --recreate -v --verbose -q --quiet --no-cache "
        "-I --ignore-python",
    ),
    "pipenv": _table(
        "--python --pypi-mirror",
        "--where --venv --py --envs --rm --bare --man --support --site-packages --clear --system -q --quiet "
        "-v --verbose",
    ),
    "sudo": _table(
        "-u --user -g --group -p --prompt -C --close-from -D --chdir -R --chroot -r --role -t --type "
        "-T --command-timeout -U --other-user",
        "-A --askpass -B --bell -b --background -E --preserve-env -H --set-home -i --login -k --reset-timestamp "
        "-n --non-interactive -P --preserve-groups -S --stdin -s --shell",
    ),
    "srun": _table(
        "-A --account -b --begin -c --cpus-per-task -d --dependency -D --chdir -e --error -i --input -J "
        "--job-name -L --licenses -m --distribution -M --clusters -n --ntasks -N --nodes -o --output -p "
        "--partition -q --qos -r --relative -S --core-spec -t --time -T --threads -w --nodelist -x --exclude "
        "-W --wait -G --gpus -C --constraint --mem --mem-per-cpu --mem-per-gpu --gpus-per-node --gpus-per-task "
        "--gpus-per-socket --cpus-per-gpu --ntasks-per-node --ntasks-per-gpu --cpu-bind --mpi --export "
        "--reservation --comment --container --container-image --container-mounts --container-workdir "
        "--container-name --gres --gres-flags --time-min --signal --het-group --jobid --network --nodefile "
        "--mem-bind --hint --tres-per-task --segment",
        "--overlap --exclusive -l --label -u --unbuffered -v --verbose -Q --quiet -K --kill-on-bad-exit -X "
        "--disable-status -E --preserve-env -O --overcommit -Z --no-allocate -k --no-kill --pty --mpi-none",
    ),
    "time": _table("-o --output -f --format", "-a --append -p --portability -v --verbose -q --quiet"),
    "timeout": _table("-s --signal -k --kill-after", "--preserve-status --foreground -v --verbose"),
    "cgexec": _table("-g", "--sticky"),
}


UNSURE = -1  # where a tool's own words end cannot be told: an option patchkit does not know


def _launch_at(rest: list[str], *, run: bool) -> int | None:
    """Where the launch's program is in `rest` (a wrapper, or a tool's `run`, with their own words):
    past each option and its value, after `run` where `run`; None where no launch program is named,
    UNSURE where the tool's words could end in more than one place."""
    options = _OPTIONS.get(Path(rest[0]).name, (frozenset(), frozenset()))
    at = _first_word(rest, 1, options)
    if run and at != UNSURE:  # TOOL [its options] run [its options] [--] PROGRAM
        at = _first_word(rest, at + 1, options)
    if at == UNSURE:
        return UNSURE
    found = next((i for i, w in enumerate(rest[at:], at) if _launch_program(w.rpartition(":")[2] if run else w)), None)
    # the tool runs its first word after its options (`uv run --foo x vllm`: x, or --foo's value)
    return UNSURE if run and found not in (None, at) else found


def _first_word(words: list[str], start: int, options: tuple[frozenset[str], frozenset[str]]) -> int:
    """The index of the first word from `start` that is no option nor an option's value (the word
    after a `--`); UNSURE where an option patchkit does not know stands before a launch's program
    (its value, or the program: only the tool can tell)."""
    valued, flags = options
    at = start
    while at < len(words) and words[at].startswith("-") and words[at] != "-":
        word = words[at]
        if word == "--":
            return at + 1
        if word.startswith("--"):
            takes, known = (
                word not in flags and "=" not in word and word in valued,
                "=" in word or word in valued | flags,
            )
        else:  # a cluster of short options: -qv, -nvllm (its value joined), -n vllm
            takes, known = _short(word, valued, flags)
        if not known and at + 1 < len(words) and _launch_program(words[at + 1].rpartition(":")[2]):
            return UNSURE
        at += 2 if takes else 1
    return at


def _short(word: str, valued: frozenset[str], flags: frozenset[str]) -> tuple[bool, bool]:
    """(takes the next word as its value, known) of a short-option cluster."""
    if word in valued or word in flags:
        return word in valued, True
    for at, letter in enumerate(word[1:], 1):
        if f"-{letter}" in valued:
            return at == len(word) - 1, True
        if f"-{letter}" not in flags:
            return False, False
    return False, True


def _unsure(rest: list[str]) -> BadInput:
    """The refusal of a launch behind a tool whose own words patchkit cannot tell from the launch's."""
    return BadInput(
        f"not a vLLM launch patchkit reads: {rest[0]} runs it, and patchkit cannot tell where {rest[0]}'s own "
        "words end (an option it does not know stands before the program)",
        hint=f"put {rest[0]} and its own words before patchkit, and the vLLM launch alone after "
        f"{hints.command('preflight', '--')} (to check it) or {hints.command('run', '--')} (to launch it)",
    )


def _script_run(env: list[str], python: list[str], args: list[str]) -> BadInput:
    """The refusal of `python [options] /venv/bin/vllm serve M`: the script run as a file is not read
    (its directory leads sys.path, not the working directory); the two launches patchkit reads that
    run the same code."""
    return BadInput(
        f"not a vLLM launch patchkit reads: `{shlex.join([*python, args[0]])}` runs the vllm script as a file",
        hint=f"give the script alone (`{shlex.join([*env, *args])}`: it runs with the Python its #! line names), "
        f"or `{shlex.join([*env, *python, '-m', CLI, *args[1:]])}`",
    )


def _launch_program(word: str) -> bool:
    return Path(word).name == "vllm" or Path(word).name.startswith("python")


def _module_arguments(python: str, args: list[str]) -> tuple[list[str], bool]:
    """`-m MODULE ...` after a python's own flags: the arguments vLLM's parser reads, and whether it
    is `vllm serve`'s (the CLI module's `serve`) or the api_server's."""
    if len(args) >= 3 and args[:2] == ["-m", CLI] and args[2] == "serve":
        return args[3:], True
    if len(args) >= 2 and args[:2] == ["-m", CLI]:
        raise BadInput(f"not a vLLM launch: `{python} -m {CLI} {args[2] if len(args) > 2 else ''}` (expected serve)")
    if len(args) < 2 or args[0] != "-m" or args[1] != API_SERVER:
        raise BadInput(
            f"not a vLLM launch: expected `{python} -m {API_SERVER} --model MODEL` or `{python} -m {CLI} serve MODEL`"
        )
    return args[2:], False


def read(command: LaunchCommand, version: Version | str | None = None) -> LaunchCommand:
    """`command` with its options and model as the parser of vLLM `version` reads them."""

    spec = spec_for(version)
    reading = read_arguments(command.arguments, serve=command.serve, spec=spec)
    if reading.model is None:
        raise _no_model(reading.options.get("served-model-name"), command.serve, reading.options.get("model-tag"))
    _validate_parsed(reading.options)
    if command.serve:
        _headless_count(reading.options, spec.release)
    read = dataclasses.replace(
        command,
        options=reading.options,
        model=reading.model,
        notes=list(reading.notes),
        release=spec.release,
        exact=spec.exact,
        unread=list(reading.unread),
        config_ignored=reading.config_ignored,
        config_file=reading.config_file,
        in_config=reading.in_config,
        from_config=reading.from_config,
    )
    _ = read.speculative_config, read.hf_overrides, read.tensor_parallel_size  # each read now: exit 2
    return read


# validate_parsed_serve_args (vllm/entrypoints/openai/cli_args.py, the same from 0.11 on): an option
# that needs another, refused right after parsing, before any load
_NEEDS = (("enable-auto-tool-choice", "tool-call-parser"), ("enable-log-outputs", "enable-log-requests"))


def _validate_parsed(options: dict[str, object]) -> None:
    for given, needed in _NEEDS:
        if options.get(given) and not options.get(needed):
            raise BadInput(
                f"vLLM refuses the command right after parsing it: --{given} requires --{needed}",
                hint=f"give --{needed}, or drop --{given}",
            )


def _headless_count(options: dict[str, object], release: str) -> None:
    """`vllm serve --headless --api-server-count N`: refused as it starts, before any load (N > 0
    from 0.15.0 on, where the count defaults to None; N > 1 before, in run_headless)."""
    count = options.get("api-server-count")
    if not options.get("headless") or options.get("grpc") or not isinstance(count, int):
        return
    most = 0 if Version(release) >= Version("0.15.0") else 1
    if count > most:
        raise BadInput(
            f"vLLM refuses --headless with --api-server-count {count} as it starts: a headless node runs no API server",
            hint="drop --api-server-count on the headless node (or --headless, to serve the API there)",
        )


def _no_model(served: object, serve: bool, positional: object) -> BadInput:
    """No MODEL read: said with what --served-model-name took (each word up to the next option: the
    model meant, often), as vLLM then serves its default model under those names. The api_server
    takes its model only as --model: a positional one it ignores."""
    names = [n for n in (served if isinstance(served, list) else [served]) if n is not None]
    fix = "give MODEL first: vllm serve MODEL" if serve else f"give it as --model: python -m {API_SERVER} --model MODEL"
    if positional is not None and not serve:
        return BadInput(
            f"the launch command names no model: the api_server ignores the positional '{positional}' "
            "(it reads the model only from --model) and would serve its default model",
            hint=f"give it as --model: python -m {API_SERVER} --model {positional}",
        )
    if not names:
        return BadInput(
            "the launch command names no model ("
            + ("positional MODEL or --model" if serve else "--model MODEL")
            + "): vLLM would serve its default model (Qwen/Qwen3-0.6B in 0.16.0), not one you chose",
            hint=fix,
        )
    return BadInput(
        f"the launch command names no model: --served-model-name took {' '.join(map(str, names))} as served "
        "names (every word up to the next option), and vLLM would serve its default model",
        hint=f"{fix} --served-model-name NAME",
    )


def _spells(token: str, option: str) -> bool:
    return token == option or token.startswith((f"{option}=", f"{option}."))


@dataclass(eq=False, repr=False)
class _EnvPrefix(Value):
    """`env [OPTION]... [NAME=VALUE]... COMMAND`, read as GNU env reads it: options (-i, -, -u NAME,
    -C DIR, -v, clustered or long) up to the first other argument, then the assignments."""

    env: dict[str, str] = field(default_factory=dict)
    clean: bool = False
    unset: list[str] = field(default_factory=list)
    cwd: str | None = None
    cwd_at: tuple[int, str] = (0, "")  # the word -C's directory is on, and what of it goes before it

    def read(self, argv: list[str]) -> list[str]:
        """The command after the prefix."""
        index = 1
        while index < len(argv) and argv[index].startswith("-") and argv[index] != "-":
            if argv[index] == "--":
                index += 1
                break
            index = self._option(argv, index)
        if index < len(argv) and argv[index] == "-":  # a lone `-` after the options: -i
            self.clean = True
            index += 1
        while index < len(argv) and re.compile(_ENV_ASSIGNMENT).match(argv[index]):
            key, value = argv[index].split("=", 1)
            self.env[key] = value
            index += 1
        return argv[index:]

    def _option(self, argv: list[str], index: int) -> int:
        """The options of argv[index] applied; the index of the next argument."""
        arg = argv[index]
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            matches = [long for long in _ENV_LONG if long.startswith(name)]
            if len(matches) != 1 or _ENV_LONG[matches[0]] is None:
                raise _env_refused(matches[0] if len(matches) == 1 else name, known=len(matches) == 1)
            short = _ENV_LONG[matches[0]] or ""
            if short in ("-u", "-C") and not eq:
                return self._with_value(short, argv, index + 1)
            self._apply(short, value, (index, f"{name}="))
            return index + 1
        for position, letter in enumerate(arg[1:], start=1):
            if letter in "uC":
                rest = arg[position + 1 :]
                if rest:
                    self._apply(f"-{letter}", rest, (index, arg[: position + 1]))
                    return index + 1
                return self._with_value(f"-{letter}", argv, index + 1)
            if letter not in "iv":
                raise _env_refused(f"-{letter}", known=letter in "0S")
            self._apply(f"-{letter}", "")
        return index + 1

    def _with_value(self, option: str, argv: list[str], index: int) -> int:
        if index == len(argv):
            raise BadInput(f"env's {option} needs a value: env refuses the command")
        self._apply(option, argv[index], (index, ""))
        return index + 1

    def _apply(self, option: str, value: str, at: tuple[int, str] = (0, "")) -> None:
        if option == "-i":
            self.clean = True
        elif option == "-u":
            self.unset.append(value)
            self.env.pop(value, None)
        elif option == "-C":
            self.cwd, self.cwd_at = value, at  # env chdirs to the last one


def _same_directory_only(prefix: _EnvPrefix, argv: list[str], invoked: tuple[str, list[str]] | None) -> str:
    """`env -C DIR`: read only when DIR is patchkit's own working directory, from which the launch's
    relative paths (its model, --config, the program) are read. Else refused, the hint the user's
    own command run from DIR: its verb and options, the launch whole with DIR made absolute."""
    directory = prefix.cwd or ""
    cannot = _no_directory(directory)
    if cannot is not None:
        raise BadInput(
            f"env -C {shlex.quote(escaped(directory))}: env cannot change directory to it{cannot}: env refuses "
            "the launch, which never runs",
            hint="give env -C a directory that exists and the launch may enter (or make it), then run the command again",
        )
    try:
        if os.path.samefile(directory, os.curdir):
            return os.getcwd()
    except OSError:
        pass
    where = os.path.abspath(directory)  # a relative DIR, followed from DIR, would name DIR/DIR
    launch = list(argv)
    at, before = prefix.cwd_at
    launch[at] = before + where
    verb, before_verb, flags = _own_flags(invoked)
    # from there, the user's relative --target, --patches... would name other paths: made absolute too
    words = hints.command_words(verb, *flags, "--", *launch, chosen=hints.from_anywhere())
    again = shlex.join([words[0], *before_verb, *words[1:]])
    raise BadInput(
        f"env -C {directory}: the launch runs in {directory}, and patchkit reads its relative paths from "
        "its own working directory",
        hint=f"run patchkit from there, with -C made absolute: cd {shlex.quote(where)} && {again}",
    )


def _no_directory(directory: str) -> str | None:
    """Why env's chdir to `directory` fails, as chdir(2) says it (where from, for a relative one);
    None when it succeeds."""
    try:
        mode = os.stat(directory).st_mode
        why = None if stat.S_ISDIR(mode) else errno.ENOTDIR
        why = why or (None if os.access(directory, os.X_OK) else errno.EACCES)
    except OSError as exc:
        why = exc.errno or errno.ENOENT
    if why is None:
        return None
    try:
        where = "" if os.path.isabs(directory) else f" from {escaped(os.getcwd())}"
    except OSError:  # patchkit's own directory is gone: a relative one is found from nowhere
        where = ""
    return f"{where} ({os.strerror(why).lower()})"


# patchkit's own options that name no path: kept as given in a hint run from another directory
_OWN_FLAGS = ("--no-import", "--apply", "--no-preflight", "--quiet", "--verbose")


def _own_flags(invoked: tuple[str, list[str]] | None) -> tuple[str, list[str], list[str]]:
    """The user's patchkit command (`invoked`): its verb, the -q/-v before it, and its own options
    after it that name no path (its selection's paths are made absolute by hints.from_anywhere)."""
    verb, words = invoked or ("preflight", ["patchkit", "preflight"])
    at = words.index(verb) if verb in words else len(words)
    flags: list[str] = []
    given = words[at + 1 :]
    for index, word in enumerate(given):
        if word in _OWN_FLAGS or re.fullmatch("-[qv]+", word) or word.startswith("--format="):
            flags.append(word)
        elif word == "--format" and index + 1 < len(given):
            flags += [word, given[index + 1]]
    return verb, words[1:at], flags


def _env_refused(option: str, *, known: bool) -> BadInput:
    if not known:
        return BadInput(
            f"env refuses the option {option} (GNU env: invalid or ambiguous option): the launch never runs"
        )
    return BadInput(
        f"patchkit does not read env's {option} option",
        hint="write the launch without it: env [-i] [-u NAME] [NAME=VALUE ...] COMMAND",
    )
