"""Launch findings of review41a left open after session 31: a Ray launch's other nodes (F2), ..."""

from __future__ import annotations

import datetime
import json
import os
import sys
from pathlib import Path

import pytest
import yaml
from helpers import run_cli_in_process, run_cli_read_only
from launch_fixtures import (  # noqa: F401  (the fixture `setup`)
    DEEPSEEK_V3,
    DRAFTER,
    applied,
    applied_finding,
    eagle3_and_tools,
    serve,
    write_eagle3_setup,
    write_model,
)

from patchkit.launch.command import parse
from patchkit.tree import target


def preflight_json(tree: Path, lib: Path, *launch: str) -> tuple[int, dict]:
    """(exit code, the JSON document) of a --no-import preflight of `launch`."""
    done = run_cli_read_only(
        "preflight", "--target", tree, "--patches", lib, "--format", "json", "--no-import", "--", *launch
    )
    return done.returncode, json.loads(done.stdout)


def preflight_notes(tree: Path, lib: Path, *launch: str) -> tuple[int, dict, list[str]]:
    """(exit code, the JSON document, the text's note lines) of a --no-import preflight of `launch`."""
    code, document = preflight_json(tree, lib, *launch)
    said = run_cli_read_only("preflight", "--target", tree, "--patches", lib, "--no-import", "--", *launch)
    assert said.returncode == code, said.stdout + said.stderr
    lines = (said.stdout + said.stderr).splitlines()
    text = [line.removeprefix("note: ") for line in lines if line.startswith("note: ")]
    return code, document, text


@pytest.mark.parametrize(
    ("words", "named"),
    [
        (["--distributed-executor-backend", "ray"], "--distributed-executor-backend ray"),
        (["--distributed-executor-backend=ray"], "--distributed-executor-backend ray"),
        (["-dpb", "ray", "-dp", "2"], "--data-parallel-backend ray"),
        (["--distributed-executor-backend", "mp"], None),
        ([], None),
    ],
)
def test_a_ray_launch_says_the_other_nodes_trees_are_not_judged_here(tmp_path, words, named):
    """F2: Ray starts workers on other nodes, each importing its own tree: the note names the
    command that judges them, in text and JSON alike."""
    tree, lib = write_eagle3_setup(tmp_path)
    applied(tree, lib)
    launch = serve(write_model(tmp_path / "target", DEEPSEEK_V3), write_model(tmp_path / "drafter", DRAFTER), *words)
    _code, document, text = preflight_notes(tree, lib, *launch)
    notes = document["notes"]
    ray = [note for note in notes if "Ray" in note]
    assert [note for note in text if "Ray" in note] == ray
    if named is None:
        assert ray == []
    else:
        assert len(ray) == 1 and ray[0].startswith(f"{named}: "), notes
        assert "patchkit fleet verify" in ray[0] and "not judge" in ray[0]


# ParallelConfig.__post_init__'s pick when no backend is given, as 0.11.0 lays it out (written here), and
# as 0.11.1 on do: the launch refused at start
PICKS_RAY = """class ParallelConfig:
    def __post_init__(self):
        if self.distributed_executor_backend is None and self.world_size > 1:
            backend = "mp"
            if current_platform.is_tpu() and envs.VLLM_XLA_USE_SPMD:
                backend = "uni"
            elif (current_platform.is_cuda()
                  and cuda_device_count_stateless() < self.world_size):
                if not ray_found:
                    raise ValueError("Unable to load Ray")
                backend = "ray"
            self.distributed_executor_backend = backend
"""
REFUSES = PICKS_RAY.replace(
    'if not ray_found:\n                    raise ValueError("Unable to load Ray")\n                backend = "ray"',
    'raise ValueError("World size is larger")',
)


