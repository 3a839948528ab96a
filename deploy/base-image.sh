#!/usr/bin/env bash
# Build the Debian bookworm base image that `make test-deploy` builds StoreTune's images on, where no image
# registry is reachable: a debootstrap root from the Debian mirror in this machine's apt sources, imported
# into Docker. It carries this machine's package settings (its extra CA certificates, pip's and apt's
# configuration), so that builds on it reach the registries this machine reaches.
#   deploy/base-image.sh [IMAGE]        (default storetune-base:bookworm; nothing is done if it exists)
set -euo pipefail
IMAGE=${1:-storetune-base:bookworm}
MIRROR=${DEBIAN_MIRROR:-$(awk '/^URIs:/ && /debian\/?$/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)}
MIRROR=${MIRROR:-http://deb.debian.org/debian}

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "base image $IMAGE exists"
  exit 0
fi
command -v debootstrap >/dev/null || { echo "base-image.sh needs debootstrap (apt-get install debootstrap)"; exit 1; }
root=$(mktemp -d /var/tmp/storetune-base.XXXXXX)
# what debootstrap may leave mounted inside the root is unmounted first, and rm never crosses into a mount
trap 'umount -R "$root/proc" "$root/sys" "$root/dev" 2>/dev/null || true; rm -rf --one-file-system "$root"' EXIT
started=$(date +%s)
echo "debootstrap bookworm from $MIRROR into $root"
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$root" "$MIRROR" \
  > "$root.log" 2>&1 || { tail -20 "$root.log"; echo "debootstrap failed (the whole log: $root.log)"; exit 1; }
rm -f "$root.log"
# this machine's CA certificates and package settings (a proxy's CA, pip's index and certificate)
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
  chroot "$root" update-ca-certificates >/dev/null 2>&1
fi
[ -f /etc/pip.conf ] && cp /etc/pip.conf "$root/etc/pip.conf"
cp /etc/apt/apt.conf.d/99* "$root/etc/apt/apt.conf.d/" 2>/dev/null || true
chroot "$root" apt-get clean
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin
tar -C "$root" -c . | docker import --change 'ENV LANG=C.UTF-8' --change 'CMD ["bash"]' - "$IMAGE" >/dev/null
echo "base image $IMAGE built in $(( $(date +%s) - started )) s ($(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{printf "%d MB", $1/1e6}'))"
