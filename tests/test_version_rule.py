"""One version rule (version.release_version): a pre-release, a dev build and a local-label build of a
release fall in that release's range for the library's series, a contract requirement and the set's probe."""

from __future__ import annotations

import runpy
import sys
import types
from pathlib import Path

import pytest
from helpers import write_library
from packaging.version import Version

from patchkit.checks import CheckContext
from patchkit.checks.probe import probe_request
from patchkit.series.library import PATCH, UPSTREAM, choose_set, default_root, load_library, select
from patchkit.series.requirements import parse_requirements
from patchkit.tree.version import release_version

BUILDS_OF_0_15_0 = ["0.15.0rc1", "0.15.0.dev3", "0.15.0+cu129", "0.15.0rc1.dev2+g1234.cu121"]
PATCH_BYTES = b"--- a/vllm/a.py\n+++ b/vllm/a.py\n@@ -1 +1 @@\n-a\n+b\n"


@pytest.fixture
def patch_set(tmp_path):
    series = {"0.14.0": [PATCH_BYTES], "0.15.0": [PATCH_BYTES]}
    return choose_set(load_library(write_library(tmp_path / "lib", series)), None)


@pytest.mark.parametrize("build", BUILDS_OF_0_15_0)
def test_a_build_is_judged_as_its_release(build):
    assert release_version(Version(build)) == Version("0.15.0")


@pytest.mark.parametrize("build", BUILDS_OF_0_15_0)
def test_library_selects_the_release_series_for_a_build(patch_set, build):
    selection = select(patch_set, Version(build))
    assert selection.kind == PATCH
    assert selection.release is not None and selection.release.directory.name == "0.15.0"
    assert "0.15.0" in (selection.note or "")


def test_a_build_of_the_upstream_release_is_upstream(patch_set):
    assert select(patch_set, Version("0.18.0rc1")).kind == UPSTREAM


@pytest.mark.parametrize("build", BUILDS_OF_0_15_0)
def test_contract_requirement_applies_to_a_build_of_its_release(build):
    only_0_15, before_0_15 = parse_requirements(
        [
            {"file": "vllm/a.py", "kind": "imported", "names": ["x"], "versions": "==0.15.0"},
            {"file": "vllm/a.py", "kind": "imported", "names": ["x"], "versions": "<0.15.0"},
        ],
        "test",
    )
    assert only_0_15.applies_to(Version(build))
    assert not before_0_15.applies_to(Version(build))


@pytest.fixture
def fake_models(monkeypatch):
    """Just enough of vllm's module tree in sys.modules for the eagle3 probe to run in-process."""

    def module(name: str, **attrs) -> None:
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
        for key, value in attrs.items():
            setattr(sys.modules[name], key, value)

    for name in ("vllm", "vllm.model_executor", "vllm.model_executor.models"):
        module(name)
    models = "vllm.model_executor.models"
    module(f"{models}.interfaces", supports_eagle3=lambda cls: True)
    module(f"{models}.deepseek_v2", DeepseekV2ForCausalLM=object, DeepseekV3ForCausalLM=object)
    module(f"{models}.kimi_k25", KimiK25ForConditionalGeneration=object)


@pytest.mark.parametrize("build", BUILDS_OF_0_15_0)
def test_the_eagle3_probe_gets_the_release_and_counts_kimi_k25_in(build, tmp_path, fake_models):
    ctx = CheckContext(paths=[], read=lambda p: None, python=None, root=tmp_path, version=Version(build))
    script = default_root() / "eagle3" / "probe.py"
    request = probe_request(ctx, {}, script)
    assert request["version"] == "0.15.0"
    probe = runpy.run_path(str(script), run_name="__patchkit_probe__")["probe"]
    subjects = [subject for subject, _ok, _message in probe(request["version"])]
    assert "KimiK25ForConditionalGeneration" in subjects
    assert "KimiK25ForConditionalGeneration" not in [s for s, _, _ in probe("0.14.1")]


def test_the_eagle3_probe_refuses_an_unnormalised_version(fake_models):
    probe = runpy.run_path(str(Path(default_root() / "eagle3" / "probe.py")), run_name="__patchkit_probe__")["probe"]
    with pytest.raises(ValueError, match="not a vLLM release"):
        probe("0.15.0rc1")
