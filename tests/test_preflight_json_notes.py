"""preflight --format json carries the notes text output says of the launch (`"notes"`, a list of
strings): before, a headless node's, a pooling model's or a tool server's note was said in text only,
and a script reading JSON could not tell that an option went unjudged. The schema grows by a key."""

from __future__ import annotations

import json

from helpers import run_cli_in_process
from launch_fixtures import ONE_TENSOR, safetensors_file, stock_files, write_model, write_tree

LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"]}


def test_the_json_document_holds_the_notes_the_text_says(tmp_path):
    tree = write_tree(tmp_path / "site", "0.16.0", stock_files("0.16.0"))
    model = write_model(tmp_path / "m", LLAMA)
    (model / "model.safetensors").write_bytes(safetensors_file(ONE_TENSOR, 8))
    for launch in (
        ["--headless", "--tool-server", "http://x:1", "--middleware", "a.b"],
        ["--tool-server", "localhost:8000"],
        ["--runner", "pooling", "--tool-server", "http://x:1"],
    ):
        judged = ["preflight", "--target", tree, "--no-import", "--", "vllm", "serve", model, *launch]
        text = run_cli_in_process(*judged)
        said = [line.removeprefix("note: ") for line in " ".join(text.stderr.split()).split(" note: ")]
        document = json.loads(run_cli_in_process(*judged[:3], "--format", "json", *judged[3:]).stdout)
        assert document["ok"] and text.returncode == 0, text.stdout + text.stderr
        notes = document["notes"]
        assert notes and all(isinstance(note, str) for note in notes), document
        assert [" ".join(note.split()) for note in notes] == [s.strip() for s in said if s.strip()], (notes, said)