@pytest.mark.parametrize(
    ("parallel", "ray", "words", "world"),
    [
        (PICKS_RAY, True, ["-tp", "2"], 2),
        (PICKS_RAY, True, ["-tp", "2", "--pipeline-parallel-size", "2"], 4),
        (PICKS_RAY, True, ["-tp", "2", "--distributed-executor-backend", "mp"], None),
        (PICKS_RAY, True, [], 4),  # serve()'s -tp 4
        (PICKS_RAY, True, ["-tp", "1"], None),  # one worker: vLLM runs it in its own process
        (PICKS_RAY, False, ["-tp", "2"], None),  # no Ray: vLLM refuses a world its GPUs lack
        (REFUSES, True, ["-tp", "2"], None),
    ],
)
def test_a_launch_vllm_puts_on_ray_by_itself_says_the_other_nodes_trees_are_not_judged(
    tmp_path, parallel, ray, words, world
):
    """launch32 F2's rest: with no backend given, vLLM 0.11.0 starts the workers as Ray actors where
    the node has fewer GPUs than tensor x pipeline parallel (Ray installed); patchkit cannot see the
    GPUs, so the note says when, and how to keep the workers on this node."""
    tree, lib = write_eagle3_setup(tmp_path)
    applied(tree, lib, {"vllm/config/parallel.py": parallel})
    if ray:
        (tree / "ray-2.40.0.dist-info").mkdir()
        (tree / "ray-2.40.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: ray\nVersion: 2.40.0\n")
    launch = serve(write_model(tmp_path / "target", DEEPSEEK_V3), write_model(tmp_path / "drafter", DRAFTER), *words)
    _code, document, text = preflight_notes(tree, lib, *launch)
    notes = document["notes"]
    said = [note for note in notes if "Ray" in note]
    assert [note for note in text if "Ray" in note] == said
    if world is None:
        assert said == [], notes
    else:
        assert len(said) == 1 and f"starts the {world} workers" in said[0] and "patchkit fleet verify" in said[0]
        assert f"fewer than {world} GPUs" in said[0] and "give --distributed-executor-backend mp" in said[0]


# --- F6: what vLLM refuses at start is said so ---------------------------------------------------------


def test_a_tp_the_targets_heads_refuse_is_the_targets_refusal_at_start(tmp_path):
    """-tp 3 with a target of 8 heads and a drafter of 4: vLLM's ModelConfig refuses the target at start
    (verify_with_parallel_config); the drafter's heads are never built, so nothing says "after the load"."""
    target = write_model(tmp_path / "t", {**DEEPSEEK_V3, "num_attention_heads": 8})
    drafter = write_model(tmp_path / "d", {**DRAFTER, "num_attention_heads": 4, "num_key_value_heads": 4})
    launch = [*serve(target, drafter)[:-4], "--speculative-config", serve(target, drafter)[-1], "-tp", "3"]
    command = applied_finding(tmp_path / "a", {}, launch, "command")
    assert command is not None and command["result"] == "fail", command
    assert command["message"].startswith("-tp 3 does not divide the target's 8 attention heads: vLLM refuses"), command
    assert "at start" in command["message"] and command["fix"] == "give a -tp that divides 8"
    drafted = applied_finding(tmp_path / "b", {}, launch, "drafter-architecture")
    assert drafted is None or "after the target's load" not in drafted["message"], drafted
    # a -tp the target's heads take: the drafter's own heads are judged as before
    launch[-1] = "8"
    assert applied_finding(tmp_path / "c", {}, launch, "command") is None
    drafted = applied_finding(tmp_path / "e", {}, launch, "drafter-architecture")
    assert drafted is not None and "its 4 attention heads do not divide by -tp 8" in drafted["message"], drafted


# llama.py's LlamaMLP as 0.11-0.34 build it (abridged): its linears split intermediate_size over -tp
LLAMA_MLP = """
class LlamaMLP:
    def __init__(self, hidden_size, intermediate_size):
        self.gate_up_proj = MergedColumnParallelLinear(hidden_size, [intermediate_size] * 2)
"""


@pytest.mark.parametrize(("tp", "after_load"), [("3", False), ("4", True)])
def test_a_drafter_mlp_split_is_not_said_where_the_target_refuses_the_tp_at_start(tmp_path, tp, after_load):
    """The same for the drafter's intermediate_size: with a -tp the target's 8 heads refuse, vLLM never
    builds the drafter (seen on the 0.16.0 tree: "does not divide by -tp 3 ... after the target's load")."""
    target = write_model(tmp_path / "t", {**DEEPSEEK_V3, "num_attention_heads": 8})
    drafter = write_model(tmp_path / "d", {**DRAFTER, "num_attention_heads": 12, "intermediate_size": 514})
    launch = [*serve(target, drafter)[:-4], "--speculative-config", serve(target, drafter)[-1], "-tp", tp]
    files = {"vllm/model_executor/models/llama.py": LLAMA_MLP}
    drafted = applied_finding(tmp_path, files, launch, "drafter-architecture")
    said = drafted is not None and f"intermediate_size 514 does not divide by -tp {tp}" in drafted["message"]
    assert said is after_load, drafted


