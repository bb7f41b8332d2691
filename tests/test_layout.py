"""The module layout docs/architecture.md describes, held against the code's imports."""

from __future__ import annotations

import ast
import functools
import re
import sys
from pathlib import Path

import pytest

import patchkit
from patchkit.launch import model_files

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PACKAGE = Path(patchkit.__file__).parent

# Every rule below walks every module (patchkit's, the tests'): on one xdist worker, each file is parsed
# once a run (walked), not once a worker.
pytestmark = pytest.mark.xdist_group("layout")


def walked(path: Path) -> tuple[ast.AST, ...]:
    """Every node of `path`'s syntax tree (ast.walk's order): the checks below each walk every module,
    parsed once a process (read again each time: a planted file's bytes are its own)."""
    return _walked(path.read_bytes())


@functools.cache
def _walked(source: bytes) -> tuple[ast.AST, ...]:
    return tuple(ast.walk(ast.parse(source)))


# Lower layers never import higher ones (docs/architecture.md's table, bottom up).
LAYERS = [
    {"base", "_target"},
    {"store", "tree"},
    {"series"},
    {"distinfo", "fetch"},
    {"checks"},
    {"engine"},
    {"releases", "launch", "wheel", "maintainer", "fleet"},
    {"cli", "__main__"},
]


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, package: Path = PACKAGE) -> set[str]:
    """Every patchkit module this file imports, at any depth (lazy imports inside functions count).
    `from package import module` names the module alone; `from package import name`, the package."""
    found = set()
    for node in walked(path):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("patchkit")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("patchkit"):
            folder = package.parent.joinpath(*node.module.split("."))
            found |= {
                f"{node.module}.{a.name}"
                if (folder / f"{a.name}.py").is_file() or (folder / a.name / "__init__.py").is_file()
                else node.module
                for a in node.names
            }
    return found


def graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    files = {module_name(p, package): p for p in package.rglob("*.py")}
    return {name: {m for m in imports(path, package) if m in files and m != name} for name, path in files.items()}


def planted(tmp_path: Path, files: dict[str, str]) -> Path:
    """A package `patchkit` under tmp_path holding `files` (path -> text), for a rule to be shown a fault."""
    package = tmp_path / "patchkit"
    package.mkdir()
    for rel, text in files.items():
        (package / rel).parent.mkdir(parents=True, exist_ok=True)
        (package / rel).write_text(text)
    return package


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = stack[stack.index(node) :]
                    del stack[stack.index(node) :]
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                work.append((child, iter(sorted(edges.get(child, ())))))
            elif child in stack:
                low[node] = min(low[node], index[child])
    return found


def top(module: str) -> str:
    return module.split(".")[1] if "." in module else module


def layer(module: str) -> int:
    return next(i for i, names in enumerate(LAYERS) if top(module) in names)


@pytest.fixture(scope="module")
def patchkit_graph() -> dict[str, set[str]]:
    """patchkit's import graph, read once for the tests below (each parse of every module is ~0.5 s);
    a module fixture also keeps them on one xdist worker (conftest: --dist loadgroup)."""
    return graph()


def test_every_module_has_a_layer(patchkit_graph):
    assert [m for m in patchkit_graph if m != "patchkit" and not any(top(m) in names for names in LAYERS)] == []


def test_no_module_imports_a_higher_layer(patchkit_graph):
    upward = [
        (name, dep)
        for name, deps in patchkit_graph.items()
        if name != "patchkit"
        for dep in deps
        if dep != "patchkit" and layer(dep) > layer(name)
    ]
    assert upward == []


def test_there_is_no_import_cycle_between_top_level_modules(patchkit_graph):
    edges = {}
    for name, deps in patchkit_graph.items():
        if name == "patchkit":
            continue
        edges.setdefault(top(name), set()).update(top(d) for d in deps if d != "patchkit" and top(d) != top(name))

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(n == goal or (n not in seen and reaches(n, goal, seen | {n})) for n in edges.get(start, ()))

    assert sorted(m for m in edges if reaches(m, m, {m})) == []


