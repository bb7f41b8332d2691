"""The `contract` check: requirements a patch set declares as data, judged on the AST of small trees."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from helpers import make_patch, snapshot, write_library, write_tree
from packaging.version import Version

from patchkit.base.errors import BadInput
from patchkit.checks import CheckContext
from patchkit.checks.contract import CHECK, Module, evaluate
from patchkit.checks.parsed import LARGEST_KEPT, parsed
from patchkit.series import requirements
from patchkit.series.library import load_set
from patchkit.series.requirements import Requirement, parse_requirements

SPEC = "vllm/config/targets.py"
PROPOSER = "vllm/spec/proposer.py"
MODEL = "vllm/models/deepseek.py"
KIMI = "vllm/models/kimi.py"

STOCK = {
    path: textwrap.dedent(text)
    for path, text in {
        SPEC: """\
        class SpeculativeConfig:
            def _verify_args(self):
                targets = ["llama", "qwen"]
                if self.method == "eagle3" and not any(
                    supported in self.model_type for supported in targets
                ):
                    raise ValueError(self.model_type)
        """,
        PROPOSER: """\
        class Proposer:
            def load_model(self, target_model):
                if self.name(target_model) in ["QwenVL"]:
                    self.model.config.image_token_index = target_model.config.image_token_id
                else:
                    self.model.config.image_token_index = (
                        target_model.config.image_token_index
                    )
        """,
        MODEL: """\
        from torch import nn

        from .interfaces import SupportsLoRA, SupportsPP


        class DeepModel(nn.Module):
            def __init__(self):
                self.layers = []

            def forward(self, x):
                for layer in self.layers:
                    x = layer(x)
                return x


        class DeepForCausalLM(nn.Module, SupportsPP, SupportsLoRA):
            def forward(self, x):
                return self.model(x)


        class DeepV3ForCausalLM(DeepForCausalLM):
            pass
        """,
    }.items()
}

KIMI_BRANCH = """\
        elif self.name(target_model) == "KimiK25ForConditionalGeneration":
            self.model.config.image_token_index = target_model.config.media_placeholder_token_id
"""
AUX_METHODS = """\

    def set_aux_layers(self, layers):
        self.model.aux_layers = layers

    def get_default_aux_layers(self):
        return (1, 2)