def test_a_model_path_too_long_for_the_file_system_is_said_once_with_a_fix_that_works(tmp_path):
    """ENAMETOOLONG: no model can be there (vLLM then takes the name for a hub id and refuses it); the
    message named the path twice, whole, and said to put a file there."""
    tree, lib = write_eagle3_setup(tmp_path)
    long = str(tmp_path / ("m" * 300))
    for model in (long, f"{long}/inner"):
        done = run_cli_read_only(
            "preflight", "--target", tree, "--patches", lib, "--no-import", "--", "vllm", "serve", model
        )
        said = done.stdout + done.stderr
        assert done.returncode == 4, said
        assert said.count(str(tmp_path / "mmm")) == 1 and "longer than the file system allows" in said, said
        assert "put the file itself there" not in said and "a shorter one, or a symlink to it" in said, said


MICRO = "vllm/config/vllm.py"
# VllmConfig.__post_init__'s assert as 0.12-0.16 word it (abridged)
MICRO_ASSERT = """
class VllmConfig:
    def __post_init__(self):
        if self.parallel_config.use_ubatching:
            a2a_backend = self.parallel_config.all2all_backend
            assert a2a_backend in ["deepep_low_latency", "deepep_high_throughput"], (
                "Microbatching currently only supports the deepep_low_latency and "
                f"deepep_high_throughput all2all backend. {a2a_backend} is not supported."
            )
"""
# as 0.34 words it: the backends taken differ by platform; every platform takes the CUDA ones
MICRO_PLATFORMS = """
class VllmConfig:
    def __post_init__(self):
        if self.parallel_config.use_ubatching:
            a2a_backend = self.parallel_config.all2all_backend
            if current_platform.is_rocm():
                supported_backends = ["deepep_low_latency", "mori", "allgather_reducescatter"]
            else:
                supported_backends = ["deepep_low_latency", "mori"]
            assert a2a_backend in supported_backends, (
                "Microbatching currently only supports the "
                f"{', '.join(supported_backends)} all2all backends on this platform."
            )
"""
WRAPPER = "vllm/v1/worker/gpu_ubatch_wrapper.py"
WRAPPER_CAT = """
import torch

class UBatchWrapper:
    def _run_ubatches(self, ubatch_metadata, model):
        sorted_results = [model(m) for m in ubatch_metadata]
        return torch.cat(sorted_results, dim=0)
"""
MOE = {**DEEPSEEK_V3, "n_routed_experts": 256}
PARALLEL = "vllm/config/parallel.py"
PARALLEL_DEFAULTS = """
class ParallelConfig:
    dbo_decode_token_threshold: int = 32
    dbo_prefill_token_threshold: int = 512
"""


@pytest.mark.parametrize(
    ("config", "options", "env", "at_start"),
    [
        (MICRO_ASSERT, ["--all2all-backend", "deepep_low_latency"], [], None),
        (MICRO_ASSERT, [], [], "allgather_reducescatter"),
        (MICRO_ASSERT, ["--all2all-backend", "naive"], [], "naive"),
        (MICRO_ASSERT, [], ["VLLM_ALL2ALL_BACKEND=deepep_low_latency"], "allgather_reducescatter"),  # not read here
        (MICRO_PLATFORMS, ["--all2all-backend", "mori"], [], None),
        (MICRO_PLATFORMS, ["--all2all-backend", "allgather_reducescatter"], [], "allgather_reducescatter"),
        (None, [], [], None),  # the assert not read: the join's words alone
    ],
)
def test_micro_batching_without_a_backend_vllm_takes_is_refused_at_start(tmp_path, config, options, env, at_start):
    """--enable-dbo -dp 2 with an all2all backend VllmConfig's assert refuses: vLLM stops at start, not
    after the load; with one it takes, the join's TypeError after the load stands."""
    command = ["env", *env, *serve(write_model(tmp_path / "t", MOE), write_model(tmp_path / "d", DRAFTER))]
    command += ["-dp", "2", "--enable-expert-parallel", "--enable-dbo", *options]
    found = applied_finding(
        tmp_path, {WRAPPER: WRAPPER_CAT, MICRO: config, PARALLEL: PARALLEL_DEFAULTS}, command, "micro-batching"
    )
    assert found is not None and found["result"] == "fail", found
    assert found["fix"] == "drop --enable-dbo: vLLM then runs each batch whole", found
    assert "raises TypeError there, after the load" in found["message"], found
    if at_start is None:
        assert "at start" not in found["message"], found
    else:
        assert f"vLLM refuses micro-batching at start with the {at_start} all2all backend" in found["message"], found


