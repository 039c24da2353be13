"""Floor 8: the offload advisor (`tierbench advise`): which offloads to turn on, for which
workload, on the interfaces that carry the tiers' traffic (docs/advise.md)."""
