"""The .patchkit/ store inside a target: the record of what patchkit did, its journal, objects and saved copies."""
