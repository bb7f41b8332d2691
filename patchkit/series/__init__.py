"""Patch series: the library's sets, their patch files and contracts, and a series applied in memory (the plan)."""
