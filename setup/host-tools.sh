#!/usr/bin/env bash
# Install the host tools the control program runs (ethtool, ip/tc, nsenter, losetup, mkfs) and,
# where the distribution packages it as linux-perf (Debian), perf for NET-txprofile's kernel
# profile, when missing; with `tests`, also the headless browser the report test opens the report
# in (chromium).
#   setup/host-tools.sh [tests]
set -euo pipefail
case ${1:-} in tests|"") ;; *) echo "usage: $0 [tests]" >&2; exit 2 ;; esac
missing=()
command -v ethtool >/dev/null || missing+=(ethtool)
command -v tc >/dev/null && command -v ip >/dev/null || missing+=(iproute2)
command -v nsenter >/dev/null || missing+=(util-linux)
# disk systems (004 §5): loop devices (util-linux), ext3, and RAID-0 with md (mdadm) where the
# kernel has md (loaded first where it is a module), else device-mapper striping (dmsetup), else
# btrfs
command -v losetup >/dev/null || missing+=(util-linux)
command -v mkfs.ext3 >/dev/null || missing+=(e2fsprogs)
for m in md_mod raid0 dm_mod; do modprobe -q "$m" 2>/dev/null || true; done
if [ -e /proc/mdstat ]; then command -v mdadm >/dev/null || missing+=(mdadm)
elif [ -e /dev/mapper/control ]; then command -v dmsetup >/dev/null || missing+=(dmsetup)
else command -v mkfs.btrfs >/dev/null || missing+=(btrfs-progs); fi
if [ "${1:-}" = tests ]; then command -v chromium >/dev/null || missing+=(chromium); fi
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