# --- F7: a tool-call parser the release does not register needs no tool-call set ----------------------

REGISTRY = "vllm/tool_parsers/__init__.py"


@pytest.mark.parametrize(("parser", "needed"), [("demo", True), ("demo_v2", False)])
def test_a_tool_call_parser_the_release_lacks_asks_for_no_tool_call_set(setup, parser, needed):
    """vLLM refuses --tool-call-parser NAME at start where its registry holds no NAME (demo_v2, which
    the tools set serves where a release has it): the command finding says so; that set is no fix
    here (it adds no such parser), so it is not asked for."""
    tree, lib, target, _ = setup
    (tree / REGISTRY).write_text('_TOOL_PARSERS_TO_REGISTER = {\n    "demo": ("demo_tool_parser", "Demo")\n}\n')
    launch = ["vllm", "serve", str(target), "--enable-auto-tool-choice", "--tool-call-parser", parser]
    done = run_cli_read_only(
        "preflight", "--target", tree, "--patches", lib, "--no-import", "--format", "json", "--", *launch
    )
    failed = {f["check"]: f for f in json.loads(done.stdout)["findings"] if not f["ok"]}
    assert done.returncode == 1, done.stdout
    tools = "tree-state" in failed and "tools" in failed["tree-state"]["message"]
    assert tools is needed, failed
    assert ("command" in failed) is not needed, failed
    if not needed:
        assert "registers no tool-call parser of that name" in failed["command"]["message"], failed
        assert "demo_v2" in failed["command"]["message"] and "tools" not in (failed["command"]["fix"] or "")


# --- F3: --config YAML timestamps are the text written, as `vllm serve` reads them --------------------

YAML_DATES = (
    "speculative-config:\n  model: /m/d\n  revision: 2024-01-01\n  when: 2001-12-14t21:59:43.10-05:00\n"
    "  spaced: 2001-12-14 21:59:43.10 -5\n"
)


def test_config_yaml_timestamps_are_read_as_the_text_written(tmp_path):
    """lm-format-enforcer, imported with vLLM's serve parser, has SafeLoader build timestamps as strings:
    vLLM reads the text as written (tests/vllm_import/test_serve_parser_real.py asks it); patchkit built
    dates and refused the launch (exit 2: not JSON serializable)."""
    (tmp_path / "c.yaml").write_text(YAML_DATES)
    command = parse(["vllm", "serve", "/m/a", "--config", str(tmp_path / "c.yaml")], "0.16.0")
    assert command.speculative_config == {
        "model": "/m/d",
        "revision": "2024-01-01",
        "when": "2001-12-14t21:59:43.10-05:00",
        "spaced": "2001-12-14 21:59:43.10 -5",
    }
    assert yaml.safe_load("a: 2024-01-01") == {"a": datetime.date(2024, 1, 1)}  # PyYAML's own loader untouched


# --- F9: a tool parser plugin built on a patched parser needs its set -----------------------------------

USES_THE_PATCHED_PARSER = [
    "from vllm.tool_parsers.demo_tool_parser import parse\n",
    "import vllm.tool_parsers.demo_tool_parser as demo\n",
    "from vllm.tool_parsers import demo_tool_parser\n",
    "from vllm.tool_parsers import ToolParserManager\nBase = ToolParserManager.get_tool_parser('demo')\n",
    "import vllm.entrypoints.openai.tool_parsers as parsers\nBase = parsers.DemoToolParser\n",  # 0.11 binds it
    "import vllm.tool_parsers as parsers\nBase = getattr(parsers, 'DemoToolParser')\n",
]


def plugin_launch(target: Path, plugin: Path, source: str) -> list[str]:
    """`target` served with the tool parser plugin `plugin`: `source`, then its parser 'mine'."""
    plugin.write_text(source + "@ToolParserManager.register_module('mine')\nclass Mine:\n    pass\n")
    return [*PLUGIN_LAUNCH(target), str(plugin)]


def PLUGIN_LAUNCH(target: Path) -> list[str]:
    return [
        "vllm",
        "serve",
        str(target),
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "mine",
        "--tool-parser-plugin",
    ]


