"""Floor 0: reading files, user errors, and the declared-model helpers every schema uses."""
