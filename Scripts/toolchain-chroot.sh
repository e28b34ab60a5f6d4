#!/usr/bin/env bash
# Debian chroots with Debian's own Swift toolchain (the `swiftlang` package), to build and test
# MainOnce with the older Swift 6 toolchains its tools version admits.
#
#   Scripts/toolchain-chroot.sh versions              each suite and the Swift it must have
#   Scripts/toolchain-chroot.sh make SUITE            makes the chroot if missing, prints its path
#   Scripts/toolchain-chroot.sh run SUITE -- COMMAND  runs COMMAND in the chroot, in a copy of
#                                                     this package
#
# A chroot lives at ${MAINONCE_CHROOT_DIR:-/var/cache/mainonce}/SUITE-swiftlang-VERSION and is
# reused once made. It is made as root with debootstrap (installed with apt-get if missing) from
# Debian's archive, in a temporary directory under a lock, and renamed into place only when
# `swift --version` in it says the version below: a half-made chroot is never reused. Making one
# downloads about 1.2 GB and takes minutes.
#
# `run` copies this package (without its build directories and .git) into the chroot, to
# /build/<the package's path>, where the builds stay between runs, and runs COMMAND there with
# /proc and /dev mounted in a mount namespace of its own: the mounts end with COMMAND, whatever
# way it ends, and no other process sees them. It prints `swift --version` first and fails if
# the version is not the one below. Only a few variables reach COMMAND: MAINONCE_*, SWIFT_*,
# ASAN_OPTIONS, TSAN_OPTIONS, CI, TERM.
#
# A suite may name another architecture: `trixie-arm64` is Debian 13 for arm64, run under
# emulation (qemu-user, through binfmt_misc: Scripts/arm64.sh uses it). Making it installs
# qemu-user-static, mounts binfmt_misc and registers qemu for arm64 binaries if they are not
# (registered with qemu opened at once, so that it runs them inside the chroot too), then
# debootstraps in two stages, the second under emulation. `versions` lists only the native suites.
#
# Where no chroot can be made (not root, no apt-get to install debootstrap, no network, no
# emulation), `make` and `run` print one line starting with SKIPPING and exit 77.
set -euo pipefail

# The Swift that Debian's `swiftlang` is in each suite: the one place these versions are written
# (README.md's Platforms table quotes them). A suite whose package moves on fails `make` until
# this line follows it.
declare -A expected_swift=([trixie]=6.0.3 [sid]=6.2.3 [trixie-arm64]=6.0.3)
suites=(trixie sid) # native ones; the others are named SUITE-ARCHITECTURE
mirror=http://deb.debian.org/debian

package_root="$(cd "$(dirname "$0")/.." && pwd)"
chroot_root="${MAINONCE_CHROOT_DIR:-/var/cache/mainonce}"

usage() {
  sed -n '5,8p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 64
}

# The reason no chroot can be made here, or nothing.
cannot_make_reason() {
  if [[ $(id -u) -ne 0 ]]; then
    echo "not root"
  elif ! command -v debootstrap >/dev/null && ! command -v apt-get >/dev/null; then
    echo "no debootstrap and no apt-get to install it"
  elif ! timeout 20 bash -c "exec 3<>/dev/tcp/deb.debian.org/80" 2>/dev/null; then
    echo "no network to deb.debian.org"
  fi
}

skip() {
  echo "SKIPPING Swift $2 from Debian $1 (chroot $3): $4" >&2
  exit 77
}

chroot_dir() { echo "$chroot_root/$1-swiftlang-${expected_swift[$1]}"; }

# A suite's Debian release and Debian architecture: trixie-arm64 is trixie for arm64.
debian_release() { echo "${1%%-*}"; }
debian_arch() {
  if [[ $1 == *-* ]]; then echo "${1#*-}"; else dpkg --print-architecture; fi
}
foreign() { [[ $(debian_arch "$1") != "$(dpkg --print-architecture)" ]]; }

# Host packages, installed with apt-get where missing (see Scripts/apt-install.sh).
apt_install() { "$package_root/Scripts/apt-install.sh" "$@"; }

# Debian's names: the architecture, qemu's name for it, and binfmt_misc's entry for it.
declare -A qemu_name=([arm64]=aarch64)

