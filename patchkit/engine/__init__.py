"""Apply, revert and verify on a target: resolve it, inspect it, transact on it, guard it."""
