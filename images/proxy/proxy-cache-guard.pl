#!/usr/bin/perl
# Keeps the proxy's disk cache (mod_cache_disk, no size limit of its own) from filling the file
# system it lives on, its tmpfs of PROXY_CACHE_SIZE: once the file system is LIMIT_PCT % full it
# creates FLAG, on which Apache stops storing new responses (SetEnvIfExpr ... no-cache in
# tierbench.conf; what is cached is still served), until the cache holds less than half the
# limit again (emptied before every point, kinds/web/steps.py, or its stale entries, which it
# may no longer refresh, dropped by mod_cache). The cache thus holds what was asked for first
# and never writes into a full file system, where mod_cache_disk's failed write of a header file
# (AH00726, httpd 2.4) ends the Apache child with a segfault and closes every connection the
# child served. The rest of the file system is room for what is being stored when the limit is
# reached: the responses under way (at most one per connection, each at most CacheMaxFileSize)
# and what is stored within one look (every POLL_S, one statfs call). At 70 % of 256 MiB,
# DC-alpha-cache's 16 connections per proxy storing class 2's largest files (4 MiB) at once take
# 64 MiB of the 77 MiB left. Perl (Apache's own dependency) rather than bash: a statfs call
# every 10 ms costs next to nothing, a `stat -f` process every 10 ms would not.
#   proxy-cache-guard APACHE_PID FLAG    (start-apache runs it when PROXY_CACHE=on; it ends with
#                                         Apache)
use strict;
use warnings;
require 'syscall.ph';

my ($pid, $flag) = @ARGV;
die "usage: proxy-cache-guard APACHE_PID FLAG\n" unless defined $flag;
my $root = '/var/cache/apache2/mod_cache_disk';
my $LIMIT_PCT = 70;
my $POLL_S = 0.01;

# (blocks, free blocks, block size) of the file system holding $root (struct statfs of 64-bit
# Linux: f_type, f_bsize, f_blocks, f_bfree, ...)
sub usage {
    my $buf = "\0" x 256;
    syscall(&SYS_statfs, $root, $buf) == 0 or die "proxy-cache-guard: statfs $root: $!\n";
    my ($type, $bsize, $blocks, $bfree) = unpack('q q Q Q', $buf);
    return ($blocks, $bfree, $bsize);
}

$| = 1;
my ($blocks, undef, $bsize) = usage();
my $limit = int($blocks * $LIMIT_PCT / 100);
my $kib = sub { int($_[0] * $bsize / 1024) };
unlink $flag;
while (kill 0, $pid) {
    my (undef, $free) = usage();
    my $used = $blocks - $free;
    if ($used >= $limit && !-e $flag) {
        open(my $fh, '>', $flag) or die "proxy-cache-guard: $flag: $!\n";
        close $fh;
        printf STDERR "proxy-cache-guard: the cache holds %d KiB of %d KiB (limit %d %%): "
            . "new responses are not stored\n", $kib->($used), $kib->($blocks), $LIMIT_PCT;
    } elsif ($used < $limit / 2 && -e $flag) {
        unlink $flag;
        printf STDERR "proxy-cache-guard: the cache holds %d KiB: storing again\n", $kib->($used);
    }
    select(undef, undef, undef, $POLL_S);
}
