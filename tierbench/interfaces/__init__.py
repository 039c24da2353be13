"""Floor 1: one network interface's settings (ethtool, ip, tc, sysctl), read and written."""
