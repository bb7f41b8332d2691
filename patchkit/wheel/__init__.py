"""`patchkit wheel`: a patched vLLM wheel built from a stock one (build), its local label (label),
the raw member copy it is written with (rawzip), and the provenance record it carries (provenance)."""
