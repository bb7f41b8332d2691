"""`patchkit wheel`: a patched vLLM wheel built from a stock one (build), its local label (label),
the raw member copy it is written with (rawzip), the provenance record it carries (provenance), and
the stock wheel of a release from the index, cached (stock)."""
