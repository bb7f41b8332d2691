"""The names check: pyflakes on the planned and the stock file; only what the patch introduces counts."""

from __future__ import annotations

import ast
import json
import uuid

from helpers import MODEL_PY, SPEC_PY, make_patch, snapshot, write_library

from patchkit.base import remembered
from patchkit.checks import ERROR, WARNING, CheckContext, names, syntax
from patchkit.checks.names import CHECK, findings, introduced
from patchkit.checks.parsed import parsed
from patchkit.checks.registry import run_checks

SPEC = "vllm/config/spec.py"
MODEL = "vllm/models/model.py"
EAGLE3_BASES = "class Model(SupportsLoRA, SupportsPP, SupportsEagle3):"


def context(planned: dict[str, bytes | None], stock: dict[str, bytes | None]) -> CheckContext:
    return CheckContext(paths=sorted(planned), read=planned.get, python=None, read_stock=stock.get)


def library_with(tmp_path, tree, scratch, model_py: str):
    patch = make_patch(scratch, tree, {MODEL: model_py}, "Description: eagle3 interface\n")
    return write_library(tmp_path / "lib", {"0.16.0": [patch]})


def test_apply_refuses_a_base_class_that_is_never_imported(run, tmp_path, tree, scratch):
    library = library_with(
        tmp_path, tree, scratch, MODEL_PY.replace("class Model(SupportsLoRA, SupportsPP):", EAGLE3_BASES)
    )
    stock = snapshot(tree)

    result = run("apply", "--target", tree, "--patches", library, "--format", "json")

    assert result.exit_code == 1
    assert "undefined name 'SupportsEagle3'" in result.output and MODEL in result.output
    checks = json.loads(result.stdout)["checks"]
    assert [(c["check"], c["path"]) for c in checks if not c["ok"] and c["level"] == ERROR] == [("names", MODEL)]
    assert snapshot(tree) == stock
    assert not (tree / ".patchkit" / "state.json").exists()


def test_a_new_unused_import_is_a_warning_and_apply_goes_ahead(run, tmp_path, tree, scratch):
    patched = MODEL_PY.replace(
        "from .interfaces import SupportsLoRA, SupportsPP\n",
        "from .interfaces import SupportsLoRA, SupportsPP\nimport typing\n",
    )
    library = library_with(tmp_path, tree, scratch, patched)

    result = run("apply", "--target", tree, "--patches", library, "--format", "json")

    assert result.exit_code == 0, result.output
    assert (tree / MODEL).read_text() == patched
    flagged = [c for c in json.loads(result.stdout)["checks"] if c["check"] == "names" and not c["ok"]]
    assert [(c["path"], c["level"], c["message"]) for c in flagged] == [
        (MODEL, WARNING, "line 2: 'typing' imported but unused")
    ]
    text = run("verify", "--target", tree, "--patches", library).output
    assert "'typing' imported but unused" in text and "warning" in text


def test_findings_already_in_the_stock_file_do_not_count():
    # spec.py's `import os` is unused in stock: the patch did not introduce it.
    planned = SPEC_PY.replace('    "qwen",\n', '    "qwen",\n    "deepseek",\n').encode()
    results = CHECK.run(context({SPEC: planned}, {SPEC: SPEC_PY.encode()}))
    assert [(r.ok, r.message) for r in results] == [(True, "no new pyflakes findings (1 already in the stock file)")]
    assert not CHECK.run(context({SPEC: planned}, {SPEC: None}))[0].ok  # a new file: all findings are new


def test_comparison_ignores_shifted_line_numbers_but_counts_repeats():
    stock = b"import os\n\ndef f():\n    import os\n    return 1\n"
    moved = b"\n\n\nimport os\n\ndef f():\n    import os\n    return 1\n"  # same findings, other lines
    assert introduced(findings(moved), findings(stock)) == []
    twice = b"import os\nimport os\n\ndef f():\n    import os\n    return 1\n"
    new = introduced(findings(twice), findings(stock))
    assert [f.kind for f in new] == ["RedefinedWhileUnused"]


def test_undefined_exports_and_locals_fail_other_news_warn():
    stock = b"A = 1\nx = 0\n__all__ = ['A']\n\ndef f():\n    return A\n"
    planned = b"import json\nA = 1\nx = 0\n__all__ = ['A', 'B']\n\ndef f():\n    print(x)\n    x = 1\n    return A\n"
    results = CHECK.run(context({"vllm/m.py": planned}, {"vllm/m.py": stock}))
    assert [(r.ok, r.level, r.message) for r in results] == [
        (False, WARNING, "line 1: 'json' imported but unused"),
        (False, ERROR, "line 4: undefined name 'B' in __all__"),
        (False, ERROR, "line 7: local variable 'x' defined in enclosing scope on line 3 referenced before assignment"),
        (False, WARNING, "line 8: local variable 'x' is assigned to but never used"),
    ]


