"""Just enough of vLLM for the launch worker to import from a small test tree (its model registry,
interfaces and plugin loader), and general plugins (vllm.general_plugins entry points) written beside
it: the preflight that asks vLLM itself (tests/test_preflight.py, test_launch_review6..8)."""

from __future__ import annotations

import sys
import textwrap
import venv
from pathlib import Path

from helpers import run_cli

# Just enough of vLLM for its registry and interfaces to import from the test tree: the registry's
# tables are the tree's own registry.py, so the class vLLM resolves is the tree's file as it stands.
FAKE_INTERFACES = """
class SupportsPP:
    pass


class SupportsMultiModal:
    pass


class SupportsEagle3:
    supports_eagle3 = True


def supports_eagle3(model):
    return getattr(model, "supports_eagle3", False)
"""


FAKE_MODELS_INIT = """
import importlib

from . import registry


class _LazyRegisteredModel:
    def __init__(self, module, name):
        self.module, self.name = module, name

    def load_model_cls(self):
        return getattr(importlib.import_module(f"{__name__}.{self.module}"), self.name)


class _ModelRegistry:
    def __init__(self, *tables):
        self.models = {arch: _LazyRegisteredModel(*where) for table in tables for arch, where in table.items()}


ModelRegistry = _ModelRegistry(registry._TEXT_GENERATION_MODELS, registry._MULTIMODAL_MODELS)
"""


# Just enough of vllm.plugins for the test tree: entry points of the group, picked by VLLM_PLUGINS.
FAKE_PLUGINS = """
import os
import re
from importlib.metadata import entry_points

DEFAULT_PLUGINS_GROUP = "vllm.general_plugins"
plugins_loaded = False


def load_plugins_by_group(group):
    allowed = os.environ.get("VLLM_PLUGINS")
    names = None if allowed is None else allowed.split(",")
    return {p.name: p.load() for p in entry_points(group=group) if names is None or p.name in names}


def load_general_plugins():
    for func in load_plugins_by_group(DEFAULT_PLUGINS_GROUP).values():
        func()
"""


def make_importable(tree: Path) -> dict[str, str]:
    """The test tree as a vllm the worker imports (through PYTHONPATH): the environment to run with."""
    models = tree / "vllm" / "model_executor" / "models"
    (tree / "vllm" / "model_executor" / "__init__.py").write_text("")
    (models / "__init__.py").write_text(FAKE_MODELS_INIT)
    (models / "interfaces.py").write_text(FAKE_INTERFACES)
    (tree / "vllm" / "plugins").mkdir(exist_ok=True)
    (tree / "vllm" / "plugins" / "__init__.py").write_text(FAKE_PLUGINS)
    return {"PYTHONPATH": str(tree)}


# The registry's register_model(architecture, "module:Class"), as an out-of-tree plugin calls it.
FAKE_REGISTER = """

class _ByName:
    def __init__(self, where):
        self.where = where

    def load_model_cls(self):
        module, name = self.where.split(":")
        return getattr(importlib.import_module(module), name)


def _register_model(architecture, where):
    ModelRegistry.models[architecture] = _ByName(where)


ModelRegistry.register_model = _register_model
"""


ARCH = "DeepseekV3ForCausalLM"


def importable_with_plugins(tree: Path) -> dict[str, str]:
    env = make_importable(tree)
    models = tree / "vllm" / "model_executor" / "models"
    (models / "__init__.py").write_text((models / "__init__.py").read_text() + FAKE_REGISTER)
    return env


def write_plugin(where: Path, name: str, body: str) -> Path:
    """A package with a vllm.general_plugins entry point `name` -> `<name>_mod:register`."""
    where.mkdir(parents=True, exist_ok=True)
    (where / f"{name}_mod.py").write_text(textwrap.dedent(body))
    info = where / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[vllm.general_plugins]\n{name} = {name}_mod:register\n")
    return where


PLAIN_CLASS = """
    class NoEagle3Deepseek:
        pass


    def register():
        from vllm.model_executor.models import ModelRegistry

        ModelRegistry.register_model("DeepseekV3ForCausalLM", "{name}_mod:NoEagle3Deepseek")
"""