def unjudged_tree_state(document: dict) -> list[dict]:
    return [f for f in document["findings"] if f["check"] == "tree-state" and f["result"] == "cannot judge"]


def not_used_notes(document: dict) -> list[str]:
    return [note for note in document["notes"] if note.startswith("not used")]


def assert_the_set_unjudged(code: int, document: dict, words: str) -> None:
    """The launch passes with the tools set "cannot judge" (saying why), never "not used by this launch"."""
    tree_state = unjudged_tree_state(document)
    assert code == 0 and len(tree_state) == 1, document
    assert words in tree_state[0]["message"], tree_state
    assert not any("tools" in note for note in not_used_notes(document)), document


@pytest.mark.parametrize("plugin", USES_THE_PATCHED_PARSER)
def test_a_tool_parser_plugin_built_on_a_patched_parser_needs_its_set(setup, tmp_path, plugin):
    """review41a F9: the plugin's parser (its own name) builds on the parser the tools set patches: the
    launch streams through the patched file, so the set is needed, never "not used by this launch"."""
    tree, lib, target, _ = setup
    code, document, _ = preflight_notes(tree, lib, *plugin_launch(target, tmp_path / "mine.py", plugin))
    failed = [f for f in document["findings"] if not f["ok"] and f["check"] == "tree-state"]
    assert code == 1 and len(failed) == 1 and "tools" in failed[0]["message"], document
    assert not any("tools" in note for note in not_used_notes(document)), document["notes"]


def test_a_tool_parser_plugin_of_its_own_leaves_the_set_unused_and_one_unread_is_not_judged(setup, tmp_path):
    """A plugin that builds on no patched parser: the set is not used (noted, as before). One patchkit
    cannot read (bytecode; a fifo, never opened blocking): not "not used" but "cannot judge"."""
    tree, lib, target, _ = setup
    code, document, _ = preflight_notes(tree, lib, *plugin_launch(target, tmp_path / "own.py", "import json\n"))
    notes = document["notes"]
    assert code == 0 and any(n.startswith("not used by this launch: ") and "tools" in n for n in notes), notes
    (tmp_path / "own.pyc").write_bytes(b"\x00" * 16)
    os.mkfifo(tmp_path / "fifo.py")
    for plugin in ("own.pyc", "fifo.py"):
        code, document = preflight_json(tree, lib, *PLUGIN_LAUNCH(target), str(tmp_path / plugin))
        assert_the_set_unjudged(
            code, document, "may build on a tool parser the tools set patches, which is not applied here"
        )


BY_A_COMPUTED_NAME = [
    "import importlib\nparser = importlib.import_module('vllm.tool_parsers.' + 'demo_tool_parser')\n",
    "from importlib import import_module as load\nparser = load(NAME)\n",
    "parser = __import__(NAME, fromlist=['x'])\n",
    "import importlib.util\nspec = importlib.util.find_spec(NAME)\n",
]


@pytest.mark.parametrize("plugin", BY_A_COMPUTED_NAME)
def test_a_tool_parser_plugin_that_imports_by_a_computed_name_leaves_the_set_unjudged(setup, tmp_path, plugin):
    """review42a R17: a plugin that takes its base parser through importlib or __import__ (a string or a
    computed name) may build on the patched parser: the set is "cannot judge", never "not used"."""
    tree, lib, target, _ = setup
    code, document = preflight_json(tree, lib, *plugin_launch(target, tmp_path / "dyn.py", plugin))
    assert_the_set_unjudged(code, document, "imports modules by a name it computes")


LOOKED_UP_BY_A_COMPUTED_NAME = [
    "from vllm.tool_parsers import ToolParserManager\nBase = ToolParserManager.get_tool_parser(NAME)\n",
    "from vllm.tool_parsers import ToolParserManager as M\nBase = M.get_tool_parser(f'{KIND}_v2')\n",
    "from vllm.tool_parsers import ToolParserManager\nBase = ToolParserManager.tool_parsers[NAME]\n",
    "from vllm.tool_parsers import ToolParserManager\nBase = ToolParserManager.lazy_parsers.get(NAME)\n",
    "import vllm.tool_parsers as parsers\nBase = getattr(parsers, NAME)\n",
    "from vllm import tool_parsers\nBase = getattr(tool_parsers, NAME)\n",
]