"""


def edit(text: str, *pairs: tuple[str, str]) -> str:
    """Replace each old text, which must be there exactly once."""
    for old, new in pairs:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


PATCHED = {
    SPEC: edit(STOCK[SPEC], ('["llama", "qwen"]', '["llama", "qwen", "deepseek_v3", "kimi_k2", "kimi_k25"]')),
    PROPOSER: edit(STOCK[PROPOSER], ("        else:\n", KIMI_BRANCH + "        else:\n")),
    MODEL: edit(
        STOCK[MODEL],
        (
            "from .interfaces import SupportsLoRA, SupportsPP",
            "from .interfaces import (\n    SupportsEagle3,\n    SupportsLoRA,\n    SupportsPP,\n)",
        ),
        ("        self.layers = []\n", "        self.layers = []\n        self.aux_layers = ()\n"),
        (
            "        for layer in self.layers:\n            x = layer(x)\n        return x\n",
            "        aux = []\n        for i, layer in enumerate(self.layers):\n            if i in self.aux_layers:\n"
            "                aux.append(x)\n            x = layer(x)\n        return (x, aux) if aux else x\n",
        ),
        ("(nn.Module, SupportsPP, SupportsLoRA):", "(nn.Module, SupportsPP, SupportsLoRA, SupportsEagle3):"),
        ("        return self.model(x)\n", "        return self.model(x)\n" + AUX_METHODS),
    ),
}

CONTRACT = textwrap.dedent("""\
    [[requirement]]
    file = "vllm/config/targets.py"
    kind = "model-types"
    function = "SpeculativeConfig._verify_args"
    variable = "targets"
    model_types = ["deepseek_v3", "kimi_k2"]
    reason = "eagle3 is refused for other targets"

    [[requirement]]
    file = "vllm/spec/proposer.py"
    kind = "guarded-read"
    function = "Proposer.load_model"
    on = "target_model.config"
    attribute = "image_token_index"
    target = { class = "KimiK25ForConditionalGeneration", has = ["media_placeholder_token_id"] }

    [[requirement]]
    file = "vllm/spec/proposer.py"
    kind = "attribute"
    function = "Proposer.load_model"
    attribute = "media_placeholder_token_id"
    access = "load"

    [[requirement]]
    file = "vllm/models/deepseek.py"
    kind = "base"
    class = "DeepV3ForCausalLM"
    base = "SupportsEagle3"

    [[requirement]]
    file = "vllm/models/deepseek.py"
    kind = "imported"
    names = ["SupportsEagle3"]

    [[requirement]]
    file = "vllm/models/deepseek.py"
    kind = "methods"
    class = "DeepV3ForCausalLM"
    methods = ["set_aux_layers", "get_default_aux_layers"]

    [[requirement]]
    file = "vllm/models/deepseek.py"
    kind = "attribute"
    function = "DeepModel.__init__"
    on = "self"
    attribute = "aux_layers"
    access = "store"

    [[requirement]]
    file = "vllm/models/deepseek.py"
    kind = "attribute"
    function = "DeepModel.forward"
    on = "self"
    attribute = "aux_layers"
    access = "load"

    [[requirement]]
    file = "vllm/models/kimi.py"
    versions = ">=0.15.0"
    kind = "methods"
    class = "Kimi"
    methods = ["set_aux_layers"]
    """)


KIMI_PY = "class Kimi:\n    def set_aux_layers(self, layers):\n        self.lm.set_aux_layers(layers)\n"


def stock_tree(root: Path, version: str = "0.16.0", kimi: bool = True) -> Path:
    files = dict(STOCK)
    if kimi:
        files[KIMI] = KIMI_PY
    return write_tree(root, version, files)


def library_with(
    tmp_path: Path, tree: Path, patched: dict[str, str], *, contract: str = CONTRACT, version: str = "0.16.0"
) -> Path:
    """A one-release library whose series turns the stock tree into `patched`, with `contract`."""
    scratch = tmp_path / f"scratch-{len(list(tmp_path.iterdir()))}"
    scratch.mkdir()
    patch = make_patch(scratch, tree, patched)
    lib = write_library(tmp_path / f"lib-{scratch.name}", {version: [patch]})
    manifest = lib / "demo" / "set.toml"
    manifest.write_text('contract = "contract.toml"\n' + manifest.read_text())
    (lib / "demo" / "contract.toml").write_text(contract)
    return lib


def verify(run, tree: Path, lib: Path):
    result = run("verify", "--target", tree, "--patches", lib, "--format", "json")
    checks = json.loads(result.stdout)["checks"] if result.stdout.strip().startswith("{") else []
    return result, [c for c in checks if c["check"] == "contract"]


def failures(checks: list[dict]) -> list[str]:
    return [c["message"] for c in checks if not c["ok"]]


@pytest.fixture
def stock(tmp_path) -> Path:
    return stock_tree(tmp_path / "site")


# --- the whole path: library -> verify / apply -------------------------------------------------


def test_correct_patch_passes_every_requirement_and_applies(run, tmp_path, stock):
    lib = library_with(tmp_path, stock, PATCHED)
    result, checks = verify(run, stock, lib)
    assert result.exit_code == 0, result.output
    assert len(checks) == 9 and all(c["ok"] for c in checks), checks
    assert {c["path"] for c in checks} == {SPEC, PROPOSER, MODEL, KIMI}
    assert run("apply", "--target", stock, "--patches", lib).exit_code == 0
    result, checks = verify(run, stock, lib)  # now on disk
    assert result.exit_code == 0 and len(checks) == 9 and all(c["ok"] for c in checks)


FAULTS = {
    "missing method": (
        MODEL,
        ("    def get_default_aux_layers(self):\n        return (1, 2)\n", ""),
        "DeepV3ForCausalLM lacks method(s) get_default_aux_layers",
    ),
    "missing base": (
        MODEL,
        ("SupportsLoRA, SupportsEagle3):", "SupportsLoRA):"),
        "DeepV3ForCausalLM does not have base SupportsEagle3",
    ),
    "base not imported": (
        MODEL,
        ("    SupportsEagle3,\n", ""),
        "SupportsEagle3 not imported or defined at module level",
    ),
    "whitelist lacks kimi_k2": (
        SPEC,
        ('"kimi_k2", ', ""),
        "targets in SpeculativeConfig._verify_args does not accept model type(s) kimi_k2 (",
    ),
    # the Kimi branch moved out of the if/elif chain: the else still reads image_token_index for it
    "unguarded read": (
        PROPOSER,
        (
            KIMI_BRANCH + "        else:\n",
            "        else:\n            x = target_model.config.media_placeholder_token_id\n",
        ),
        "unguarded read of target_model.config.image_token_index (line 8 in Proposer.load_model)",
    ),
    "missing attribute reference": (
        MODEL,
        ("if i in self.aux_layers:", "if i in ():"),
        "DeepModel.forward does not read self.aux_layers",
    ),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_planted_fault_fails_verify_naming_it_and_apply_writes_nothing(run, tmp_path, stock, fault):
    path, (old, new), expected = FAULTS[fault]
    lib = library_with(tmp_path, stock, dict(PATCHED, **{path: edit(PATCHED[path], (old, new))}))

    result, checks = verify(run, stock, lib)
    assert result.exit_code == 1
    assert len(checks) == 9
    [message] = failures(checks)
    assert message.startswith(expected), message

    before = snapshot(stock)
    result = run("apply", "--target", stock, "--patches", lib)
    assert result.exit_code == 1
    assert "nothing was written" in result.output and expected in result.output
    assert snapshot(stock) == before
    assert not (stock / ".patchkit" / "state.json").exists()


def test_whitelist_message_names_only_the_rejected_type(run, tmp_path, stock):
    patched = dict(PATCHED, **{SPEC: edit(PATCHED[SPEC], ('"kimi_k2", ', ""))})
    _, checks = verify(run, stock, library_with(tmp_path, stock, patched))
    [message] = failures(checks)
    rejected = message.split("model type(s) ", 1)[1].split(" (", 1)[0]
    assert rejected == "kimi_k2"  # "kimi_k25" is in the list, and is not a substring of "kimi_k2"
    assert "substrings: `entry in model_type`" in message
    assert "needed because: eagle3 is refused for other targets" in message


def test_requirement_on_a_file_absent_where_it_should_exist_fails(run, tmp_path):
    tree = stock_tree(tmp_path / "site", kimi=False)
    result, checks = verify(run, tree, library_with(tmp_path, tree, PATCHED))
    assert result.exit_code == 1
    assert failures(checks) == [f"{KIMI} is missing from vLLM 0.16.0 (the requirement applies to >=0.15.0)"]


def test_requirement_outside_its_versions_is_not_evaluated(run, tmp_path):
    tree = stock_tree(tmp_path / "site", version="0.14.0", kimi=False)
    result, checks = verify(run, tree, library_with(tmp_path, tree, PATCHED, version="0.14.0"))
    assert result.exit_code == 0, result.output
    assert len(checks) == 8 and KIMI not in {c["path"] for c in checks}


def test_inline_contract_tables_in_set_toml(run, tmp_path, stock):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    lib = write_library(tmp_path / "lib", {"0.16.0": [make_patch(scratch, stock, PATCHED)]})
    inline = CONTRACT.replace("[[requirement]]", "[[contract]]").replace('"kimi_k2"]', '"kimi_k2", "gemma"]')
    with (lib / "demo" / "set.toml").open("a") as manifest:
        manifest.write("\n" + inline)
    result, checks = verify(run, stock, lib)
    assert result.exit_code == 1
    assert len(checks) == 9
    assert failures(checks)[0].startswith(
        "targets in SpeculativeConfig._verify_args does not accept model type(s) gemma ("
    )


# --- schema errors: exit 2 --------------------------------------------------------------------

BAD_DECLARATIONS = {
    "unknown kind": ('kind = "methods"', 'kind = "has-method"', "kind 'has-method' is not one of"),
    "missing field": ('methods = ["set_aux_layers", "get_default_aux_layers"]\n', "", "missing field(s) methods"),
    "unknown field": ('base = "SupportsEagle3"', 'base = "SupportsEagle3"\nbasis = "x"', "unknown field(s) basis"),
    "wrong type": ('names = ["SupportsEagle3"]', 'names = "SupportsEagle3"', "field 'names' must be"),
    "bad versions": ('versions = ">=0.15.0"', 'versions = "from 0.15"', "bad version specifier 'from 0.15'"),
    "bad access": ('access = "store"', 'access = "write"', "access 'write' is not one of"),
    "file outside the tree": ('file = "vllm/models/kimi.py"', 'file = "../kimi.py"', "must be a path inside the tree"),
    "target without class": (
        'target = { class = "KimiK25ForConditionalGeneration", has',
        "target = { has",
        "target takes class (required)",
    ),
}


@pytest.mark.parametrize("case", list(BAD_DECLARATIONS))
def test_schema_error_is_exit_2(run, tmp_path, stock, case):
    old, new, expected = BAD_DECLARATIONS[case]
    assert old in CONTRACT
    lib = library_with(tmp_path, stock, PATCHED, contract=CONTRACT.replace(old, new, 1))
    before = snapshot(stock)
    for command in ("verify", "apply"):
        result = run(command, "--target", stock, "--patches", lib)
        assert result.exit_code == 2, result.output
        assert expected in result.output
    assert snapshot(stock) == before


def test_unreadable_or_missing_contract_file_is_exit_2(run, tmp_path, stock):
    lib = library_with(tmp_path, stock, PATCHED, contract="[[requirement]\n")
    result = run("verify", "--target", stock, "--patches", lib)
    assert result.exit_code == 2 and "unreadable contract" in result.output
    (lib / "demo" / "contract.toml").unlink()
    result = run("verify", "--target", stock, "--patches", lib)
    assert result.exit_code == 2 and "cannot read the contract" in result.output


def test_load_set_keeps_the_declarations(tmp_path, stock):
    patch_set = load_set(library_with(tmp_path, stock, PATCHED) / "demo")
    assert [r.kind for r in patch_set.contract] == [
        "model-types",
        "guarded-read",
        "attribute",
        "base",
        "imported",
        "methods",
        "attribute",
        "attribute",
        "methods",
    ]
    assert patch_set.contract[-1].applies_to(Version("0.15.0"))
    assert not patch_set.contract[-1].applies_to(Version("0.14.1"))
    # local labels and dev/rc builds count as the release they belong to
    assert patch_set.contract[-1].applies_to(Version("0.15.0rc1"))
    assert patch_set.contract[-1].applies_to(Version("0.15.0.dev3+g1234.cu121"))


def test_a_contract_is_validated_once_a_process_and_again_once_its_file_changed(tmp_path, stock, monkeypatch):
    """series.requirements keeps a contract's requirements by its entries (cli.percommand.KEPT): loading the
    library again (each command in process, fleet's agent) does not validate the same entries again, and a
    changed contract file is read as it now is, a malformed one refused."""
    monkeypatch.setattr(requirements, "_PARSED", {})
    validated = []
    parse_entry = requirements._parse_entry
    monkeypatch.setattr(
        requirements, "_parse_entry", lambda entry, where: validated.append(where) or parse_entry(entry, where)
    )
    lib = library_with(tmp_path, stock, PATCHED)
    first = load_set(lib / "demo").contract
    assert len(validated) == len(first) == 9
    assert load_set(lib / "demo").contract == first and len(validated) == 9, "the same contract was validated again"
    contract = lib / "demo" / "contract.toml"
    contract.write_text(CONTRACT.replace('methods = ["set_aux_layers"]', 'methods = ["set_aux_layers", "other"]'))
    assert load_set(lib / "demo").contract[-1]["methods"] == ["set_aux_layers", "other"]
    contract.write_text(CONTRACT.replace('access = "load"', 'access = "loads"', 1))
    with pytest.raises(BadInput, match=r"requirement #3 \(attribute\): access 'loads' is not one of"):
        load_set(lib / "demo")
    contract.write_text(CONTRACT)
    assert load_set(lib / "demo").contract == first


def test_kept_requirements_hold_nothing_the_caller_changes_and_are_bounded(monkeypatch):
    monkeypatch.setattr(requirements, "_PARSED", {})
    entries = [{"file": "m.py", "kind": "imported", "names": ["A"]}]
    [kept] = parse_requirements(entries, "test")
    entries[0]["names"].append("B")
    assert kept["names"] == ["A"]
    assert parse_requirements(entries, "test")[0]["names"] == ["A", "B"]
    assert parse_requirements([{"file": "m.py", "kind": "imported", "names": ["A"]}], "test") == (kept,)
    with pytest.raises(BadInput, match="must be a non-empty list of strings"):  # a tuple is no TOML array
        parse_requirements([{"file": "m.py", "kind": "imported", "names": ("A",)}], "test")
    for n in range(requirements._PARSED_MOST + 5):
        parse_requirements([{"file": f"m{n}.py", "kind": "imported", "names": ["A"]}], "test")
    assert 0 < len(requirements._PARSED) <= requirements._PARSED_MOST


# --- the check itself on sources ---------------------------------------------------------------


def judge(source: str, **fields) -> tuple[bool, str]:
    entry = {"file": "m.py", **fields}
    [req] = parse_requirements([entry], "test")
    result = evaluate(req, Module(__import__("ast").parse(textwrap.dedent(source))))
    return result.ok, result.message


KIMI_TARGET = {
    "class": "KimiK25ForConditionalGeneration",
    "has": ["media_placeholder_token_id"],
    "lacks": ["image_token_id"],
}


def guarded(source: str) -> tuple[bool, str]:
    return judge(source, kind="guarded-read", attribute="image_token_index", on="target.config", target=KIMI_TARGET)


@pytest.mark.parametrize(
    "source",
    [
        # a test for the attribute itself
        "if hasattr(target.config, 'image_token_index'):\n    x = target.config.image_token_index\n",
        "if getattr(target.config, 'image_token_index', None) is not None:\n    x = target.config.image_token_index\n",
        "if getattr(target.config, 'image_token_index', None):\n    x = target.config.image_token_index\n",
        "x = target.config.image_token_index if hasattr(target.config, 'image_token_index') else 0\n",
        "x = hasattr(target.config, 'image_token_index') and target.config.image_token_index\n",
        # a test for an attribute only the target has, or lacks
        "if hasattr(target.config, 'media_placeholder_token_id'):\n    x = 1\n"
        "else:\n    x = target.config.image_token_index\n",
        "if hasattr(target.config, 'image_token_id'):\n    x = target.config.image_token_index\n",
        # a check of the target's class
        "if name == 'KimiK25ForConditionalGeneration':\n    x = 1\nelse:\n    x = target.config.image_token_index\n",
        "if name in ('A', 'KimiK25ForConditionalGeneration'):\n    x = 1\n"
        "elif y:\n    x = target.config.image_token_index\n",
        "if name != 'KimiK25ForConditionalGeneration':\n    x = target.config.image_token_index\n",
        "if not isinstance(target, KimiK25ForConditionalGeneration):\n    x = target.config.image_token_index\n",
        "if a or isinstance(target, (B, models.KimiK25ForConditionalGeneration)):\n    pass\n"
        "else:\n    x = target.config.image_token_index\n",
        # an exception handler
        "try:\n    x = target.config.image_token_index\nexcept AttributeError:\n    x = 0\n",
        "try:\n    x = target.config.image_token_index\nexcept (KeyError, AttributeError):\n    x = 0\n",
        # no read at all
        "x = getattr(target.config, 'image_token_index', 0)\n",
    ],
)
def test_guarded_reads(source):
    ok, message = guarded(source)
    assert ok, message


@pytest.mark.parametrize(
    "source",
    [
        "x = target.config.image_token_index\n",
        "if supports_multimodal(target):\n    x = target.config.image_token_index\n",
        "if name in ['QwenVL', 'Pixtral']:\n    x = 1\nelse:\n    x = target.config.image_token_index\n",
        "if name == 'KimiK25ForConditionalGeneration':\n    x = target.config.image_token_index\n",
        "if hasattr(other.config, 'image_token_index'):\n    x = target.config.image_token_index\n",
        "if hasattr(target.config, 'media_placeholder_token_id'):\n    x = target.config.image_token_index\n",
        "if getattr(target.config, 'image_token_index'):\n    x = target.config.image_token_index\n",
        "try:\n    x = target.config.image_token_index\nexcept ValueError:\n    x = 0\n",
        "try:\n    pass\nexcept AttributeError:\n    x = target.config.image_token_index\n",
        "x = a or target.config.image_token_index\n",
        "if name == 'KimiK25ForConditionalGeneration' or y:\n    x = target.config.image_token_index\n",
    ],
)
def test_unguarded_reads(source):
    ok, message = guarded(source)
    assert not ok
    assert message.startswith("unguarded read of target.config.image_token_index (line ")


def test_guarded_read_ignores_other_objects_and_stores():
    ok, message = guarded("self.config.image_token_index = 1\nx = draft.cfg.image_token_index\n")
    assert ok and message == "no read of target.config.image_token_index in the module"


def test_model_types_follow_the_codes_own_matching():
    substring = "def f(t):\n    L = ['deepseek', 'kimi_k25']\n    return any(s in t for s in L)\n"
    membership = "def f(t):\n    L = ['deepseek', 'kimi_k25']\n    return t in L\n"
    fields = dict(kind="model-types", function="f", variable="L")
    assert judge(substring, **fields, model_types=["deepseek_v3"])[0]  # "deepseek" in "deepseek_v3"
    ok, message = judge(membership, **fields, model_types=["deepseek_v3", "kimi_k25"])
    assert not ok and "model type(s) deepseek_v3 (" in message and "members: `model_type in list`" in message
    ok, message = judge(substring, **fields, model_types=["kimi_k2"])
    assert not ok and "model type(s) kimi_k2 (" in message
    ok, message = judge("def f(t):\n    L = ['x']\n    return t.startswith(tuple(L))\n", **fields, model_types=["x"])
    assert not ok and message.startswith("cannot tell how f matches model types against L")
    ok, message = judge("def f(t):\n    L = make()\n", **fields, model_types=["x"])
    assert not ok and message == "no list literal of strings assigned to L in f"
    ok, message = judge("def g(): pass\n", **fields, model_types=["x"])
    assert not ok and message == "function f not found"


def test_imported_accepts_import_forms_and_definitions_but_not_type_checking_only():
    names = dict(kind="imported", names=["A", "B", "C", "D", "pkg"])
    source = (
        "from m import (\n    A,\n)\nfrom n import X as B\nimport pkg.sub\nclass C: pass\n"
        "try:\n    from o import D\nexcept ImportError:\n    D = None\n"
    )
    assert judge(source, **names) == (True, "A imported, B imported, C defined, D imported, pkg imported")
    ok, message = judge(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from m import A\n", kind="imported", names=["A"]
    )
    assert not ok and message == "A not imported or defined at module level"


def test_methods_and_bases_through_in_module_base_classes():
    source = "class Mixin(SupportsX):\n    def m(self): pass\nclass Model(nn.Module, Mixin):\n    n = m2 = None\n"
    assert judge(source, kind="methods", **{"class": "Model"}, methods=["m", "n"]) == (True, "Model has m, n")
    assert judge(source, kind="base", **{"class": "Model"}, base="SupportsX") == (
        True,
        "Model has base SupportsX (through Mixin)",
    )
    assert judge(source, kind="base", **{"class": "Model"}, base="Module")[0]  # dotted nn.Module
    ok, message = judge(source, kind="base", **{"class": "Model"}, base="SupportsY")
    assert not ok and message == "Model does not have base SupportsY (its bases: nn.Module, Mixin)"
    ok, message = judge(source, kind="methods", **{"class": "Nope"}, methods=["m"])
    assert not ok and message == "class Nope not found"


def test_unparsable_file_fails_the_requirement():
    [req] = parse_requirements([{"file": "m.py", "kind": "imported", "names": ["A"]}], "test")
    ctx = CheckContext(
        paths=[],
        read=lambda p: b"def (:\n",
        python=None,
        version=Version("0.16.0"),
        patch_set=type("Set", (), {"contract": (req,)})(),
    )
    [result] = CHECK.run(ctx)
    assert not result.ok and result.check == "contract" and "m.py does not parse" in result.message


def test_unknown_version_skips_version_bound_requirements_with_a_warning():
    reqs = parse_requirements(
        [
            {"file": "m.py", "kind": "imported", "names": ["A"], "versions": ">=1"},
            {"file": "m.py", "kind": "imported", "names": ["A"]},
        ],
        "test",
    )
    ctx = CheckContext(
        paths=[], read=lambda p: b"A = 1\n", python=None, version=None, patch_set=type("Set", (), {"contract": reqs})()
    )
    warning, result = CHECK.run(ctx)
    assert not warning.failed and warning.level == "warning" and "version is unknown" in warning.message
    assert result.ok


def test_parse_requirements_rejects_a_non_list():
    with pytest.raises(BadInput):
        parse_requirements({"file": "x"}, "test")
    assert isinstance(parse_requirements([], "test"), tuple)
    assert Requirement  # the type the library stores


def test_remembered_verdicts_are_the_evaluated_ones_and_a_forged_one_is_not_believed(run, tmp_path, stock, monkeypatch):
    """The contract's results on a content are kept across runs (base/remembered.py): the same
    results, in the same order; an entry this user's patchkit did not seal is evaluated again."""
    from patchkit.checks import contract

    monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(tmp_path / "cache"))
    path, (old, new), expected = FAULTS["missing method"]
    lib = library_with(tmp_path, stock, dict(PATCHED, **{path: edit(PATCHED[path], (old, new))}))
    _, first = verify(run, stock, lib)
    entries = sorted((tmp_path / "cache" / "verdicts" / "contract").rglob("*.json"))
    assert len(entries) == len({c["path"] for c in first})
    parsed_again = []
    with monkeypatch.context() as counting:
        counting.setattr(contract, "_load", lambda data, path: parsed_again.append(path))
        _, again = verify(run, stock, lib)
    assert again == first and parsed_again == []
    for entry in entries:  # every requirement passes, says someone without the key
        data = json.loads(entry.read_text())
        data["verdict"] = [dict(row, ok=True) for row in data["verdict"]]
        entry.write_text(json.dumps(data))
    result, forged = verify(run, stock, lib)
    assert result.exit_code == 1 and forged == first
    assert failures(forged)[0].startswith(expected)


