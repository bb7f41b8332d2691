"""`patchkit wheel`: a patched vLLM wheel built from a stock one (build), its local label (label),
the raw member copy it is written with (rawzip), and
the stock wheel of a release from the index, cached (stock). The provenance record it carries is
`patchkit.distinfo.provenance`, below the layers that read it back from an installed tree."""
