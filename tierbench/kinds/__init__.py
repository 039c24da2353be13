"""Floor 4: workload kinds behind one contract (contract.py); registry.py finds them."""