def test_a_remembered_verdict_whose_level_is_no_check_level_is_evaluated_again(run, tmp_path, stock, monkeypatch):
    """A sealed entry whose failing rows carry a level patchkit does not know (neither error nor
    warning) is not believed: read as it was, the failure would not count and verify would pass."""
    from patchkit.base import remembered, seal

    monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(tmp_path / "cache"))
    path, (old, new), expected = FAULTS["missing method"]
    lib = library_with(tmp_path, stock, dict(PATCHED, **{path: edit(PATCHED[path], (old, new))}))
    _, first = verify(run, stock, lib)
    for entry in sorted((tmp_path / "cache" / "verdicts" / "contract").rglob("*.json")):
        verdict = [dict(row, level="bogus") for row in json.loads(entry.read_text())["verdict"]]
        mark = seal.seal(remembered._SEAL_KIND, f"contract/{entry.stem}", seal.canonical(verdict))
        entry.write_text(json.dumps({"seal": mark, "verdict": verdict}))
    result, again = verify(run, stock, lib)
    assert result.exit_code == 1 and again == first
    assert failures(again)[0].startswith(expected)


def test_a_small_source_is_parsed_once_and_a_large_ones_tree_is_not_kept():
    small = b"x = 1\n"
    assert parsed(small, "a.py") is parsed(small, "a.py")
    large = b"#" + b"x" * LARGEST_KEPT + b"\n"  # one comment: as large, parsed in ms (175k statements took 2 s)
    assert len(large) > LARGEST_KEPT
    assert parsed(large, "b.py") is not parsed(large, "b.py")


def test_on_a_drifted_tree_a_check_the_series_fails_too_is_not_given_the_drift_fix(run, tmp_path, stock):
    """read27: verify on a drifted tree gave the drift's fix (revert --force, then apply) to every
    failed check, even one that fails on what that fix leaves (the series' fault)."""
    lib = library_with(tmp_path, stock, PATCHED)
    assert run("apply", "--target", stock, "--patches", lib).exit_code == 0
    contract = lib / "demo" / "contract.toml"  # the library now asks for a model type the series does not add
    contract.write_text(
        contract.read_text().replace('["deepseek_v3", "kimi_k2"]', '["deepseek_v3", "kimi_k2", "mistral"]')
    )
    (stock / MODEL).write_text((stock / MODEL).read_text() + "# my edit\n")
    result = run("verify", "--target", stock, "--patches", lib)
    assert result.exit_code == 1, result.output
    said = " ".join(result.output.split())
    contract_fix = said.split("contract", 1)[1]
    assert "the series fails this on the stock files too" in contract_fix.split("drifted", 1)[0], result.output
    assert f"`patchkit revert --target {stock} --patches {lib} --force` (keeps a copy of the edits)" in said
