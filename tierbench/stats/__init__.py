"""The statistics that both a run's stopping rule (tierbench.blocks, tierbench.runner) and the
report (analysis) use: one copy, on the ground floor, standard library and scipy only."""
