"""A target tree: where vLLM lives, the Python that runs it, and which release it is."""
