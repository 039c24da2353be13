"""Parallel file system experiments on the OrangeFS tier (compose/pvfs.yml).

Three tests, chosen by an experiment's ``pfs.test``:

- ``concurrent`` (000 §6.2.1): 1..K clients, each in its own container, read and then write one
  contiguous region of ``region_mb_per_server`` x N MB at the same time (N I/O servers).
- ``streams`` (000 §6.2.2): 1..64 concurrent reading streams spread over the client containers.
- ``basic`` (004 Table 1): one sequential writer then reader on tmpfs, a local-disk volume or
  OrangeFS, for several buffer sizes.

Every stream repeats its transfer until ``measure_s`` has passed (so process start-up does not
dominate short transfers); aggregate MB/s is the bytes of all streams over the span from the
common start to the last stream's end. CPU per side (clients, servers) and of the host comes
from counters read at each phase's start and end; what was read and written is checked against
checksums the runner computes itself. A stopped server makes its streams fail within the job
timeout; the point records the errors and the run ends with one message naming the server.
The package: ``settings`` (the `pfs:` block), ``kind`` (the contract), ``stack`` (the cluster),
``phases`` (a point's timed phases) and ``streams`` (what the streams move, pure).
"""
