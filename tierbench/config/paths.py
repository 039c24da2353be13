"""Which folders root may mount over, write or remove for tierbench (issue 39, item 5).

Every path a user gives that tierbench mounts (DOCROOT_TMPFS_DIR, HOT_TMPFS_DIR), writes or
removes (TIERBENCH_STATE_DIR, DISK_IMAGE_DIR, a cluster's workdir) is refused when it is a
system folder: the root folder, a folder at the top (/srv, /data, /home...), anything inside
the system's own trees (/etc, /usr, /boot, /proc...), or a folder directly in one where every
user and program keep theirs (/var/lib, /home, /run, /tmp...), except tierbench's own there
(a name starting with ``tierbench``, such as /var/lib/tierbench or /run/tierbench).

A folder that passes is used only when tierbench made it, or it is empty: tierbench writes the
marker file ``.tierbench-owner`` into every folder it makes (first line ``tierbench PROJECT``,
then one line per entry it made inside), and ``clean`` removes only the entries a marker names
(tierbench.placement.owned runs the same checks here and on cluster nodes).
"""

from __future__ import annotations

import posixpath

from tierbench.config.models import control_problem

MARKER = ".tierbench-owner"
# trees that hold nothing of tierbench's, at any depth
SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc",
                "/root", "/sbin", "/sys", "/usr")
# folders every user and program keep their own folders in: neither they nor the folders
# directly in them are tierbench's (but one named tierbench... there is: /var/lib/tierbench)
SHARED = ("/home", "/run", "/tmp", "/var", "/var/cache", "/var/lib", "/var/log", "/var/tmp",
          "/run/user")


def system_problem(path: str) -> str | None:
    """Why root must not mount over, write or remove ``path`` for tierbench (a clause: "is the
    system folder /etc"), or None."""
    why = control_problem(path)
    if why:
        return why
    if not path.startswith("/"):
        return "is not an absolute path"
    norm = posixpath.normpath(path)
    norm = "/" + norm.lstrip("/")
    if norm == "/":
        return "is the root folder"
    for tree in SYSTEM_TREES:
        if norm == tree or norm.startswith(tree + "/"):
            return f"is {'' if norm == tree else 'inside '}the system folder {tree}"
    if norm in SHARED:
        return f"is the system folder {norm}, which every user and program share"
    parent, name = posixpath.split(norm)
    if parent == "/":
        return f"is a top-level folder ({norm}), which is not tierbench's alone"
    if parent in SHARED and not name.startswith("tierbench"):
        return (f"is a folder directly in {parent}, which every user and program share (a "
                f"folder of tierbench's own there is named tierbench..., e.g. {parent}/tierbench)")
    return None


def refusal(path: str, what: str) -> str | None:
    """One sentence refusing ``path`` given as ``what`` (DOCROOT_TMPFS_DIR...), or None."""
    why = system_problem(path)
    if why is None:
        return None
    return (f"{what}={path!r} {why}: tierbench mounts, writes and removes things there as root; "
            f"give it a folder of its own such as /var/lib/tierbench/NAME or /run/tierbench/NAME")
