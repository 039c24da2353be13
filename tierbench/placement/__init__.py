"""Floor 3: where services run: the Compose stack and its overlays, the cluster's nodes; what
it needs of the kinds (roles, CPU lists, admitted peers) it is handed as data."""
