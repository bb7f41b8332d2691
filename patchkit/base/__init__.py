"""What every layer stands on: errors, closed names, filesystem rules, hashing, locks, seals, signals, shared options and the user cache."""
