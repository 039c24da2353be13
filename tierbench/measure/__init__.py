"""Floor 1: counters (CPU per cgroup, host CPU, interface bytes) sampled and bracketed."""
