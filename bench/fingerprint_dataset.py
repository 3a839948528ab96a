"""Fingerprint the workloads of one of StoreTune's own datasets: a short traced run of each workload on
a loop device set up as the dataset's sweep set it up (its manifest's engine, loop directory and size,
fileset, job versions), written to ``fingerprints.json`` beside its measurements with how, where and
when it was measured. The dataset runner reads that file, so campaigns on the dataset record their
workload's fingerprint and ``--warm-start similar`` and ``recommend`` can use them. As root.

    .venv/bin/python bench/fingerprint_dataset.py datasets/loop-storage-v3 --tracer tracefs --seconds 5
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from storetune.runners.device.blktrace import traced_run  # noqa: E402
from storetune.runners.device.personalities import job_version  # noqa: E402
from storetune.runners.fingerprint import FINGERPRINTS_FILE, features  # noqa: E402
from storetune.runners.settings import DeviceSettings  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dataset", type=Path)
    p.add_argument("--tracer", default="blktrace", help="blktrace, or tracefs where kernel lockdown refuses blktrace")
    p.add_argument("--seconds", type=float, default=5.0, help="the traced run's length")
    p.add_argument("--loop-dir", help="where the loop device's file goes (default: the manifest's)")
    args = p.parse_args()
    manifest = json.loads((args.dataset / "manifest.json").read_text())
    s = manifest["settings"]
    out: dict = {
        "how": {"command": " ".join(["bench/fingerprint_dataset.py", *sys.argv[1:]]), "tracer": args.tracer,
                "seconds": args.seconds, "config": "the space's defaults (runners.device.blktrace.traced_run)",
                "features": "runners/fingerprint.py (seed 004, Table 2)"},
        "where": {"host": platform.node(), "kernel": platform.release(), "machine": platform.machine(),
                  "load_before": os.getloadavg()},
        "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "workloads": {},
    }
    for workload in s["workloads"]:
        settings = DeviceSettings(device=s["device"], engine=s["engine"], workload=workload,
                                  loop_dir=args.loop_dir or s["loop_dir"], loop_size_mib=s["loop_size_mib"],
                                  fileset_mib=s["fileset_mib"], runtime_s=s["runtime_s"])
        start = time.monotonic()
        run = traced_run(settings, runtime_s=args.seconds, tracer=args.tracer)
        version = job_version(s["engine"], workload)
        if version != s.get("jobs", {}).get(workload, version):
            print(f"warning: {workload}'s job file is version {version}, the dataset's {s['jobs'][workload]}")
        keep = ("device_kind", "engine", "runtime_s", "config", "dropped_events", "complete", "by_command", "reads",
                "writes", "source_is", "sees", "ops_per_s", "mkfs", "mount_options")
        out["workloads"][workload] = {
            "source": run.source, "ios": len(run.trace), "features": features(run.trace),
            "meta": {**{k: run.meta[k] for k in keep if k in run.meta}, "job_version": version,
                     "wall_s": round(time.monotonic() - start, 1)},
        }
        if run.meta.get("warning"):
            print(f"warning: {workload}: {run.meta['warning']}")
        print(f"{workload}: {len(run.trace)} I/Os ({run.source}), {time.monotonic() - start:.1f} s, "
              f"lost {run.meta.get('dropped_events')}")
    out["finished_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    out["where"]["load_after"] = os.getloadavg()
    path = args.dataset / FINGERPRINTS_FILE
    path.write_text(json.dumps(out, indent=1, default=str) + "\n")
    print(f"-> {path}")


if __name__ == "__main__":
    main()
