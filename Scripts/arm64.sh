#!/usr/bin/env bash
# MainOnce on arm64, tried under emulation: a Debian 13 chroot for arm64 with Debian's own
# `swiftlang` (Swift 6.0.3), run through qemu-user (Scripts/toolchain-chroot.sh makes it, as
# the suite `trixie-arm64`, and runs each command in it). In it, from a clean build directory:
#
#   - `swift build`: the library, the demo, the fixtures (no compiler warning allowed);
#   - `MainOnceFixture platform facts`: the thread-id system call, libdispatch's queue layout
#     (mainonce_main_queue_layout_check, mainonce_queue_layout_self_test), a hop after
#     dispatchMain() with MainContext.isExact, and which barrier path the wait board took
#     (membarrier, or the sequentially consistent fallback where membarrier is missing);
#   - `swift run MainOnceDemo`, which must exit 0;
#   - the run-loop matrix: each scenario of Tests/MainOnceTests/RunLoopMatrixTests.swift,
#     `MainOnceFixture <driver> <context>` and `MainOnceAsyncFixture <context>`, checked as that
#     test checks it (PASS, exact=true, one run, nothing on standard error, ...).
#
# What it cannot show: qemu-user on an x86-64 host keeps x86's stronger memory ordering, so
# this tries the layout reads, the system calls and the build, not the wait board's orderings
# on a weakly ordered CPU. Not here: `swift test` (its build alone takes hours under emulation).
#
# Usage: Scripts/arm64.sh   (as root; makes the chroot the first time, in /var/cache/mainonce
# or $MAINONCE_CHROOT_DIR, and reuses it after). The whole run is bounded by
# MAINONCE_ARM64_MINUTES (60): a step still running then is ended, and the run fails.
# MAINONCE_TEST_TIME_SCALE (default 4 here: everything runs emulated) scales the fixtures'
# own time limits. Where no chroot can be made (not root, no network, no binfmt_misc), prints
# one line starting with SKIPPING and exits 77. Prints how long each part took.
set -euo pipefail
cd "$(dirname "$0")/.."

chroot_script=Scripts/toolchain-chroot.sh
suite=trixie-arm64
minutes="${MAINONCE_ARM64_MINUTES:-60}"
deadline=$((SECONDS + minutes * 60))
export MAINONCE_TEST_TIME_SCALE="${MAINONCE_TEST_TIME_SCALE:-4}"

step() { printf '\n== %s\n' "$*"; }
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT

# Runs a command bounded by what is left of the run's time. Ends the run if the time is up,
# saying so on the script's own standard error (fd 3), whatever the command's goes to.
exec 3>&2
bounded() {
  local left=$((deadline - SECONDS)) status=0
  if ((left <= 0)); then
    echo "FAIL: out of time: the run is bounded to $minutes minutes (MAINONCE_ARM64_MINUTES)" >&3
    exit 124
  fi
  timeout --kill-after=30 "$left" "$@" || status=$?
  if ((status == 124 || status == 137)); then
    echo "FAIL: '$*' still ran when the run's $minutes minutes were up" \
      "(MAINONCE_ARM64_MINUTES)" >&3
    exit 124
  fi
  return "$status"
}

# Runs COMMAND in the chroot, its output in $logs/NAME.log; stops the run if it fails or
# prints a compiler warning; prints how long it took and its last line.
in_chroot() {
  local name="$1" started=$SECONDS status=0 warnings
  shift
  bounded "$chroot_script" run "$suite" -- "$@" >"$logs/$name.log" 2>&1 || status=$?
  if ((status != 0)); then
    tail -40 "$logs/$name.log"
    echo "FAIL: arm64: '$*' failed (exit $status)" >&2
    exit 1
  fi
  warnings="$(grep -E '\.(swift|c|h):[0-9]+:[0-9]+: warning:' "$logs/$name.log" || true)"
  if [[ -n $warnings ]]; then
    printf '%s\n' "$warnings"
    echo "FAIL: arm64: '$*' printed compiler warnings" >&2
    exit 1
  fi
  echo "$name: $((SECONDS - started)) s: $(tail -1 "$logs/$name.log")"
}

started=$SECONDS
step "chroot: Debian 13 for arm64 with swiftlang, under qemu-user"
status=0
dir="$(bounded "$chroot_script" make "$suite")" || status=$?
if ((status == 77)); then exit 77; fi # it printed why, in one line
if ((status != 0)); then exit "$status"; fi
echo "chroot ready: $dir: $((SECONDS - started)) s"
grep -h "^qemu-aarch64\|^flags" /proc/sys/fs/binfmt_misc/qemu-aarch64 2>/dev/null |
  sed 's/^/binfmt_misc qemu-aarch64: /' || true

