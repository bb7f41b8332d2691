"""patchkit: versioned source patches for vLLM trees."""

__version__ = "0.1.0"
