"""Floor 3: where services run: the Compose stack and its overlays, the OrangeFS cluster."""