def test_no_module_takes_part_in_an_import_circle(patchkit_graph):
    """Any depth, any module: a package's __init__ and its own modules count as two."""
    assert circles({name: deps - {"patchkit"} for name, deps in patchkit_graph.items()}) == []


def test_a_planted_circle_is_found_even_through_imports_inside_functions(tmp_path):
    package = planted(
        tmp_path,
        {
            "__init__.py": "",
            "sub/__init__.py": "from patchkit.sub.b import B\n",
            "sub/a.py": "def f():\n    from patchkit.sub import B\n    return B\n",
            "sub/b.py": "from patchkit.sub.a import f\nB = 1\n",
            "lone.py": "import patchkit.sub.a\n",
        },
    )
    assert circles(graph(package)) == [["patchkit.sub", "patchkit.sub.a", "patchkit.sub.b"]]


def test_the_workers_never_import_patchkit(patchkit_graph):
    """They run in the target's interpreter, where patchkit is not installed."""
    assert all(not deps for name, deps in patchkit_graph.items() if top(name) == "_target")


# Comments and docstrings say why, in a line or two (issue 21). Which trial, review or audit found a
# fault, and what was said before, is history: its commit message holds it (`git log -S` finds it).
HISTORY = re.compile(r"\bnew-?user\b|\b(review|audit) ?\d+[a-z]?\b", re.IGNORECASE)


def history_told(package: Path = PACKAGE) -> list[str]:
    """file:line of each line of patchkit/ that names a new-user trial, a review or an audit."""
    return [
        f"{path.relative_to(package).as_posix()}:{number}"
        for path in sorted(package.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if HISTORY.search(line)
    ]


def test_no_comment_retells_which_trial_or_review_found_a_fault():
    assert history_told() == [], "say why the code is so; the trial or review that found it goes in the commit message"


# A closed set of names is a StrEnum (base.enums, fleet.states, maintainer.states...), compared as its members:
# a literal compared with a record's state, outcome or kind is a name no enum checks. argparse's action kinds are
# the parser's own names, read from vLLM's parser (launch.serve_parser), not patchkit's.
ENUM_ATTRIBUTES = {"state", "outcome", "kind", "level", "phase", "fmt"}
# a command's output format and a `_target/` worker's status, read into their enums (OutputFormat, WorkerStatus)
ENUM_NAMES = {"fmt", "status"}
NAMES_NOT_OURS = {"launch/serve_parser.py"}


def _string_constants(node: ast.expr) -> list[str]:
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]


def literal_states(package: Path = PACKAGE) -> list[str]:
    """file:line of each comparison of a `.state`/`.outcome`/`.kind`/..., or of a `fmt` or `status`,
    with a string literal."""
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        for node in walked(path):
            if not isinstance(node, ast.Compare) or rel in NAMES_NOT_OURS:
                continue
            sides = [node.left, *node.comparators]
            named = any(
                (isinstance(s, ast.Attribute) and s.attr in ENUM_ATTRIBUTES)
                or (isinstance(s, ast.Name) and s.id in ENUM_NAMES)
                for s in sides
            )
            if named and any(_string_constants(s) for s in sides):
                found.append(f"{rel}:{node.lineno}")
    return found


def test_a_closed_set_is_compared_as_its_enum_never_as_a_literal():
    assert literal_states() == []


def test_a_state_compared_with_a_literal_is_found(tmp_path):
    a = (
        "def f(report, check, step, name):\n"
        "    if report.outcome in ('ported', 'identical'):\n"
        "        return check.state == 'conflict'\n"
        "    return step.state == StepState.CONFLICT or name == 'conflict' or step.kind != 'rename'\n"
        "def g(ui, fmt, status, code):\n"
        "    if ui.fmt == 'json' or fmt in ('junit', 'markdown') or code == 'ok':\n"
        "        return status == 'no-vllm' or status == 0 or fmt == OutputFormat.JSON\n"
    )
    assert literal_states(planted(tmp_path, {"a.py": a})) == [
        "a.py:2",
        "a.py:3",
        "a.py:4",
        "a.py:6",
        "a.py:6",
        "a.py:7",
    ]


