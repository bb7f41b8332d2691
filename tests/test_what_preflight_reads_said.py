"""review36's docs finding: the hints said "preflight reads only config.json", no longer true (it
reads a local or cached model's weight heads, generation config, adapters). A hub model not found
gets what gives preflight the model: online its config.json alone (vLLM downloads the weights);
offline the whole model, since its weights are then judged from the cache. Each hint followed."""

from __future__ import annotations

import json
import re
from pathlib import Path

from helpers import run_cli_in_process
from launch_fixtures import ONE_TENSOR, safetensors_file, stock_files, write_tree

LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"]}


def preflight(tree: Path, cache: Path, *launch: str) -> tuple[int, dict]:
    env = {"HF_HUB_CACHE": str(cache)}
    done = run_cli_in_process("preflight", "--target", tree, "--no-import", "--format", "json", "--", *launch, env=env)
    return done.returncode, json.loads(done.stdout)


def fetched(cache: Path, files: dict[str, bytes]) -> None:
    """What `hf download org/m [FILES]` leaves in the hub cache."""
    storage = cache / "models--org--m"
    (storage / "refs").mkdir(parents=True, exist_ok=True)
    (storage / "refs" / "main").write_text("c0ffee")
    (storage / "snapshots" / "c0ffee").mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (storage / "snapshots" / "c0ffee" / name).write_bytes(content)


def test_the_hint_says_what_preflight_needs_online_and_offline(tmp_path):
    tree = write_tree(tmp_path / "site", "0.16.0", stock_files("0.16.0"))
    cache = tmp_path / "hub"
    online = ["vllm", "serve", "org/m"]
    offline = ["env", "HF_HUB_OFFLINE=1", *online]
    code, document = preflight(tree, cache, *online)
    assert code == 4 and "reads only" not in document["hint"], document
    assert "preflight needs the model's config.json (vLLM downloads the rest)" in document["hint"], document
    assert re.search(r"`hf download org/m config\.json`", document["hint"]), document
    code, document = preflight(tree, cache, *offline)
    assert code == 4 and "the whole model, as an offline launch needs" in document["hint"], document
    assert re.search(r"`hf download org/m`", document["hint"]), document
    # followed: config.json alone passes online; offline its weights are judged, and missing
    fetched(cache, {"config.json": json.dumps(LLAMA).encode()})
    assert preflight(tree, cache, *online)[0] == 0
    code, document = preflight(tree, cache, *offline)
    assert code == 1 and any("no weight file vLLM loads" in f["message"] for f in document["findings"]), document
    fetched(cache, {"model.safetensors": safetensors_file(ONE_TENSOR, 8)})  # the whole model
    assert preflight(tree, cache, *offline)[0] == 0
