"""Before a launch: a vLLM command read as vLLM reads it, checked against the tree and the set."""