def test_a_comment_that_retells_history_is_found(tmp_path):
    a = (
        '"""Said once (new-user\n21, 5: twice)."""\n\n'
        "x = 1  # kept (review 12b L4)\n"
        "# Review 13 M1: a set the record does not name\n"
        "y = 2  # the user's review of the plan comes first; audit23 W2\n"
    )
    package = planted(tmp_path, {"a.py": a, "b.py": "# a review of 3 sets, said once\n"})
    assert history_told(package) == ["a.py:1", "a.py:4", "a.py:5", "a.py:6"]


# Tests import no other test module: what tests share lives in the helper modules beside them
# (helpers.py, launch_fixtures.py, ...) or in conftest's fixtures, so each test module stands alone.
TESTS = Path(__file__).resolve().parent


def _imported_names(node: ast.AST) -> list[str]:
    """The modules (and from-imported names) an import statement or an import_module("...") call names."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        return [node.module or "", *(a.name for a in node.names)]
    called = isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None))
    if called in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
        return [str(node.args[0].value)]
    return []


def imports_of_test_modules(tests: Path = TESTS) -> list[tuple[str, int, str]]:
    """(file, line, name) of each import of a test module (test_*.py under `tests`) by any file there, at any depth."""
    modules = {path.stem for path in tests.rglob("test_*.py")}
    found = []
    for path in sorted(tests.rglob("*.py")):
        for node in walked(path):
            found += [
                (path.relative_to(tests).as_posix(), getattr(node, "lineno", 0), name)
                for name in _imported_names(node)
                if modules & set(name.split("."))
            ]
    return found


def test_no_test_module_imports_another():
    assert imports_of_test_modules() == []


def test_an_import_of_a_test_module_is_found_wherever_it_stands(tmp_path):
    (tmp_path / "deep").mkdir()
    (tmp_path / "test_b.py").write_text("B = 1\n")
    (tmp_path / "test_a.py").write_text("import os\nfrom test_b import B\n")
    (tmp_path / "shared.py").write_text("def f():\n    import test_b as b\n    return b\n")
    (tmp_path / "deep" / "test_c.py").write_text("import importlib\n\nM = importlib.import_module('test_a')\n")
    (tmp_path / "deep" / "test_d.py").write_text("from shared import f\nfrom . import test_c\n")
    assert imports_of_test_modules(tmp_path) == [
        ("deep/test_c.py", 3, "test_a"),
        ("deep/test_d.py", 2, "test_c"),
        ("shared.py", 2, "test_b"),
        ("test_a.py", 2, "test_b"),
    ]


# An import inside a function hides an edge from a reader of the file's top: it is kept only where
# it keeps a module out of `--help`, a quiet dry run or a launch's fast path, or the module is
# optional. What may be imported so, with why (a line `# lazy: ...` says it where it stands).
LAZY_IMPORTS = {
    "ray": "optional: the `ray` extra",
    "rich": "rich loads only for output drawn on a terminal",
    "xml": "only a JUnit report needs it",
    "patchkit.cli.ui": "`--help` never loads the UI",
    "requests": "the network stack loads only for a fetch",
    "remotezip": "the network stack loads only for a fetch",
    "pypi_simple": "the network stack loads only for a fetch",
    "pip": "pip's configuration loads only for a fetch",
    "patchkit.fetch.pipconfig": "pip's configuration loads only for a fetch",
    "git": "GitPython loads only for a repository's work",
    "patchkit.distinfo.installed_wheel": "only a vLLM installed from a patched wheel needs it",
    "patchkit.checks": "the checks load only when checks run",
    "filelock": "a lock's library loads only when a lock is taken",
    "patchkit.tree.process": "only a worker's run needs it: subprocess and its waits (start-up of a dry run)",
    "email": "only a patch with a mail header needs it",
    "logging": "the guard runs in every vLLM process: only a refusal logs",
    "importlib.metadata": "only reading a tree's plugins needs it (it loads the email package), or a target's distribution that _target/locate.py cannot look up plainly",
    "yaml": "PyYAML loads only for a launch that names a --config file",
    "patchkit.series.plan": "`run`'s fast path reads the record and never plans",
    "patchkit.cli.commands.apply": "`run`'s fast path never applies: apply's command (the engine's operations) loads for --apply",
    "patchkit.engine.transaction": "`run`'s fast path takes no lock (2.7 ms of CPU, bench/README)",
    "difflib": "`run`'s fast path loads launch.values, which suggests a name only for a misspelt option or parser (~1 ms)",
    "pyflakes": "a warm dry run recalls the names check's findings: pyflakes runs on a miss (2.2 ms of CPU)",
}
# Issue 21 allows fewer than 30, each for a start-up gain measured in bench/ (README): never raise it past 29.
MOST_LAZY_IMPORTS = 29  # 29: the cached stock read for a conflict or a checkout holding a change (resolve._integrity)


def lazy_imports(package: Path = PACKAGE) -> list[tuple[str, int, str]]:
    """(file, line, module) of each import inside a function body."""
    found = set()
    for path in sorted(package.rglob("*.py")):
        for function in walked(path):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Import):
                    found |= {(str(path.relative_to(package)), node.lineno, a.name) for a in node.names}
                elif isinstance(node, ast.ImportFrom):
                    found.add((str(path.relative_to(package)), node.lineno, node.module or ""))
    return sorted(found)


def unexplained(found: list[tuple[str, int, str]]) -> list[tuple[str, int, str]]:
    def allowed(module: str) -> bool:
        return any(module == m or module.startswith(m + ".") for m in LAZY_IMPORTS)

    return [row for row in found if not allowed(row[2])]


def test_every_import_inside_a_function_has_its_reason():
    found = lazy_imports()
    assert unexplained(found) == []
    used = {m for _, _, module in found for m in LAZY_IMPORTS if module == m or module.startswith(m + ".")}
    assert set(LAZY_IMPORTS) - used == set()  # a reason for an import that is gone goes too
    assert len({(file, line) for file, line, _ in found}) <= MOST_LAZY_IMPORTS


def test_an_unexplained_import_inside_a_function_is_found(tmp_path):
    work = "import os\n\ndef f():\n    import json\n    from rich.text import Text\n"
    package = planted(tmp_path, {"cli/commands/go.py": "def go():\n    import json\n", "work.py": work})
    assert unexplained(lazy_imports(package)) == [("cli/commands/go.py", 2, "json"), ("work.py", 4, "json")]


# The workers run by path under `python -I` in the target's interpreter, so they cannot import a
# shared module: these helpers (functions, classes, constants) are copied, and every copy must be the same text.
WORKER_COPIES = {
    "write_answer": None,  # None: in every worker that defines it
    "_unshadow": None,
    "_error_text": None,
    "_plain": None,
    "_parser_class": {"serve_reading.py", "serve_spec.py"},  # engine_config's falls back to argparse
    "_first": {"serve_reading.py", "serve_spec.py"},
    "_force_cpu_platform_when_none": {"serve_reading.py", "serve_spec.py"},
    "load_general_plugins": {"model_interface.py", "engine_config.py"},
    "_running": {"model_interface.py", "engine_config.py"},
    "PluginFailed": {"model_interface.py", "engine_config.py"},
    "GENERAL_PLUGINS": {"model_interface.py", "engine_config.py"},
    "ANSWER": {"model_interface.py", "engine_config.py"},
}


def _defined_name(node: ast.stmt) -> str | None:
    """The name a top-level function, class or single-name assignment defines."""
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        return node.name
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    return targets[0].id if len(targets) == 1 and isinstance(targets[0], ast.Name) else None


def worker_copies(folder: Path) -> dict[str, dict[str, str]]:
    """name -> worker file -> the definition's source, for each name in WORKER_COPIES."""
    found: dict[str, dict[str, str]] = {}
    for path in sorted(folder.glob("*.py")):
        source = path.read_text()
        for node in ast.parse(source).body:
            name = _defined_name(node)
            workers = WORKER_COPIES.get(name, ()) if name is not None else ()
            if name is not None and (workers is None or path.name in workers):
                found.setdefault(name, {})[path.name] = ast.get_source_segment(source, node) or ""
    return found