def test_deleted_and_non_python_files_are_skipped_and_unparsable_files_warn():
    results = CHECK.run(context({"vllm/gone.py": None, "vllm/data.json": b"{", "vllm/new.py": b"def f(:\n"}, {}))
    assert [(r.path, r.ok, r.level) for r in results] == [("vllm/new.py", False, WARNING)]
    assert "syntax check" in results[0].message


def test_an_export_a_module_getattr_may_serve_is_a_warning():
    # vLLM's lazy config packages list names in __all__ that only their __getattr__ (PEP 562) provides.
    stock = b"__all__ = ['A']\n\ndef __getattr__(name):\n    raise AttributeError(name)\n"
    planned = b"__all__ = ['A', 'B']\n\ndef __getattr__(name):\n    raise AttributeError(name)\n"
    [result] = CHECK.run(context({"vllm/lazy.py": planned}, {"vllm/lazy.py": stock}))
    assert (result.ok, result.level) == (False, WARNING)
    assert result.message == "line 1: undefined name 'B' in __all__ (unless the module's __getattr__ provides it)"
    without_getattr = planned.split(b"\n\n")[0] + b"\n"
    [result] = CHECK.run(context({"vllm/lazy.py": without_getattr}, {"vllm/lazy.py": b"__all__ = ['A']\n"}))
    assert result.failed


def test_a_string_inside_an_annotation_is_a_doubtful_undefined_name():
    # pyflakes parses strings in annotations as forward references: Array[..., d["words"]] is not one.
    stock = b"d = {}\n\n\ndef f(x: int) -> int:\n    return x\n"
    planned = b"d = {}\n\n\ndef f(x: Array[d['words']]) -> Missing:\n    return x\n"
    results = CHECK.run(context({"vllm/a.py": planned}, {"vllm/a.py": stock}))
    assert sorted((r.level, r.message) for r in results) == [
        (ERROR, "line 4: undefined name 'Array'"),
        (ERROR, "line 4: undefined name 'Missing'"),
        (WARNING, "line 4: undefined name 'words' (read from a string inside an annotation)"),
    ]


def test_findings_are_cached_per_content_on_disk(tmp_path, monkeypatch):
    from patchkit.checks import names

    real_pyflakes = names._pyflakes
    monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(names, "_SEEN", {})
    source = b"import os\n\ndef f():\n    return undefined_here\n"
    computed = findings(source)
    assert [f.kind for f in computed] == ["UnusedImport", "UndefinedName"]
    [stored] = list((tmp_path / "cache" / "pyflakes").rglob("*.json"))

    def no_pyflakes(_source):
        raise AssertionError("pyflakes ran although the cache has the answer")

    monkeypatch.setattr(names, "_SEEN", {})
    monkeypatch.setattr(names, "_pyflakes", no_pyflakes)
    assert findings(source) == computed

    stored.write_text("{not json")  # a damaged entry is computed again
    monkeypatch.setattr(names, "_SEEN", {})
    monkeypatch.setattr(names, "_pyflakes", real_pyflakes)
    assert findings(source) == computed


def test_the_checks_parse_a_content_once(monkeypatch):
    """syntax compiles the text; names runs pyflakes on the tree the contract then reads
    (checks/parsed.py): one parse of a content for the three, not one per check."""
    source = f"import os\n\n\ndef f():  # {uuid.uuid4()}\n    return os.sep\n".encode()
    parses = []
    parse = ast.parse

    def counting(text, *args, **kwargs):
        parses.extend([text] if text == source else [])
        return parse(text, *args, **kwargs)

    monkeypatch.setattr(ast, "parse", counting)
    monkeypatch.setattr(syntax, "_JUDGED", {})
    monkeypatch.setattr(names, "_SEEN", {})
    monkeypatch.setattr(remembered, "_entry", lambda check, key: None)  # nothing remembered across runs
    monkeypatch.setattr(names, "_cache_dir", lambda: None)
    results = run_checks(context({MODEL: source}, {MODEL: source}), [syntax.CHECK, names.CHECK])
    assert [r.ok for r in results] == [True, True], results
    assert isinstance(parsed(source, MODEL), ast.Module)  # what the contract reads
    assert len(parses) == 1
