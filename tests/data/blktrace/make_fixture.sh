#!/bin/bash
# How varmail-ext4.txt was made (as root): 1 s of fio's varmail (the device runner's job file) on ext4 on a
# new 512 MiB loop device, traced by the kernel's block tracer, and blkparse's output in
# runners.device.blktrace.BLKPARSE_FORMAT, first 300 lines. On the machine that made it the kernel's
# lockdown refused blktrace its debugfs files, so the same kernel events were read through tracefs
# instead (ftrace's "blk" tracer with its "bin" option writes blktrace's binary records, each after a
# 16-byte ftrace header, with sequence 0): the headers are cut and the records numbered, then
# blkparse reads them as it reads blktrace's files. Process names are "(null)": that stream has no
# blktrace notify records. In a private mount namespace, so tracefs is mounted for this script alone.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../../.." && pwd)
work=$(mktemp -d); trap 'umount "$work/mnt" 2>/dev/null || true; [ -n "${dev:-}" ] && losetup -d "$dev"; rm -rf "$work"' EXIT
truncate -s 512M "$work/img"; dev=$(losetup --find --show --direct-io=on "$work/img"); n=$(basename "$dev")
mkfs.ext4 -q -F "$dev"; mkdir "$work/mnt"; mount "$dev" "$work/mnt"
cd "$root" && python3 -c "
from runners.device.personalities import personality, fio_job
print(fio_job(personality('varmail', 32 << 20), '$work/mnt', 1))" > "$work/varmail.fio"
fio --create_only=1 "$work/varmail.fio" >/dev/null; sync; echo 3 > /proc/sys/vm/drop_caches
unshare -m bash -c "
T=/sys/kernel/tracing; mount -t tracefs nodev \$T
echo 1 > /sys/block/$n/trace/enable; echo blk > \$T/current_tracer; echo 1 > \$T/options/bin
timeout 3 cat \$T/trace_pipe > '$work/raw' & sleep 0.3
fio '$work/varmail.fio' >/dev/null; sync; wait || true
echo 0 > \$T/options/bin; echo nop > \$T/current_tracer; echo 0 > /sys/block/$n/trace/enable"
python3 - "$work/raw" "$work/conv" <<'PY'
import struct, sys
raw, out, i, seq = open(sys.argv[1], "rb").read(), bytearray(), 0, 0
while i + 64 <= len(raw):
    rec = bytearray(raw[i + 16:i + 64])
    assert struct.unpack_from("<I", rec)[0] == 0x65617407, "not a blktrace record (version 7)"
    pdu = struct.unpack_from("<H", rec, 46)[0]
    seq += 1; struct.pack_into("<I", rec, 4, seq)
    out += rec + raw[i + 64:i + 64 + pdu]; i += 64 + pdu
open(sys.argv[2], "wb").write(out)
PY
fmt=$(python3 -c "from runners.device.blktrace import BLKPARSE_FORMAT; print(BLKPARSE_FORMAT, end='')")
blkparse -q -i - -f "$fmt" < "$work/conv" | head -n 300 > "$here/varmail-ext4.txt"
echo "$(wc -l < "$here/varmail-ext4.txt") lines"