# Makes the kernel run binaries of architecture $1 through qemu-user-static, in chroots too: the
# entry is registered with the F flag, qemu opened once, at registration. Prints why it cannot,
# or nothing. Leaves binfmt_misc mounted and the entry registered, as systemd-binfmt would.
emulation_problem() {
  local arch="$1" name="${qemu_name[$1]:-}" binfmt=/proc/sys/fs/binfmt_misc conf
  [[ -n $name ]] || { echo "no emulator known for $arch"; return; }
  if ! command -v "qemu-$name-static" >/dev/null; then
    echo "installing qemu-user-static with apt-get" >&2
    apt_install qemu-user-static || { echo "qemu-user-static did not install"; return; }
  fi
  if [[ ! -e $binfmt/register ]]; then
    mount -t binfmt_misc binfmt_misc "$binfmt" 2>/dev/null ||
      { echo "binfmt_misc cannot be mounted"; return; }
  fi
  if [[ ! -e $binfmt/status || $(cat "$binfmt/status") != enabled ]]; then
    echo "binfmt_misc is disabled"
    return
  fi
  if [[ ! -e $binfmt/qemu-$name ]]; then
    conf="/usr/lib/binfmt.d/qemu-$name.conf"
    [[ -r $conf ]] || { echo "qemu-user-static has no $conf"; return; }
    # Debian's entry, with F (fix binary) among its flags, the last field.
    local entry
    entry="$(grep -v '^#' "$conf" | head -1)"
    [[ ${entry##*:} == *F* ]] || entry+=F
    printf '%s\n' "$entry" >"$binfmt/register" 2>/dev/null ||
      { echo "binfmt_misc refused the entry for qemu-$name"; return; }
  fi
  if [[ $(head -1 "$binfmt/qemu-$name") != enabled ]]; then
    echo "the binfmt_misc entry qemu-$name is disabled"
  elif ! grep -q '^flags:.*F' "$binfmt/qemu-$name"; then
    echo "the binfmt_misc entry qemu-$name lacks the F flag: it cannot run in a chroot" \
      "(echo -1 > $binfmt/qemu-$name to let this script register its own)"
  fi
}

# Mount points at or below $1, deepest first.
mounts_under() {
  awk -v dir="$1" '$5 == dir || index($5, dir "/") == 1 { print $5 }' /proc/self/mountinfo |
    sort -r
}

# The version `swift --version` prints in the chroot $1 (whose /proc is mounted), or nothing.
swift_version_in() {
  { chroot "$1" swift --version 2>&1 || true; } |
    sed -n 's/.*Swift version \([0-9][0-9.]*\).*/\1/p' | head -1
}

make_chroot() {
  local suite="$1" version="${expected_swift[$1]}" dir reason
  dir="$(chroot_dir "$suite")"
  # The directory exists only once complete (renamed into place). Not `-x usr/bin/swift`: that
  # is an absolute symbolic link, which means something else outside the chroot.
  if [[ -d $dir ]]; then
    echo "$dir"
    return
  fi
  # Made only by a root that can reach Debian's archive (and run the architecture's binaries).
  reason="$(cannot_make_reason)"
  if [[ -z $reason ]] && foreign "$suite"; then reason="$(emulation_problem "$(debian_arch "$suite")")"; fi
  [[ -z $reason ]] || skip "$suite" "$version" "$dir" "$reason"
  mkdir -p "$chroot_root"
  (
    # One maker at a time per chroot; whoever waited finds it made.
    exec 9>"$chroot_root/.$(basename "$dir").lock"
    flock 9
    if [[ -d $dir ]]; then exit 0; fi
    if ! command -v debootstrap >/dev/null; then
      echo "installing debootstrap with apt-get" >&2
      apt_install debootstrap
    fi
    local tmp started log
    tmp="$(mktemp -d "$chroot_root/.$(basename "$dir").XXXXXX")"
    # On any exit: unmount what the build mounted, then delete the half-made chroot, unless
    # something is still mounted in it (deleting then would delete what is mounted there).
    # shellcheck disable=SC2064
    trap "cleanup_tmp '$tmp'" EXIT
    started=$SECONDS
    log="$chroot_root/$(basename "$dir").log"
    local release arch
    release="$(debian_release "$suite")" arch="$(debian_arch "$suite")"
    echo "making $dir (Debian $release for $arch, debootstrap --variant=minbase, then" \
      "swiftlang);  log in $log" >&2
    if foreign "$suite"; then
      # Two stages: the first unpacks on the host, the second configures under emulation.
      if ! { debootstrap --arch="$arch" --foreign --variant=minbase "$release" "$tmp" "$mirror" &&
        chroot "$tmp" /debootstrap/debootstrap --second-stage; } >"$log" 2>&1; then
        tail -20 "$log" >&2
        exit 1
      fi
    elif ! debootstrap --variant=minbase "$release" "$tmp" "$mirror" >"$log" 2>&1; then
      tail -20 "$log" >&2
      exit 1
    fi
    echo "debootstrap: $((SECONDS - started)) s" | tee -a "$log" >&2
    mount -t proc proc "$tmp/proc"
    # sid's Release file may be past its Valid-Until date.
    if ! { chroot "$tmp" apt-get -o Acquire::Check-Valid-Until=false update &&
      chroot "$tmp" env DEBIAN_FRONTEND=noninteractive apt-get install -y swiftlang; } \
      >>"$log" 2>&1; then
      tail -20 "$log" >&2
      exit 1
    fi
    grep -E "^(Need to get|After this operation)" "$log" >&2 || true
    chroot "$tmp" apt-get clean
    local found
    found="$(swift_version_in "$tmp")"
    umount "$tmp/proc"
    if [[ $found != "$version" ]]; then
      echo "Debian $release's swiftlang ($arch) is Swift '$found', not $version: update expected_swift" \
        "in $0" >&2
      exit 1
    fi
    mv -T "$tmp" "$dir"
    trap - EXIT
    echo "made $dir in $((SECONDS - started)) s; $(du -sh "$dir" | cut -f1) on disk" |
      tee -a "$log" >&2
  )
  echo "$dir"
}

cleanup_tmp() {
  local tmp="$1" mount
  for mount in $(mounts_under "$tmp"); do umount "$mount" || true; done
  if [[ -n $(mounts_under "$tmp") ]]; then
    echo "left $tmp in place: still mounted there: $(mounts_under "$tmp" | tr '\n' ' ')" >&2
    return
  fi
  rm -rf "$tmp"
}

# Debian's 6.2.3 ships Swift Testing's _Testing_Foundation module without its library, so a
# test build fails to link and run. An empty library of that name, on LIBRARY_PATH and
# LD_LIBRARY_PATH in `run`, takes its place: MainOnce's tests use nothing from it.
stub_dir=/usr/local/lib/mainonce-stubs
make_stubs() {
  local dir="$1" module
  [[ -e $dir$stub_dir/lib_Testing_Foundation.so ]] && return
  module="$(find "$dir/usr/lib" "$dir/usr/libexec" -path '*linux*' \
    -name '_Testing_Foundation.swiftmodule' -print -quit 2>/dev/null)"
  [[ -n $module ]] || return 0
  [[ -z $(find "$dir/usr/lib" "$dir/usr/libexec" -name 'lib_Testing_Foundation.so' -print -quit) ]] ||
    return 0
  (
    exec 9>"$chroot_root/.$(basename "$dir").lock"
    flock 9
    mkdir -p "$dir$stub_dir"
    echo "" >"$dir$stub_dir/empty.c"
    chroot "$dir" /usr/libexec/swift/bin/clang -shared -o "$stub_dir/lib_Testing_Foundation.so.tmp" "$stub_dir/empty.c"
    mv "$dir$stub_dir/lib_Testing_Foundation.so.tmp" "$dir$stub_dir/lib_Testing_Foundation.so"
  )
}

run_in_chroot() {
  local suite="$1" version="${expected_swift[$1]}" dir copy
  shift
  [[ ${1:-} == -- ]] && shift
  (($# > 0)) || usage
  dir="$(make_chroot "$suite")"
  local reason
  if foreign "$suite"; then
    # Registered again after a reboot, say.
    reason="$(emulation_problem "$(debian_arch "$suite")")"
    [[ -z $reason ]] || skip "$suite" "$version" "$dir" "$reason"
  fi
  make_stubs "$dir"
  # The copy: this package's files as they are now (committed or not), without builds.
  copy="/build$package_root"
  mkdir -p "$dir$copy"
  exec 8>"$dir$copy.lock"
  flock 8
  command -v rsync >/dev/null || apt_install rsync
  rsync -a --delete --exclude='.build*' --exclude=/.git --exclude=.swiftpm \
    "$package_root/" "$dir$copy/"
  local -a environment=(HOME=/root LANG=C.UTF-8 PATH=/usr/local/bin:/usr/bin:/bin
    "LIBRARY_PATH=$stub_dir" "LD_LIBRARY_PATH=$stub_dir")
  local name
  while IFS= read -r name; do
    environment+=("$name=${!name}")
  done < <(compgen -e | grep -E '^(MAINONCE_|SWIFT_|ASAN_OPTIONS$|TSAN_OPTIONS$|CI$|TERM$)' || true)
  unshare --mount --propagation private -- bash -c '
    set -euo pipefail
    dir="$1" copy="$2" version="$3"
    shift 3
    mount -t proc proc "$dir/proc"
    mount --rbind /dev "$dir/dev"
    exec chroot "$dir" /usr/bin/env -i "$@"
  ' bash "$dir" "$copy" "$version" "${environment[@]}" bash -c '
    set -euo pipefail
    cd "$1"
    swift --version 2>&1
    found="$(swift --version 2>&1 | sed -n "s/.*Swift version \([0-9][0-9.]*\).*/\1/p" | head -1)"
    if [[ $found != "$2" ]]; then
      echo "this chroot has Swift $found, not $2" >&2
      exit 1
    fi
    shift 2
    exec "$@"
  ' bash "$copy" "$version" "$@"
}

command="${1:-}"
[[ -n $command ]] || usage
shift
case "$command" in
  versions)
    for suite in "${suites[@]}"; do echo "$suite ${expected_swift[$suite]}"; done
    ;;
  make | run)
    suite="${1:-}"
    [[ -n $suite && -n ${expected_swift[$suite]:-} ]] || {
      echo "unknown suite '$suite': one of ${suites[*]}" >&2
      exit 64
    }
    shift
    if [[ $command == make ]]; then make_chroot "$suite"; else run_in_chroot "$suite" "$@"; fi
    ;;
  *) usage ;;
esac
