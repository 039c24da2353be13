"""Floor 2: what a mode means (model) and applying it all or nothing (apply)."""