def differing_copies(folder: Path) -> dict[str, list[str]]:
    return {name: sorted(files) for name, files in worker_copies(folder).items() if len(set(files.values())) > 1}


def test_the_workers_copies_of_their_helpers_are_the_same_text():
    copies = worker_copies(PACKAGE / "_target")
    assert {name: len(files) >= 2 for name, files in copies.items()} == dict.fromkeys(WORKER_COPIES, True)
    assert differing_copies(PACKAGE / "_target") == {}


def test_a_copy_that_drifted_is_found(tmp_path):
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text((PACKAGE / "_target" / "locate.py").read_text())
    path = tmp_path / "b.py"
    path.write_text(path.read_text().replace("del sys.path[0]", "sys.path.pop(0)"))
    assert differing_copies(tmp_path) == {"_unshadow": ["a.py", "b.py"]}


def test_a_class_or_constant_copy_that_drifted_is_found(tmp_path):
    for name in ("model_interface.py", "engine_config.py"):
        (tmp_path / name).write_text((PACKAGE / "_target" / "model_interface.py").read_text())
    path = tmp_path / "engine_config.py"
    text = path.read_text().replace("self.name, self.error = name, error", "self.name = name")
    path.write_text(text.replace('GENERAL_PLUGINS = "vllm.general_plugins"', 'GENERAL_PLUGINS = "vllm.plugins"'))
    both = ["engine_config.py", "model_interface.py"]
    assert differing_copies(tmp_path) == {"PluginFailed": both, "GENERAL_PLUGINS": both}


