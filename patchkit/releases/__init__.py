"""Real vLLM releases: which files patchkit needs of one, and `verify` against releases."""
