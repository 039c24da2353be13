"""The file-server kind (`fs`): standard file-system benchmarks run by client programs against a
real file server over the network, through the same runner and modes as every kind.

Servers (`fs.server`):
- `gluster`: a GlusterFS server (glusterd and one brick server) in the `fs-server` container
  (compose/fs.yml), its volume's brick on a volume of the host's disk, mounted in the
  `fs-client` container with the GlusterFS FUSE client. Debian's dbench has only its local-file
  backend, so it needs a mounted network file system, and this kernel has neither an SMB nor an
  NFS client; Samba through smbnetfs (FUSE) was tried and fails dbench: smbnetfs drops its
  connection after a path with a wildcard (dbench stats FIND_FIRST's patterns), and every later
  operation fails. `load: busy` also runs `fs-hog` (an MPEG decoder in a loop) on the server's
  CPUs: 002's heavily loaded server.
- `orangefs`: the OrangeFS tier (compose/pvfs.yml) with N I/O servers, mounted with FUSE in its
  client containers (PFS-iozone, 003 §5.3).

Tests (`fs.test`):
- `dbench` (002 §4.1-4.2, FS-thinktime and FS-clients): NetBench's Disk Mix replayed by dbench
  4.0 with 1..N client programs, think time per request as a factor (a Sleep before every
  operation of the load file).
- `randread` (002 §4.3, FS-randread): 1..N client programs each reading 1 KB blocks at random
  places of its own file (fio).
- `filebench` (001, 9 Nov 2008): the nine Filebench workloads as fio job files
  (workloads/fs/filebench/), the server's page cache emptied or filled first as each asks, from
  1-18 client machines at once (`fs-client`, `fs-client2` ..: each the workload's threads on
  its own sets, results summed), the server optionally under a memory cap (its page cache,
  memory limit and storage reads sampled from its cgroup).
- `iozone` (003 §5.3, PFS-iozone): 1..N concurrent sessions over the client containers, each
  writing and then reading its own file sequentially (fio in IOzone's throughput-mode role).

Throughput is the tool's own (dbench's MB/s, fio's bytes/s summed over jobs); CPU is
tierbench's, per side (cgroups: client, server, hog) and for the host, over the samples that
bracket the tool's timed part; the server's network MB/s from its veth's byte counters.
The package: ``settings`` (the `fs:` block), ``kind`` (the contract), ``stack`` (the servers
and clients brought up), ``sequence`` (one point: the four tests), ``figures`` (CPU, network
and fio figures) and ``tools`` (dbench's and fio's commands and parsers).
"""
