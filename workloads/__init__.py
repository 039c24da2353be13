"""File sets, traces and load-generator user classes of the testbed."""