@pytest.mark.parametrize("plugin", LOOKED_UP_BY_A_COMPUTED_NAME)
def test_a_tool_parser_plugin_that_looks_a_parser_up_by_a_computed_name_leaves_the_set_unjudged(
    setup, tmp_path, plugin
):
    """launch32's F9 rest: a plugin that takes its base parser from vLLM's registry or the parsers'
    package by a name it computes may build on the patched parser: "cannot judge", never "not used".
    A getattr of its own (not on vLLM's package) leaves the set unused."""
    tree, lib, target, _ = setup
    code, document = preflight_json(tree, lib, *plugin_launch(target, tmp_path / "dyn.py", plugin))
    assert_the_set_unjudged(code, document, "looks a tool parser up by a name it computes")
    (tmp_path / "own.py").write_text("import json\nBase = getattr(json, NAME)\nparsers = {}\nBase = parsers[NAME]\n")
    code, document, _ = preflight_notes(tree, lib, *PLUGIN_LAUNCH(target), str(tmp_path / "own.py"))
    notes = document["notes"]
    assert code == 0 and any(n.startswith("not used by this launch: ") and "tools" in n for n in notes), notes


def test_a_tool_parser_plugin_that_imports_a_module_of_the_users_leaves_the_set_unjudged(setup, tmp_path):
    """launch32's F9 rest: the plugin's parser may come from a module of the user's it imports (found on
    the launch's PYTHONPATH, before the site's packages), which patchkit does not follow: "cannot
    judge", never "not used". Where the launch's Python finds no such module, the import fails and
    nothing of the plugin runs: not used."""
    tree, lib, target, _ = setup
    (tmp_path / "own").mkdir()
    (tmp_path / "own" / "my_parsers.py").write_text("from vllm.tool_parsers.demo_tool_parser import parse\n")
    (tmp_path / "plugin.py").write_text("import json\nfrom my_parsers import parse\n")
    plugin = [*PLUGIN_LAUNCH(target), str(tmp_path / "plugin.py")]
    for pythonpath, unjudged in ((str(tmp_path / "own"), True), (str(tmp_path / "elsewhere"), False)):
        launch = ["env", f"PYTHONPATH={pythonpath}", *plugin]
        done = run_cli_read_only(
            "preflight", "--target", tree, "--patches", lib, "--no-import", "--format", "json", "--", *launch
        )
        document = json.loads(done.stdout)
        said = [f for f in document["findings"] if f["check"] == "tree-state" and f["result"] == "cannot judge"]
        unused = any(n.startswith("not used by this launch: ") and "tools" in n for n in document["notes"])
        assert done.returncode == 0 and unused != unjudged and len(said) == unjudged, done.stdout
        if unjudged:
            assert "imports my_parsers, a module of the user's patchkit does not follow" in said[0]["message"], said


# --- F4: a launch's Python that does not answer which pycache prefix it sets: cannot judge -------------


def test_a_launch_python_that_does_not_say_its_pycache_prefix_in_time_leaves_the_bytecode_unjudged(
    tmp_path, monkeypatch
):
    """review41a F4: the launch's start-up (a sitecustomize its PYTHONPATH adds, which may set a prefix)
    never ends, so the question goes unanswered: tree-state says cannot judge, naming the time and the
    start-up code, not a silent pass on the static scan's answer."""
    monkeypatch.setattr(target, "LAUNCH_QUESTION", 3.0)
    monkeypatch.setattr(target, "LAUNCH_BUDGET", 9.0)
    slow = tmp_path / "slow"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text("import time\ntime.sleep(300)\n")
    tree, lib = write_eagle3_setup(tmp_path)
    applied(tree, lib)
    launch = serve(write_model(tmp_path / "t", DEEPSEEK_V3), write_model(tmp_path / "d", DRAFTER))
    launch = ["env", f"PYTHONPATH={slow}", sys.executable, "-m", "vllm.entrypoints.cli.main", *launch[1:]]
    done = run_cli_in_process(
        "preflight", "--no-import", "--target", tree, "--patches", lib, "--format", "json", "--", *launch
    )
    unjudged = unjudged_tree_state(json.loads(done.stdout))
    assert len(unjudged) == 1, done.stdout
    assert "asked which pycache prefix its start-up code sets, gave no answer" in unjudged[0]["message"]
    assert "within 3 s" in unjudged[0]["message"] and str(slow / "sitecustomize.py") in unjudged[0]["fix"], unjudged
