"""The command line: the click group, one module per command, and all output (ui)."""
