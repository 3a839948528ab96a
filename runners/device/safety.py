"""What a block device must satisfy before StoreTune formats it.

The device runner runs mkfs on whatever it is given, so a wrong path destroys data. A device is
used only when it is named in the allow list, resolves (symlinks followed) to the very device
that allow-list entry names, is a block device, and neither it nor any partition or holder of it
is mounted, used as swap, or backs the root file system.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class UnsafeDevice(ValueError):
    """A device StoreTune refuses to touch; the message says why."""


def check_block_device(path: str, allow: list[str]) -> str:
    """The resolved device path of ``path`` if it is safe to format, else UnsafeDevice."""
    given = os.path.normpath(path)
    entries = {os.path.normpath(a): os.path.realpath(a) for a in allow}
    if given not in entries:
        allowed = ", ".join(entries) or "nothing"
        raise UnsafeDevice(f"{path} is not allow-listed (allowed: {allowed}); name it with `allow_device` {path}")
    resolved = os.path.realpath(given)
    if resolved != entries[given]:
        raise UnsafeDevice(f"{path} resolves to {resolved}, outside the allow list")
    try:
        mode = os.stat(resolved).st_mode
    except FileNotFoundError:
        raise UnsafeDevice(f"{path}: no such device") from None
    if not stat.S_ISBLK(mode):
        raise UnsafeDevice(f"{path} is not a block device")
    name = Path(resolved).name
    in_use = busy_devices()
    for member in [name, *partitions(name), *holders(name)]:
        if member in in_use:
            raise UnsafeDevice(f"{path}: /dev/{member} is {in_use[member]}; StoreTune formats only unused devices")
    root = root_disks()
    if name in root or any(p in root for p in partitions(name)):
        raise UnsafeDevice(f"{path} backs the root file system")
    return resolved


def busy_devices() -> dict[str, str]:
    """Block device names that are mounted or used as swap, with what uses them."""
    by_number = _names_by_devno()
    busy: dict[str, str] = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        major, minor = fields[2].split(":")
        name = by_number.get((int(major), int(minor)))
        if name:
            busy[name] = f"mounted on {fields[4]}"
    for line in Path("/proc/swaps").read_text().splitlines()[1:]:
        device = line.split()[0]
        busy[Path(os.path.realpath(device)).name] = "used as swap"
    return busy


def partitions(name: str) -> list[str]:
    base = Path("/sys/class/block") / name
    return sorted(p.name for p in base.iterdir() if (p / "partition").exists()) if base.exists() else []


def holders(name: str) -> list[str]:
    """Devices stacked on this one (device mapper, md, ...), recursively."""
    out: list[str] = []
    for child in [name, *partitions(name)]:
        directory = Path("/sys/class/block") / child / "holders"
        for holder in sorted(directory.iterdir()) if directory.exists() else []:
            out += [holder.name, *holders(holder.name)]
    return out


def root_disks() -> set[str]:
    """The device that holds / and the disks beneath it (partition parents, device-mapper slaves)."""
    number = os.stat("/").st_dev
    name = _names_by_devno().get((os.major(number), os.minor(number)))
    return _beneath(name) if name else set()


def _beneath(name: str) -> set[str]:
    out = {name}
    node = Path("/sys/class/block") / name
    if (node / "partition").exists():
        out |= _beneath(node.resolve().parent.name)
    slaves = node / "slaves"
    for slave in slaves.iterdir() if slaves.exists() else []:
        out |= _beneath(slave.name)
    return out


def _names_by_devno() -> dict[tuple[int, int], str]:
    out = {}
    for node in Path("/sys/class/block").iterdir():
        try:
            major, minor = (node / "dev").read_text().strip().split(":")
        except OSError:
            continue
        out[(int(major), int(minor))] = node.name
    return out