def test_the_architecture_page_has_a_row_per_folder_at_its_layer():
    """docs/architecture.md's table names every folder of patchkit/ once, at the layer LAYERS gives it."""
    page = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\d+) \| `([\w]+)/`", page, re.M)
    folders = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert sorted(folder for _, folder in rows) == sorted(folders)
    layer_of = {name: i + 1 for i, names in enumerate(LAYERS) for name in names}
    assert {folder: int(layer) for layer, folder in rows} == {folder: layer_of[folder] for folder in folders}


def test_no_module_is_exempt_from_strict_typing():
    """mypy --strict holds for all of patchkit/ (commands/ and _target/ too): pyproject.toml turns
    none of its checks off, for the whole package or for a module."""
    config = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    assert config["strict"] is True and config["files"] == ["patchkit"]
    assert [key for key, value in config.items() if value is False] == []
    assert config.get("overrides", []) == []


def test_every_dataclass_says_what_it_is():
    """A dataclass without a docstring is given one built by inspect.signature as its module loads
    (~0.1 ms each; 24 of them on `run`'s fast path, issue 21): each says what it is instead."""
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in walked(path):
            decorated = isinstance(node, ast.ClassDef) and any(
                "dataclass" in ast.unparse(d) for d in node.decorator_list
            )
            if decorated and ast.get_docstring(node) is None:
                missing.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}")
    assert missing == []


# One home for output (issue 21): only patchkit/cli/ui/ writes to stdout or stderr; a module below the
# CLI hands what it has to say to base.notes. The CLI's last words are kept where no ui is there to say them.
OUTPUT_OUTSIDE_THE_UI = {
    ("cli/main.py", "_exit_status"): "sys.exit(message): printed as Python prints it, the ui's work being done",
    ("cli/start.py", "_interrupted_while_loading"): "Ctrl-C while the CLI's modules load: no ui to say it yet",
}
_STREAMS = {"sys.stdout", "sys.stderr", "sys.__stdout__", "sys.__stderr__"}


