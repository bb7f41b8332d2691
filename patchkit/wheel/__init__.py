"""Patched vLLM wheels (`patchkit wheel`): the stock wheel of a release, and the builder."""
