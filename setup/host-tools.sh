#!/usr/bin/env bash
# Install the host tools the control program runs (ethtool, ip/tc, nsenter, losetup, mkfs), the
# headless browser the report test opens the report in (chromium) and, where the distribution
# packages it as linux-perf (Debian), perf for NET-txprofile's kernel profile, when missing.
set -euo pipefail
missing=()
command -v ethtool >/dev/null || missing+=(ethtool)
command -v tc >/dev/null && command -v ip >/dev/null || missing+=(iproute2)
command -v nsenter >/dev/null || missing+=(util-linux)
# disk systems (004 §5): loop devices (util-linux), ext3, and RAID-0 with btrfs where the kernel
# has no md (with md, mdadm)
command -v losetup >/dev/null || missing+=(util-linux)
command -v mkfs.ext3 >/dev/null || missing+=(e2fsprogs)
if [ -e /proc/mdstat ]; then command -v mdadm >/dev/null || missing+=(mdadm)
else command -v mkfs.btrfs >/dev/null || missing+=(btrfs-progs); fi
command -v chromium >/dev/null || missing+=(chromium)
if ! command -v perf >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-cache >/dev/null \
    && apt-cache show linux-perf >/dev/null 2>&1; then
  missing+=(linux-perf)
fi
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "setup: installing ${missing[*]}" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null \
    || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; }
else
  echo "setup: missing host tools: install the packages ${missing[*]}" >&2; exit 1
fi