def _writes_output(node: ast.AST) -> bool:
    """A print(), click.echo()/secho() or a write to sys.stdout/sys.stderr."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Name):
        return func.id == "print"
    if not isinstance(func, ast.Attribute):
        return False
    owner = ast.unparse(func.value)
    return (owner == "click" and func.attr in ("echo", "secho")) or (
        owner in _STREAMS and func.attr in ("write", "writelines")
    )


def output_outside_the_ui(package: Path = PACKAGE) -> list[tuple[str, str]]:
    """(file, enclosing function or "<module>") of each write of output outside cli/ui/."""
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if rel.startswith("cli/ui/"):
            continue
        nodes = walked(path)
        functions = [n for n in nodes if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        for node in nodes:
            if _writes_output(node):
                around = [f for f in functions if f.lineno <= node.lineno <= (f.end_lineno or f.lineno)]
                found.append((rel, around[-1].name if around else "<module>"))
    return sorted(set(found))


def test_only_the_ui_writes_output():
    assert output_outside_the_ui() == sorted(OUTPUT_OUTSIDE_THE_UI)


def test_output_written_outside_the_ui_is_found(tmp_path):
    record = (
        "import sys\nimport click\n\nprint('loaded')\n\n"
        "def warn(s):\n    def inner():\n        sys.stderr.write(s)\n    inner()\n\n"
        "def say(s):\n    click.echo(s, err=True)\n\ndef quiet(s, out):\n    out.write(s)\n"
    )
    console = "import sys\n\ndef line(s):\n    sys.stdout.write(s)\n"
    package = planted(tmp_path, {"cli/ui/console.py": console, "record.py": record})
    assert output_outside_the_ui(package) == [("record.py", "<module>"), ("record.py", "inner"), ("record.py", "say")]


# A function is read whole: one over LONGEST_FUNCTION lines (its def to its last line, docstring
# included) is broken into named phases, as engine/operations.py's _Applying is (issue 21).
LONGEST_FUNCTION = 60


def long_functions(package: Path = PACKAGE) -> list[str]:
    """ "file:line name (N lines)" of each function or method, at any depth, longer than LONGEST_FUNCTION."""
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in walked(path):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > LONGEST_FUNCTION:
                    found.append(f"{path.relative_to(package).as_posix()}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_no_function_is_longer_than_sixty_lines():
    assert long_functions() == []


def test_a_long_function_is_found_wherever_it_stands(tmp_path):
    def body(lines: int, indent: str = "    ") -> str:
        return "".join(f"{indent}x{i} = {i}\n" for i in range(lines))

    package = planted(
        tmp_path,
        {
            "a.py": "def short():\n" + body(59) + "\n\nasync def long():\n" + body(60),
            "sub/b.py": "class C:\n    @property\n    def m(self):\n" + body(60, " " * 8),
            "c.py": "def outer():\n    def inner():\n" + body(60, " " * 8) + "    return inner\n",
        },
    )
    assert long_functions(package) == [
        "a.py:63 long (61 lines)",
        "c.py:1 outer (63 lines)",
        "c.py:2 inner (61 lines)",
        "sub/b.py:3 m (61 lines)",
    ]


def test_the_trees_model_file_paths_have_one_home():
    """The launch rules name vLLM's model files (llama.py, llama_eagle3.py, the registry) through
    patchkit/launch/model_files.py: a path spelt again elsewhere may drift from the one the rules read."""
    homed = {value for name, value in vars(model_files).items() if name.isupper() and isinstance(value, str)}
    sources = [*PACKAGE.rglob("*.py"), *(PACKAGE.parent / "patches").rglob("*.py")]
    spelt = sorted(
        f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {node.value}"
        for path in sources
        if path.name != "model_files.py"
        for node in walked(path)
        if isinstance(node, ast.Constant) and node.value in homed
    )
    assert not spelt, spelt


def test_the_speculative_method_rules_read_has_one_home():
    """A rule keyed on the speculative method reads the one vLLM settles on (patchkit/launch/method.py's
    settled_method: the drafter's model_type too), never the command's named method, which misses an mtp
    vLLM infers from a DeepSeek-V3-type drafter checkpoint."""
    sources = [*PACKAGE.rglob("*.py"), *(PACKAGE.parent / "patches").rglob("*.py")]
    read = sorted(
        f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: .{node.attr}"
        for path in sources
        if path != PACKAGE / "launch" / "method.py"
        for node in walked(path)
        if isinstance(node, ast.Attribute) and node.attr in ("named_method", "speculative_method")
    )
    assert not read, read
