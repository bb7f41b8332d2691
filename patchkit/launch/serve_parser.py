"""A launch's arguments read as the installed vLLM's own parser reads them, without importing vLLM.

Two halves, as in vLLM: FlexibleArgumentParser's rewrite of the arguments (`vllm serve`'s `--model`
moved to the positional place, `--config FILE.yaml` spliced in, underscores as dashes in a name,
`-O3`, the dotted `--name.key VALUE` objects passed last as JSON), then argparse itself, built from
the recorded spec of that release's parser (patchkit/launch/specs/: each option's strings, nargs and
kind, written by `python -m patchkit.maintainer.serve_spec` from vLLM's real parser). argparse then
applies its own rules: prefix matching and its ambiguity error, the last of a repeated option,
options that take no value, `--opt=value`, `--`, negative numbers, and (a spec that records them)
each value's type and choices as vLLM's (patchkit/launch/argtypes.py).

For a release with a recorded spec (a build judged by its release: 0.16.0+cu129 is 0.16.0), what
its parser refuses (an ambiguous prefix, an unknown option, a missing value) is BadInput, as vLLM
refuses it. Another release is read with the nearest recorded spec; what that spec does not know is
kept in Reading.unread, for the preflight to say it cannot judge the command.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
from collections.abc import Collection, Sequence
from dataclasses import field
from functools import cache
from pathlib import Path
from typing import Any, NoReturn

from packaging.version import Version

from patchkit.base.errors import BadInput
from patchkit.base.values import FrozenValue, Shown, frozen
from patchkit.launch import argtypes
from patchkit.launch.values import closest, load_json, load_yaml_config, within_limits
from patchkit.tree.version import release_version

SPECS = Path(__file__).with_name("specs")
MAX_ARGUMENTS = 8192  # what argparse reads of one launch (the command with its --config file's)
MAX_OPTIONS = 1024  # of those, the ones that look like options ("-..."): argparse is quadratic in them
_NAME = re.compile(r"(?<=--)[^.]*")  # vLLM's: everything between the first `--` and the first `.`


@frozen
class Reading(FrozenValue):
    """The launch's arguments as a release's parser reads them."""

    options: dict[str, object]  # dest, dashed (`speculative-config`) -> value, for the options given
    model: str | None
    notes: tuple[str, ...]  # what vLLM reads otherwise than it was written
    unread: tuple[str, ...] = ()  # arguments the (lenient) spec does not know: its release may read them
    config_ignored: str | None = None  # `--config=FILE`: vLLM reads nothing of it (ignored_config's words)
    config_file: str | None = None  # `--config FILE`, as given
    in_config: dict[str, str] = field(default_factory=dict)  # option (dashed) -> its key in that file, as written
    from_config: tuple[str, ...] = ()  # those of them the command line does not give (the file's value), sorted


@frozen
class Spec(Shown):
    """A release's recorded parser: which release, and whether it is the installed one's own."""

    release: str
    serve: tuple[dict[str, Any], ...]
    api_server: tuple[dict[str, Any], ...]
    exact: bool  # recorded for this very release: what it refuses is refused


def recorded_releases() -> list[Version]:
    return sorted(Version(p.stem.removeprefix("serve-")) for p in SPECS.glob("serve-*.json"))


def spec_for(version: Version | str | None) -> Spec:
    """The recorded spec of `version`'s parser; else the nearest older one (the oldest for an older
    release, the newest for none), read leniently."""
    releases = recorded_releases()
    try:
        wanted = release_version(Version(str(version))) if version is not None else None
    except ValueError:
        wanted = None
    if wanted is not None and wanted in releases:  # 0.16 and 0.16.0.0 are 0.16.0: its file's name
        return _load_spec(str(releases[releases.index(wanted)]), exact=True)
    older = [r for r in releases if wanted is not None and r <= wanted]
    chosen = older[-1] if older else (releases[0] if wanted is not None else releases[-1])
    return _load_spec(str(chosen), exact=False)


@cache
def _load_spec(release: str, *, exact: bool) -> Spec:
    data = json.loads((SPECS / f"serve-{release}.json").read_text(encoding="utf-8"))
    return Spec(release, tuple(data["serve"]), tuple(data["api_server"]), exact)


def read(arguments: list[str], *, serve: bool, spec: Spec) -> Reading:
    """The options and model vLLM reads from `arguments` (what follows `vllm serve` or the module)."""
    release = Version(spec.release)
    args = _model_to_front(arguments, release) if serve else list(arguments)
    ignored = next((a for a in args if a.startswith("--config=")), None)
    args = [a for a in args if a != ignored]  # vLLM serves without the file's options
    config_file, config, rest = None, list[tuple[str, list[str]]](), list[str]()
    if "--config" in args:
        args, config_file, config, rest = _with_config_file(args, serve, _negations(spec.release, serve))
    if serve and release >= Version("0.17.0"):
        _positional_model_with_served_name(args)
    plain, dotted = _dotted_objects(_renamed(args, release))
    parser = _parser(spec.release, serve, values=spec.exact)
    parsed = _bounded(plain + [a for key, value in dotted.items() for a in (key, json.dumps(value))])
    both, unread = _parsed(parser, parsed, spec, typed=args)
    given = _given_plainly(parser, plain, spec) if dotted else {}
    notes = tuple(
        f"{_option(dest)} is given as JSON and key by key: vLLM keeps only the key-by-key object "
        f"{_shown(both[dest])} and drops the JSON"
        for dest in sorted(both)
        if dest in given and given[dest] != both[dest]
    )
    options = {dest.replace("_", "-"): value for dest, value in both.items()}
    model = options.pop("model-tag", None) if serve else None
    found = model if model is not None else options.get("model")
    if found is None and ignored is not None:  # the file was to name the model: no launch without it
        message, fix = ignored_config(ignored)
        raise BadInput(message, hint=fix)
    in_config = {dest: key for key, words in config for dest in _given(parser, words, release)}
    from_config = set(in_config) - _given(parser, rest, release) if in_config else set()  # the command line wins
    model = None if found is None else str(found)
    return Reading(options, model, notes, tuple(unread), ignored, config_file, in_config, tuple(sorted(from_config)))


def _given(parser: argparse.ArgumentParser, args: list[str], release: Version) -> set[str]:
    """The options (dashed) `args` give (a part of the launch's arguments, read whole already)."""
    if not args:
        return set()
    plain, dotted = _dotted_objects(_renamed(args, release))
    try:
        namespace, _ = parser.parse_known_args(plain + [a for k, v in dotted.items() for a in (k, json.dumps(v))])
    except BadInput:  # a part alone is hardly refused where the whole was not; then nothing is claimed
        return set()
    return {dest.replace("_", "-") for dest in vars(namespace)}


def _bounded(args: list[str]) -> list[str]:
    """The arguments argparse is given, within patchkit's limits: its loop over the options is
    quadratic in their number (10,000 took 9 s), and no launch needs a thousand."""
    options = sum(arg.startswith("-") for arg in args)
    if len(args) > MAX_ARGUMENTS or options > MAX_OPTIONS:
        raise BadInput(
            f"the command has {len(args):,} arguments, {options:,} of them options (with its --config file's): "
            f"patchkit reads at most {MAX_ARGUMENTS:,} arguments and {MAX_OPTIONS:,} options",
            hint="give each option once",
        )
    return args


def _given_plainly(parser: argparse.ArgumentParser, plain: list[str], spec: Spec) -> dict[str, object]:
    """The options as read without the dotted objects: what those replace ({} when the command
    reads only with them)."""
    try:
        return _parsed(parser, plain, spec)[0]
    except BadInput:
        return {}


def _shown(value: object) -> str:
    """A value as text for a message: JSON with its characters as they are (the UI escapes what it
    must, an undecodable byte as \\xff), not \\u escapes."""
    try:
        return json.dumps(json.loads(value) if isinstance(value, str) else value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return str(value)


def _option(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _model_to_front(arguments: list[str], release: Version) -> list[str]:
    """`vllm serve`: the first `--model` (or `--model=`, from 0.17.0 with a value) becomes the
    positional MODEL; 0.11.0 refuses a `--model`."""
    if release < Version("0.11.1"):
        if "--model" in arguments:
            raise BadInput(f"vLLM {release} refuses `--model` with `vllm serve`: give the model as MODEL")
        return list(arguments)
    for index, arg in enumerate(arguments):
        if arg == "--model":
            if index + 1 == len(arguments):
                raise BadInput("--model needs a value")
            return [arguments[index + 1], *arguments[:index], *arguments[index + 2 :]]
        if arg.startswith("--model=") and (arg != "--model=" or release < Version("0.17.0")):
            return [arg.removeprefix("--model="), *arguments[:index], *arguments[index + 1 :]]
    return list(arguments)


def _positional_model_with_served_name(args: list[str]) -> None:
    """0.17.0 refuses `--served-model-name` when MODEL is not the first argument (and no --config)."""
    if (
        args
        and args[0].startswith("-")
        and not any(re.match(r"^--config(=.+|$)", a) for a in args)
        and any(re.match(r"^--served[-_]model[-_]name(=.+|$)", a) for a in args)
    ):
        raise BadInput("vLLM refuses `--served-model-name` unless MODEL is the first argument of `vllm serve`")


def _negations(release: str, serve: bool) -> frozenset[str]:
    """The `--no-KEY` strings a config file's `KEY: false` becomes (from 0.28.0; before, nothing)."""
    if Version(release) < Version("0.28.0"):
        return frozenset()
    return frozenset(s for s in _parser(release, serve)._option_string_actions if s.startswith("--no-"))


def ignored_config(given: str) -> tuple[str, str]:
    """(message, fix) for `--config=FILE`: vLLM reads a config file only as `--config FILE`; it logs
    that it cannot read "--config=FILE" and serves without the file's options (and model)."""
    return (
        f"vLLM ignores {given}: it reads a config file only as `--config FILE`, and would serve without its options",
        f"write --config {given.partition('=')[2]}",
    )


def _with_config_file(
    args: list[str], serve: bool, negations: frozenset[str]
) -> tuple[list[str], str, list[tuple[str, list[str]]], list[str]]:
    """`--config FILE.yaml`: its keys spliced in where vLLM puts them (after `vllm serve`'s
    positional MODEL, before the rest, which wins); (the arguments, FILE, the file's keys with the
    words each becomes, the rest)."""
    if args.count("--config") > 1:
        raise BadInput("--config is given more than once (vLLM takes one config file)")
    index = args.index("--config")
    if index == len(args) - 1:
        raise BadInput("--config names no file")
    keys = _config_file_args(args[index + 1], negations)
    config = [word for _, words in keys for word in words]
    rest = args[:index] + args[index + 2 :]
    if not serve:
        spliced = config + rest if args[0].startswith("-") else rest[:1] + config + rest[1:]
        return spliced, args[index + 1], keys, rest
    model_in_cli = bool(args) and not args[0].startswith("-")
    if not model_in_cli and "--model" not in config:
        raise BadInput("the launch command names no model (positional MODEL, or `model` in the config file)")
    return (rest[:1] + config + rest[1:] if model_in_cli else config + rest), args[index + 1], keys, rest


def _config_file_args(path: str, negations: frozenset[str]) -> list[tuple[str, list[str]]]:
    """The options of a YAML config file as vLLM's load_config_file makes them: each key with its words."""
    if path.rsplit(".", 1)[-1] not in ("yaml", "yml"):
        raise BadInput(f"--config {path}: vLLM reads only a .yaml or .yml config file")
    data = load_yaml_config(path)
    keys: list[tuple[str, list[str]]] = []
    for key, value in data.items():
        if isinstance(value, bool):
            args = [f"--{key}"] if value else [f"--no-{key}"] if f"--no-{key}" in negations else []
        elif isinstance(value, list):
            args = [f"--{key}", *map(str, value)] if value else []
        elif isinstance(value, dict):
            args = [f"--{key}", _as_json(value, f"--config {path}: {key}")]
        else:
            args = [f"--{key}", str(value)]
        keys.append((str(key), args))
    return keys


def _as_json(value: dict[str, Any], what: str) -> str:
    """A config file's object as the JSON vLLM makes of it; what json.dumps cannot write (a YAML date,
    !!binary or !!set) is refused, as vLLM's json.dumps fails on it."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise BadInput(f"{what}: vLLM cannot pass it on as JSON: {exc}") from None


def _renamed(args: list[str], release: Version) -> list[str]:
    """Underscores as dashes in a `--name` (up to its first dot); `-O3`, `-O=3` and `-O 3` as the
    release spells its optimization level (`-O.level`, `-O.mode`, `--optimization-level`); 0.12's
    `-O.key` as `-cc.key`."""
    dotted_o = release < Version("0.13.0")  # `-O.key` is not `-O` + a level
    renamed: list[str] = []
    for index, arg in enumerate(args):
        if arg.startswith("--help="):
            renamed.append("--help")
        elif arg.startswith("--"):
            key, eq, value = arg.partition("=")
            renamed.append(_NAME.sub(lambda m: m.group(0).replace("_", "-"), key, count=1) + eq + value)
        elif arg.startswith("-O") and arg != "-O" and not (dotted_o and arg[2] == "."):
            renamed += _level(release, arg[3:] if arg[2] == "=" else arg[2:])
        elif arg == "-O" and index + 1 < len(args) and args[index + 1] in {"0", "1", "2", "3"}:
            renamed += _level(release, None)
        elif arg.startswith("-O.") and Version("0.12.0") <= release < Version("0.13.0"):
            renamed.append(arg.replace("-O", "-cc", 1))
        else:
            renamed.append(arg)
    return renamed


def _level(release: Version, value: str | None) -> list[str]:
    """An `-O` level as the release rewrites it (`value` None: it is the next argument)."""
    if release >= Version("0.12.0"):
        return ["--optimization-level"] if value is None else ["--optimization-level", value]
    key = "-O.level" if release < Version("0.11.1") else "-O.mode"
    return [key] if value is None else [f"{key}={value}"]


def _dotted_objects(args: list[str]) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """`--name.key VALUE` (the next token, whatever it is) and `--name.key=VALUE` taken out and
    merged into one object per name, as vLLM does (it passes them after every other argument)."""
    kept: list[str] = []
    objects: dict[str, dict[str, Any]] = {}
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if not arg.startswith("-") or "." not in arg:
            kept.append(arg)
            continue
        if "=" in arg:
            arg, value = arg.split("=", 1)
            if "." not in arg:  # the dot was in the value
                kept.append(f"{arg}={value}")
                continue
        else:
            if index == len(args):
                raise BadInput(f"{arg} needs a value")
            value = args[index]
            index += 1
        if arg.endswith("+"):
            arg, value = arg[:-1], json.dumps(value.split(","))
        key, *keys = arg.split(".")
        parsed: Any = load_json(value, arg, strict=False)
        for part in reversed(keys):
            parsed = {part: parsed}
        # its keys nest the value too: bounded before anything recursive (the merge, json.dumps) sees it
        _merge(objects.setdefault(key, {}), within_limits(parsed, arg[:80]))
    return kept, objects


def _merge(original: dict[str, Any], update: dict[str, Any]) -> None:
    """vLLM's merge of key-by-key values: objects key by key, lists appended, anything else replaced."""
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(original.get(key), dict):
            _merge(original[key], value)
        elif isinstance(value, list) and isinstance(original.get(key), list):
            original[key] += value
        else:
            original[key] = value


class _Refused(argparse.ArgumentParser):
    """argparse whose refusals are BadInput (never an exit, never a print)."""

    def error(self, message: str) -> NoReturn:
        said, _, hint = message.partition(argtypes.HINT)
        raise BadInput(f"vLLM's `{self.prog}` parser refuses the command: {said}", hint=hint or None)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise BadInput(f"vLLM's `{self.prog}` parser refuses the command: {message or status}")

    def _get_formatter(self) -> argparse.HelpFormatter:
        """argparse makes one for each option added, only to check its metavar against its nargs
        (~200 options): nothing is printed, so none of a HelpFormatter's state is made."""
        return _NargsCheck()


class _NargsCheck(argparse.HelpFormatter):
    """The formatter argparse asks, as each option is added, whether its metavar fits its nargs
    (_format_args, which reads no state): making a whole HelpFormatter each time was ~1.5 ms of
    `run`'s fast path. It formats no help: _Refused never prints."""

    def __init__(self) -> None:
        pass


class _NoValue(argparse.Action):
    """An option that takes no value (store_true, store_false, store_const, count, help, version, and
    both forms of BooleanOptionalAction): what it stores, as vLLM's would."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str,
        *,
        kind: str,
        const: object = None,
        negative: Collection[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(option_strings, dest, nargs=0, const=const, **kwargs)
        self.kind = kind
        self.negative = negative  # the strings that store False (0.33.0's --disable-x too); None: `--no-`

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        if self.kind in ("help", "version"):
            raise BadInput(f"{option_string}: vLLM prints its {self.kind} and serves nothing")
        if self.kind == "boolean_optional" and self.negative is not None:
            value: object = option_string not in self.negative
        elif self.kind == "boolean_optional":
            value = not (option_string or "").startswith("--no-")
        elif self.kind == "count":
            value = (getattr(namespace, self.dest, 0) or 0) + 1
        elif self.kind in ("store_true", "store_false"):
            value = self.kind == "store_true"
        else:
            value = True if self.const is None else self.const
        setattr(namespace, self.dest, value)


@cache
def _parser(release: str, serve: bool, *, values: bool = True) -> argparse.ArgumentParser:
    """argparse as the release's parser: its options, and (`values`) what it holds their values to,
    its types and choices (patchkit/launch/argtypes.py). A lenient reading (another release) holds
    only int, float and JSON: the release read may take values its older spec does not."""
    spec = _load_spec(release, exact=True)
    version = Version(release)
    prog = "vllm serve" if serve else "api_server"
    parser = _Refused(prog=prog, add_help=False, allow_abbrev=True, argument_default=argparse.SUPPRESS)
    for action in spec.serve if serve else spec.api_server:
        kind, options, dest = action["kind"], action["options"], action["dest"]
        if not options:
            parser.add_argument(dest, nargs=action["nargs"])
        elif action["nargs"] == 0:
            no_value = {"kind": kind, "const": action.get("const"), "negative": action.get("negative")}
            parser.add_argument(*options, dest=dest, action=_NoValue, **no_value)
        elif values and action.get("action") == "lora_modules":
            rules = {"fields": action["lora_fields"], "needed": action["lora_required"], "release": version}
            convert = argtypes.converter(action, version)
            parser.add_argument(
                *options, dest=dest, action=argtypes.LoraModules, nargs=action["nargs"], type=convert, **rules
            )
        else:
            stored = kind if kind in ("append", "extend") else "store"
            choices = action.get("choices") if values else None
            convert = argtypes.converter(action, version, all_kinds=values)
            parser.add_argument(
                *options, dest=dest, action=stored, nargs=action["nargs"], type=convert, choices=choices
            )
    return parser


def _parsed(
    parser: argparse.ArgumentParser, args: list[str], spec: Spec, typed: list[str] | None = None
) -> tuple[dict[str, object], list[str]]:
    """The options read, and (a lenient spec) the arguments it does not know. The exact spec
    refuses those, as vLLM does, naming the words as `typed` (before the rewrite), not as rewritten."""
    namespace, unread = parser.parse_known_args(args)
    if spec.exact and unread:
        words = _as_typed(unread, typed or args, Version(spec.release))
        joined = next((w for w in words if w.startswith("-") and " " in w), None)
        raise BadInput(
            f"vLLM's `{parser.prog}` parser refuses the command: unrecognized arguments: "
            + " ".join(map(shlex.quote, words)),
            hint=_one_word_hint(joined) if joined else _after_dashes(args, parser) or _spelling_hint(words, parser),
        )
    return dict(vars(namespace)), unread


def _as_typed(unread: list[str], typed: list[str], release: Version) -> list[str]:
    """The words of `typed` that the rewritten arguments argparse did not know came from (as
    typed, not `--speculative-config {"method":...` cut at a dot and joined to the next word)."""
    renamed = {arg: _renamed([arg], release) for arg in typed}
    words: list[str] = []
    for word in unread:
        exact = [arg for arg, new in renamed.items() if new == [word]]
        dotted = [arg for arg, new in renamed.items() if word.startswith("-") and new[0].startswith(word + ".")]
        for arg in exact[:1] or dotted or ([] if _a_dotted_value(word, unread) else [word]):
            words += [] if arg in words else [arg]
    return words


def _a_dotted_value(word: str, unread: list[str]) -> bool:
    """`word` is the JSON a dotted option's keys were merged into, after that option (said by it)."""
    at = unread.index(word)
    return at > 0 and unread[at - 1].startswith("-") and word.startswith("{")


def _spelling_hint(words: list[str], parser: argparse.ArgumentParser) -> str:
    """The fix of an option the release does not know: the option it most looks like (a typo),
    else where its options are listed."""
    options = [option for option in parser._option_string_actions if option.startswith("--")]
    for word in words:
        typed = word.split("=", 1)[0]
        close = closest(typed, options, cutoff=0.8) if typed.startswith("--") else None
        if close:
            return f"did you mean {close}? spell it so in the launch, then run it again"
    return "remove it, or check its spelling: `vllm serve --help` lists this vLLM's options"


def _after_dashes(args: list[str], parser: argparse.ArgumentParser) -> str | None:
    """The fix of an option vLLM knows given after a `--`, which makes every later word positional."""
    after = args[args.index("--") + 1 :] if "--" in args else []
    known = next((w.split("=", 1)[0] for w in after if w.split("=", 1)[0] in parser._option_string_actions), None)
    if known is None:
        return None
    return f"everything after `--` is positional, {known} too: remove the `--`, then run it again"


def _one_word_hint(word: str) -> str:
    """The fix of an option and its value quoted together (one word to the shell: `"--opt {...}"`);
    the value not repeated: a JSON value is wider than a line, and the user's own line holds it."""
    name = word.split(" ", 1)[0]
    return f"{name} and its value reached vLLM as one word (quoted together): give them as two words, {name} then the value in quotes of its own"
