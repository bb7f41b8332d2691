"""Where a vLLM tree keeps the model files the launch rules read: one home for their paths, so each
rule names the same file the same way."""

from __future__ import annotations

MODELS_DIR = "vllm/model_executor/models"
REGISTRY = f"{MODELS_DIR}/registry.py"  # where vLLM registers architectures (read statically)
LLAMA = f"{MODELS_DIR}/llama.py"  # the drafter's decoder layer and MLP (llama_eagle3.py subclasses them)
EAGLE3_DRAFTER = f"{MODELS_DIR}/llama_eagle3.py"
LLAMA_DRAFTER = "llama_eagle3"  # the module of the EAGLE-3 drafter built of llama.py's layers
SPEC_DECODE = "vllm/v1/spec_decode"
EAGLE_PROPOSER = f"{SPEC_DECODE}/eagle.py"  # the EAGLE proposer (0.11-0.21: its rules; 0.22 on: a subclass)
BASE_PROPOSER = f"{SPEC_DECODE}/llm_base_proposer.py"  # 0.22 on: the proposers' shared start and rules
