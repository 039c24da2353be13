"""The network micro-benchmark kind (000 §4, 001, 003 §5, 004 §6.1): TCP between sender
containers (`net-client`) and receiver containers (`net-server`, compose/net.yml) on their own
network, through the same runner and modes as every kind.

Two tests:
- `stream`: bulk TCP. With iperf 2 (`tool: iperf2`, a thread per connection, CSV interval
  reports) the connections are spread evenly over the receivers and their iperf servers (4
  ports each), one sender process per server port. With iperf3 (`tool: iperf3`, one thread per
  process, at most 125 connections each) every process gets its own server port: this is how
  thousands of connections fit on a small host (001's 6000). Every sender runs the same set of
  connections (`clients`: 003's concurrent client hosts); all processes of all senders start at
  the same instant. Write size, direction (one way, or both ways on the same sockets) and
  socket buffer (001's window rule: one size up to N connections, another above) as factors.
  The warm-up is dropped from the tools' reports; the established connections are counted in
  every sender's namespace while the run is under way; the senders' TCP counters give the data
  segments per ACK; with `profile: true`, perf samples the senders' CPUs (NET-txprofile; on a
  cluster on the net_client node, over SSH).
- `latency`: request/response with sockperf ping-pong (one message in flight per session,
  percentiles of half the round trip, as 004 Fig. 14 reports one-way latency): from every
  sender one session to the first receiver, or with `per_receiver` one to each receiver (003's
  profile: every client keeps a session to each of 4 servers), all at once.

`cases` layers every mode over each of a list of modes (000 §4.3's cumulative socket-option
cases): the report then compares the modes within each case.

CPU is measured by tierbench, per side (the containers' cgroups) and for the host, over the
samples that bracket the measured window, never from the tools' own figures (which count only
their process). The receivers' CPU is `cpu_s_servers`; costs are CPU µs per KB moved
The package: ``settings`` (the `net:` block), ``kind`` (the contract), ``flows`` (what a stream
point runs, pure), ``stack`` (the network tier), ``sequence`` (one point), ``profile`` (the
senders' perf profile), ``dmacopy`` (NET-dmacopy) and ``tools`` (the tools' commands and
parsers).
"""
