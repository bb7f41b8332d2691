"""What a vLLM dist-info holds: a wheel's RECORD, a patched wheel's provenance, and a vLLM installed from one."""
