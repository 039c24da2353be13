#!/bin/bash
# The net tier's receivers: NET_IPERF_SERVERS iperf 2 servers on consecutive ports from
# NET_IPERF_PORT (a thread per connection; several processes because one iperf 2.1.8 listener
# reading the headers of 1500 connections at once can time out and then crash), NET_IPERF3_SERVERS
# iperf3 servers on consecutive ports from NET_IPERF3_PORT (an iperf3 server runs one test at a
# time, so concurrent iperf3 clients need one port each), and NET_SOCKPERF_SERVERS TCP sockperf
# servers on consecutive ports from NET_SOCKPERF_PORT taking messages up to NET_SOCKPERF_MAX
# bytes (a sockperf 3.7 server answered only one of two ping-pong clients at once here, so every
# sender gets its own port). Exits, naming it, as soon as any of them exits.
# All on one address: NET_BIND's (a cluster node's data plane, with host networking), else this
# container's own address on the stack's network (never every address: the rack rule).
# `--healthcheck`: every port is listening.
set -euo pipefail
iperf_port=${NET_IPERF_PORT:-5001}
iperf_servers=${NET_IPERF_SERVERS:-4}
iperf3_port=${NET_IPERF3_PORT:-5201}
iperf3_servers=${NET_IPERF3_SERVERS:-4}
sockperf_port=${NET_SOCKPERF_PORT:-11111}
bind=${NET_BIND:-$(hostname -i | awk '{print $1}')}
sockperf_servers=${NET_SOCKPERF_SERVERS:-1}
# sockperf 3.7's server takes messages up to 65507 bytes (the largest UDP payload) unless -m
# raises it, and drops a TCP connection that sends a larger one ("Message received was larger
# than expected"): 64 KB request/response needs -m 65536
sockperf_max=${NET_SOCKPERF_MAX:-65536}
ports=()
for ((i = 0; i < sockperf_servers; i++)); do ports+=($((sockperf_port + i))); done
for ((i = 0; i < iperf_servers; i++)); do ports+=($((iperf_port + i))); done
for ((i = 0; i < iperf3_servers; i++)); do ports+=($((iperf3_port + i))); done

if [ "${1:-}" = "--healthcheck" ]; then
  listening=$(ss -Hltn | awk '{n = split($4, a, ":"); print a[n]}')
  for p in "${ports[@]}"; do
    grep -qx "$p" <<<"$listening" || { echo "port $p is not listening" >&2; exit 1; }
  done
  exit 0
fi

declare -A names
for ((i = 0; i < iperf_servers; i++)); do
  p=$((iperf_port + i))
  iperf -s -p "$p" -B "$bind" & names[$!]="iperf -s -p $p"
done
for ((i = 0; i < iperf3_servers; i++)); do
  p=$((iperf3_port + i))
  iperf3 -s -p "$p" -B "$bind" & names[$!]="iperf3 -s -p $p"
done
for ((i = 0; i < sockperf_servers; i++)); do
  p=$((sockperf_port + i))
  sockperf server --tcp -i "$bind" -p "$p" -m "$sockperf_max" >/dev/null & names[$!]="sockperf server --tcp -p $p"
done
echo "net-server: listening on $bind, ports ${ports[*]}" >&2
status=0
wait -n -p done_pid || status=$?
echo "net-server: '${names[$done_pid]:-a server}' exited with status $status" >&2
exit 1
