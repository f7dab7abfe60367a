#!/usr/bin/env python3
"""Turns the mount layout of an airlock sandbox into bubblewrap options (for scripts/bench-run).

B3 compares `airlock run -- true` with `bwrap --unshare-all --ro-bind / / --dev /dev --proc
/proc true`, which makes five mounts. An airlock sandbox has some forty (PRODUCT I2: the image's
allowlisted directories, masks under /etc, generated /etc files, a minimal /dev, /proc with
masks, /sys, the workspaces, the egress directory). To show what that layout costs by itself,
scripts/bench-run also times bwrap building the same layout, read from the sandbox of the same
run. bwrap gets the same mounts in the same order, as the nearest options it has:

- an overlay (the image's directories) becomes a read-only bind of the host directory, or an
  overlay with a throw-away upper layer when this bwrap has `--overlay-src` (0.9 and later);
- a mask by an empty file becomes a read-only bind of /dev/null; a masking tmpfs a read-only
  tmpfs; /dev becomes bwrap's own `--dev`; /proc `--proc` with the same masks;
- a bind of a host path binds that path, read-only when airlock's is; a generated file (such as
  /etc/passwd) binds the host's file at that path; a path that exists only in the sandbox (the
  egress directory) binds an empty stand-in.

Nothing else airlock does is asked of bwrap (seccomp, the cgroup, the guest PID 1 and its
control channel, the id-mapped mounts' mapping): the figure is a floor for the layout alone.

Input (stdin): one line per mount in mount order, `<d|f> <a /proc/self/mountinfo line>`
(d: the mount point is a directory), lines `link <path> <target>` for the root's symbolic links
and one line `ids <uid> <gid>`. The input is printed inside a sandbox, so it is checked before
use: every path absolute and without `..`, ids numeric. Arguments: a directory for empty
stand-ins, and 1 when this bwrap has `--overlay-src` (else 0). Output: the options,
NUL-separated, to go between `bwrap` and the command.
"""

import os
import sys


def unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal."""
    out, i = [], 0
    while i < len(field):
        code = field[i + 1 : i + 4]
        if field[i] == "\\" and len(code) == 3 and code.isdigit():
            out.append(chr(int(code, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def checked_path(path: str) -> str:
    """A path from the layout: absolute, with no `..` component."""
    if not path.startswith("/") or ".." in path.split("/"):
        raise SystemExit(f"bench-layout-bwrap: not an absolute, plain path: {path!r}")
    return path


def translate(lines, standins: str, overlay: bool):
    opts = ["--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    mounts, links, ids = [], [], None
    for line in lines:
        line = line.rstrip("\n")
        if not line:
            continue
        kind, rest = line.split(" ", 1)
        if kind == "link":
            path, target = rest.split(" ", 1)
            links.append((checked_path(path), target))
        elif kind == "ids":
            ids = rest.split()
            if len(ids) != 2 or not all(i.isdigit() for i in ids):
                raise SystemExit(f"bench-layout-bwrap: bad ids line: {line!r}")
        elif kind in ("d", "f"):
            mounts.append((kind, rest))
        else:
            raise SystemExit(f"bench-layout-bwrap: unexpected input line: {line!r}")
    if ids:
        opts += ["--uid", ids[0], "--gid", ids[1]]
    for path, target in links:
        opts += ["--symlink", target, path]
    parsed = []
    for kind, rest in mounts:
        pre, post = rest.split(" - ", 1)
        fields = pre.split()
        root, point = checked_path(unescape(fields[3])), checked_path(unescape(fields[4]))
        flags = fields[5].split(",")
        parsed.append((kind, root, point, flags, post))
    # mountinfo lists mounts in tree order, not in the order they were made (airlock attaches
    # the id-mapped binds it was passed before the overlays around them exist): a parent goes
    # before what is mounted below it, and mounts on one path keep their order (the later one
    # is on top).
    parsed.sort(key=lambda m: len([c for c in m[2].split("/") if c]))
    made = 0
    for kind, root, point, flags, post in parsed:
        fstype = post.split()[0]
        ro = "ro" in flags
        if point == "/":
            continue  # bwrap's root is a tmpfs of its own, as airlock's is
        if point == "/dev":
            opts += ["--dev", "/dev"]
            continue
        if point.startswith("/dev/"):
            continue  # `--dev` makes the device nodes, /dev/pts and /dev/shm
        if point == "/proc" and fstype == "proc":
            opts += ["--proc", "/proc"]
            continue
        if fstype == "sysfs":
            opts += ["--ro-bind", "/sys", point]
            continue
        if fstype == "overlay":
            if overlay:
                opts += ["--overlay-src", point, "--tmp-overlay", point]
            else:
                opts += ["--ro-bind", point, point]
            continue
        if root in ("/empty", "/null") or fstype == "devtmpfs":
            opts += ["--ro-bind", "/dev/null", point]
            continue
        if fstype == "tmpfs" and ro and root == "/" and kind == "d":
            opts += ["--tmpfs", point, "--remount-ro", point]
            continue
        if fstype == "proc":
            opts += ["--ro-bind", point, point]
            continue
        # A bind: the host path it came from when there is one, else the host's file at the
        # same place, else an empty stand-in of the same kind.
        if os.path.exists(root) and os.path.isdir(root) == (kind == "d"):
            source = root
        elif os.path.exists(point) and os.path.isdir(point) == (kind == "d"):
            source = point
        elif kind == "d":
            made += 1
            source = os.path.join(standins, f"dir{made}")
            os.makedirs(source, exist_ok=True)
        else:
            source = "/dev/null"
        opts += ["--ro-bind" if ro else "--bind", source, point]
    return opts


def main() -> None:
    if len(sys.argv) != 3 or sys.argv[2] not in ("0", "1"):
        raise SystemExit("usage: bench-layout-bwrap.py STANDIN_DIR 0|1 < layout")
    opts = translate(sys.stdin, sys.argv[1], sys.argv[2] == "1")
    sys.stdout.write("".join(o + "\0" for o in opts))


if __name__ == "__main__":
    main()