# The stall reports name what a thread is doing from /proc/<tid>/syscall, by ThreadSampler's
# table of system-call numbers, one per architecture. Under qemu-user that file shows the host's
# numbers (the kernel runs qemu's x86-64 calls), so running cannot try the arm64 table: it is
# checked against the arm64 kernel headers instead. Every name of the x86-64 table must be in
# the arm64 one with the headers' number, unless arm64 has no such call.
step "system-call numbers: ThreadSampler's arm64 table against arm64's headers"
sampler=Sources/MainOnce/Deadlock/ThreadSampler.swift
headers="$dir/usr/include/aarch64-linux-gnu/asm/unistd_64.h"
# "number name" lines of the table for architecture $1.
syscall_table() {
  awk -v arch="arch($1)" 'index($0, arch) { on = 1; next } on && /#(elseif|else|endif)/ { on = 0 } on' \
    "$sampler" | grep -oE '[0-9]+: "[a-z0-9_]+"' | tr -d '":'
}
arm64_number() { awk -v name="__NR_$1" '$1 == "#define" && $2 == name { print $3 }' "$headers"; }
mapfile -t x86_64_names < <(syscall_table x86_64 | cut -d' ' -f2)
mapfile -t arm64_entries < <(syscall_table arm64)
((${#x86_64_names[@]} > 10 && ${#arm64_entries[@]} > 10)) ||
  { echo "FAIL: cannot read the tables of $sampler" >&2; exit 1; }
mismatches=() absent=()
for name in "${x86_64_names[@]}"; do
  number="$(arm64_number "$name")"
  listed="$(printf '%s\n' "${arm64_entries[@]}" | awk -v name="$name" '$2 == name { print $1 }')"
  [[ -n $number ]] || absent+=("$name")
  [[ $listed == "$number" ]] ||
    mismatches+=("$name: ${listed:-missing} in the table, ${number:-none} in the headers")
done
for entry in "${arm64_entries[@]}"; do
  read -r number name <<<"$entry"
  [[ $(arm64_number "$name") == "$number" ]] ||
    mismatches+=("$name: $number in the table, $(arm64_number "$name") in the headers")
done
if ((${#mismatches[@]} > 0)); then
  printf '%s\n' "${mismatches[@]}" | sort -u
  echo "FAIL: $sampler's arm64 table disagrees with $headers" >&2
  exit 1
fi
echo "syscalls: ${#arm64_entries[@]} names as arm64 numbers them; not on arm64: ${absent[*]}"

step "build"
in_chroot clean rm -rf .build
in_chroot build swift build
grep -m1 "Swift version" "$logs/clean.log"

step "platform facts: thread ids, queue layout, barrier path"
in_chroot platform .build/debug/MainOnceFixture platform facts
facts="$(grep -E '^(PASS|FAIL)' "$logs/platform.log" | tail -1)"
echo "$facts"
[[ $facts == PASS* ]] || { echo "FAIL: arm64: the platform facts do not hold" >&2; exit 1; }
[[ $facts == *" arch=arm64 "* ]] || { echo "FAIL: arm64: not run as arm64" >&2; exit 1; }

step "demo"
in_chroot demo timeout "$(awk -v s="$MAINONCE_TEST_TIME_SCALE" 'BEGIN { print 120 * s }')" \
  swift run MainOnceDemo

# The run-loop matrix, checked as RunLoopMatrixTests checks it: the scenarios, then for each
# what its verdict line must say. All in one chroot run, one process per scenario.
step "run-loop matrix"
# Each line: driver context mainThread workItems (the values RunLoopMatrixTests expects).
matrix=()
for driver in dispatchMain runLoop; do
  for context in topLevel mainBlock background nestedSync mixed; do
    main=false
    [[ $driver == runLoop || $context == topLevel ]] && main=true
    matrix+=("$driver $context $main")
  done
done
for context in topLevel mainActor background nestedSync mixed; do
  main=false
  [[ $context == topLevel ]] && main=true
  matrix+=("asyncMain $context $main")
done
matrix+=("none topLevel true")
# shellcheck disable=SC2016 # expanded in the chroot
in_chroot matrix bash -c '
  failed=0
  for line in "$@"; do
    read -r driver context main <<<"$line"
    case $context in background) items="1" ;; mixed) items="0 1" ;; *) items="0" ;; esac
    if [[ $driver == asyncMain ]]; then
      command=(.build/debug/MainOnceAsyncFixture "$context")
    else
      command=(.build/debug/MainOnceFixture "$driver" "$context")
    fi
    status=0
    output="$(timeout 300 "${command[@]}" 2>/tmp/matrix.err)" || status=$?
    verdict="$(grep -E "^(PASS|FAIL)" <<<"$output" | tail -1)"
    value() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$verdict"; }
    problems=()
    ((status == 0)) || problems+=("exit $status")
    [[ $verdict == PASS* ]] || problems+=("no PASS")
    [[ $(value exact) == true ]] || problems+=("exact=$(value exact)")
    [[ $(value runs) == 1 ]] || problems+=("runs=$(value runs)")
    [[ $(value earlyReturns) == 0 ]] || problems+=("earlyReturns=$(value earlyReturns)")
    [[ $(value mainContext) == true ]] || problems+=("mainContext=$(value mainContext)")
    [[ $(value mainThread) == "$main" ]] || problems+=("mainThread=$(value mainThread), not $main")
    [[ " $items " == *" $(value workItems) "* ]] || problems+=("workItems=$(value workItems)")
    [[ ! -s /tmp/matrix.err ]] || problems+=("stderr: $(head -c 300 /tmp/matrix.err)")
    if ((${#problems[@]} == 0)); then
      echo "ok   ${command[*]#.build/debug/}: ${verdict:0:60}"
    else
      failed=$((failed + 1))
      echo "FAIL ${command[*]#.build/debug/}: ${problems[*]}: $verdict"
    fi
  done
  echo "run-loop matrix: $(($# - failed)) of $# scenarios passed"
  ((failed == 0))
' bash "${matrix[@]}"
grep -E '^(ok|FAIL) ' "$logs/matrix.log"

step "arm64 under emulation: passed in $((SECONDS - started)) s"
echo "$facts"
