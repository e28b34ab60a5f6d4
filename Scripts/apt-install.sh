#!/usr/bin/env bash
# Installs Debian packages on this machine with apt-get, those of them that are missing, as root:
#
#   Scripts/apt-install.sh PACKAGE...
#
# For .ci/run (the libraries and tools of the event-loop step) and Scripts/toolchain-chroot.sh
# (debootstrap, rsync, qemu-user-static). One such install runs at a time (.ci/toolchains makes
# two chroots at once, and on a new machine each needs debootstrap), and whoever waited installs
# only what is still missing. Another apt-get on the machine (machines are shared) is waited for,
# not failed on: `DPkg::Lock::Timeout` covers dpkg's lock but not the package lists' lock that
# `apt-get update` takes, so `update` is retried, for up to ten minutes.
set -euo pipefail
exec 7>/run/lock/mainonce-apt-install.lock
flock 7
missing=()
for package in "$@"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" ||
    missing+=("$package")
done
((${#missing[@]} > 0)) || exit 0
for attempt in $(seq 60); do
  apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null && break
  if ((attempt == 60)); then
    echo "apt-get update failed for ten minutes" >&2
    exit 1
  fi
  sleep 10
done
DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
  "${missing[@]}" >/dev/null
