#!/usr/bin/env bash
# Print the Debian mirror this machine's apt sources already name (never a hard-coded host).
# Usage: setup/apt-mirror.sh [security]   (with "security": the security archive's URI)
set -euo pipefail
want=${1:-main}
uris=$( { grep -hoE '^URIs:[[:space:]]*\S+' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}'
          grep -hE '^deb[[:space:]]' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
            | awk '{for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) {print $i; break}}'; } || true)
if [ "$want" = security ]; then
  uri=$(printf '%s\n' "$uris" | grep -E 'debian-security|/security' | head -n 1 || true)
else
  uri=$(printf '%s\n' "$uris" | grep -E '/debian/?$' | grep -v security | head -n 1 || true)
fi
[ -n "$uri" ] || exit 1
printf '%s\n' "${uri%/}"