def preflight_importing(tree: Path, library: Path, command: list[str], env: dict[str, str]):
    args = ["preflight", "--target", tree, "--python", sys.executable, "--patches", library, "--format", "json"]
    return run_cli(*args, "--", *command, env=env)


# vLLM's own dist-info entry_points.txt: its general plugins are no plugin to name.
VLLMS_OWN = """\
[console_scripts]
vllm = vllm.entrypoints.cli.main:main

[vllm.general_plugins]
lora_filesystem_resolver = vllm.plugins.lora_resolvers.filesystem_resolver:register_filesystem_resolver
lora_hf_hub_resolver = vllm.plugins.lora_resolvers.hf_hub_resolver:register_hf_hub_resolver
"""


def venv_importing(tree: Path, root: Path) -> Path:
    """A venv whose python imports vllm from `tree` (a .pth), and its own `vllm` script run by it."""
    venv.create(root, with_pip=False, symlinks=True)
    [site] = root.glob("lib/python*/site-packages")
    (site / "tree.pth").write_text(f"{tree}\n")
    script = root / "bin" / "vllm"
    script.write_text(f"#!{root / 'bin' / 'python'}\nimport sys\n")
    script.chmod(0o755)
    return script


def engine_args(*options: str, config: str, head: str = "", init: str = "") -> str:
    """vllm/engine/arg_utils.py of a stand-in vLLM: AsyncEngineArgs, whose parser takes `options`
    (add_argument's arguments, one string each) and which keeps what it parsed in self.values;
    `config` is the body of its create_engine_config(), `init` more of __init__'s, `head` comes first."""
    added = "".join(f"        parser.add_argument({option})\n" for option in options)
    lines = "".join(f"\n        {line}" for line in textwrap.dedent(init).strip().splitlines())
    body = textwrap.indent(textwrap.dedent(config).strip(), " " * 8)
    return f"""{textwrap.dedent(head).strip()}


class AsyncEngineArgs:
    def __init__(self, **values):
        self.values = values{lines}

    @staticmethod
    def add_cli_args(parser):
{added}        return parser

    @classmethod
    def from_cli_args(cls, args):
        return cls(**vars(args))

    def create_engine_config(self):
{body}
"""


# vLLM's engine arguments, as a stand-in whose engine-config validation refuses a missing model directory
# and every EAGLE-3 launch, as stock 0.16.0 refuses DeepSeek-V3's (test_preflight, test_launch26)
REFUSING_OPTIONS = (
    '"--model"',
    '"--speculative-config", type=json.loads, default=None',
    '"--max-model-len", type=int, default=None',
)
REFUSING_ARG_UTILS = engine_args(
    *REFUSING_OPTIONS,
    head="import json\nimport os\nimport re",
    config="""
        if not os.path.isdir(self.values["model"]):
            raise ValueError(f"no model directory {self.values['model']} here ({os.getcwd()})")
        spec = self.values["speculative_config"] or {}
        if spec.get("method") == "eagle3":
            raise ValueError("Eagle3 is only supported for ['llama', 'qwen'] models. Got model_type='deepseek_v3'")
        return {"model": self.values["model"]}
    """,
)


def write_engine_args(root: Path, source: str) -> Path:
    """`root`'s vllm/ importable, with `source` as its engine arguments (vllm/engine/arg_utils.py)."""
    (root / "vllm" / "engine").mkdir(parents=True, exist_ok=True)
    if not (root / "vllm" / "__init__.py").exists():
        (root / "vllm" / "__init__.py").write_text("")
    (root / "vllm" / "engine" / "__init__.py").write_text("")
    (root / "vllm" / "engine" / "arg_utils.py").write_text(source)
    return root


def write_refusing_engine_args(root: Path) -> Path:
    """`root`'s vllm/ importable, with REFUSING_ARG_UTILS as its engine arguments."""
    return write_engine_args(root, REFUSING_ARG_UTILS)
