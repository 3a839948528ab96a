"""From a storage_v1/v2/full configuration to the real mkfs command line and mount options."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Debian package of each file system's tools, for the message when one is missing.
MKFS = {
    "ext2": ("mkfs.ext2", "e2fsprogs"),
    "ext3": ("mkfs.ext3", "e2fsprogs"),
    "ext4": ("mkfs.ext4", "e2fsprogs"),
    "xfs": ("mkfs.xfs", "xfsprogs"),
    "btrfs": ("mkfs.btrfs", "btrfs-progs"),
}
QUEUE_PARAMETERS = {"io_scheduler": "scheduler", "read_ahead_kb": "read_ahead_kb", "nr_requests": "nr_requests"}


@dataclass(frozen=True)
class Build:
    fstype: str
    mkfs: list[str]  # the command, without the device
    mount_options: list[str]
    queue: dict[str, Any]  # sysfs attribute -> value

    def mkfs_argv(self, device: str) -> list[str]:
        return [*self.mkfs, device]

    def mount_argv(self, device: str, mountpoint: str) -> list[str]:
        return ["mount", "-t", self.fstype, "-o", ",".join(self.mount_options), device, mountpoint]


def build(config: Mapping[str, Any]) -> Build:
    """The mkfs and mount of a configuration. Every knob of storage_v1/v2/full maps to one option here, but
    storage_full's dirty limits, which are the host's (``dirty_limits``)."""
    fs = config["fs"]
    options = [config.get("atime", "relatime")]
    if fs in ("ext2", "ext3", "ext4"):
        mkfs = [MKFS[fs][0], "-F", "-q", "-b", str(config["block_size"]), "-I", str(config["inode_size"])]
        if fs == "ext4":
            mkfs += ["-G", str(config["flex_bg_size"])]
        if "journal_mib" in config:  # storage_full's; storage_v1/v2 leave the journal's size to mke2fs
            mkfs += ["-J", f"size={config['journal_mib']}"]
        # Initialise inode tables and journal now, or the kernel zeroes them during the measurement.
        mkfs += ["-E", "lazy_itable_init=0,lazy_journal_init=0"]
        if fs != "ext2":
            options += [f"data={config['journal_mode']}", f"commit={config['commit_s']}"]
    elif fs == "xfs":
        mkfs = ["mkfs.xfs", "-f", "-q", "-b", f"size={config['block_size']}", "-d", f"agcount={config['xfs_agcount']}"]
        options += [f"logbufs={config['xfs_logbufs']}", f"logbsize={config['xfs_logbsize'] // 1024}k"]
    elif fs == "btrfs":
        mkfs = ["mkfs.btrfs", "-f", "-q", "-s", str(config["block_size"]), "-n", str(config["btrfs_nodesize"]),
                "-m", config["btrfs_metadata"]]
        if config["btrfs_compress"] != "no":
            options.append(f"compress={config['btrfs_compress']}")
    else:
        raise ValueError(f"no file system {fs!r}")
    queue = {attr: config[name] for name, attr in QUEUE_PARAMETERS.items() if name in config}
    return Build(fs, mkfs, options, queue)


def dirty_limits(config: Mapping[str, Any], default_mib: int | None) -> tuple[int, int] | None:
    """vm.dirty_background_bytes and vm.dirty_bytes for a run, in MiB: storage_full's ``dirty_mib`` and
    ``dirty_background_pct`` where the configuration has them, else the runner's ``dirty_limit_mib`` (a quarter
    of it in the background), else None: the host's own settings."""
    if "dirty_mib" in config:
        limit = int(config["dirty_mib"])
        return max(1, limit * int(config.get("dirty_background_pct", 25)) // 100), limit
    return (max(1, default_mib // 4), default_mib) if default_mib else None
