"""Shared tiers: services more than one kind brings up, on the floor between the placement and
the kinds, so that a kind uses one without importing another kind (``orangefs``: the OrangeFS
cluster and its storage on a disk system, which the pfs, fs and web kinds run; ``disks``,
``diskuse`` and ``diskbuild``: the disk systems under a docroot, OrangeFS's storage or the disk
benchmark, removed after every placer's `down`)."""
