#!/usr/bin/env bash
# Checks that the tests of MainOnce's state machines catch single-line mutations of them, in
# the configuration plain `swift test` runs ("fast") and in the full-size exploration that
# `.ci/run` runs with MAINONCE_FULL_EXPLORATION=1 ("full").
#
#   Scripts/mutations.sh            # every mutation in Scripts/mutations/
#   Scripts/mutations.sh NAME...    # only these (file names without .patch)
#
# Each mutation is a file `Scripts/mutations/NAME.patch`: a unified diff that changes one line
# of one source file (removes it, or replaces it), as `git diff` prints it, after header lines:
#
#   Mutation: what the change breaks, in a few words
#   Test: the `swift test --filter` argument of the tests expected to fail: those that explore
#         the machine, not those that break the model on purpose to show that its checks work
#   Equivalent: why no test can tell it from the original (optional: such a mutation must
#               survive, and the script fails if it is caught, since then the note is wrong)
#
# The script copies the working tree (tracked and untracked files, not ignored ones) to a
# scratch directory, `${MUTATIONS_SCRATCH:-/tmp/mainonce-mutations}`, whose `.build` it keeps
# between runs, and never changes the working tree. There it first runs each test named,
# unmutated, in both configurations (they must pass); then, for each mutation, applies the
# patch, builds the tests, runs the test in both configurations, and takes the patch out again.
# A mutation is caught when the test fails; a run that outlives its bound
# (`MUTATIONS_TIMEOUT`, 1800 s) or a patch that does not apply or compile is an error. The
# script prints one line per mutation and exits 1 if a mutation that is not equivalent survives
# either configuration, or one that is marked equivalent is caught. A full run takes tens of
# minutes (16 on a busy 2-core machine): the full configuration of an equivalent mutation
# explores everything.
#
# To add a mutation: change the line in a checkout, `git diff > Scripts/mutations/NAME.patch`,
# `git checkout` the file, and put the header lines at the top of the patch.
set -euo pipefail
cd "$(dirname "$0")/.."
repository="$PWD"
scratch="${MUTATIONS_SCRATCH:-${TMPDIR:-/tmp}/mainonce-mutations}"
bound="${MUTATIONS_TIMEOUT:-1800}"

if (($# > 0)); then
  patches=()
  for name in "$@"; do patches+=("Scripts/mutations/$name.patch"); done
else
  patches=(Scripts/mutations/*.patch)
fi
for patch in "${patches[@]}"; do
  [[ -f $patch ]] || { echo "no such mutation: $patch" >&2; exit 2; }
done

header() { sed -n "s/^$1: //p" "$2" | head -1; }

# A mutation changes one line: it removes one, and adds one or none.
for patch in "${patches[@]}"; do
  removed="$(grep -c '^-[^-]' "$patch" || true)"
  added="$(grep -c '^+[^+]' "$patch" || true)"
  if [[ $removed != 1 || $added -gt 1 || -z $(header Test "$patch") ]]; then
    echo "$patch: not a single-line change with a Test: line" >&2
    exit 2
  fi
done

# The scratch copy: every file but the ignored ones, each with a new modification time, so
# that the incremental build cannot take a file for one it has compiled already.
mkdir -p "$scratch"
find "$scratch" -mindepth 1 -maxdepth 1 ! -name .build -exec rm -rf {} +
git ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' file; do [[ -e $file ]] && printf '%s\0' "$file"; done |
  tar --null -T - -cf - | tar -xmf - -C "$scratch"
logs="$scratch/logs"
mkdir -p "$logs"
cd "$scratch"
# `git apply` patches the scratch copy as a plain directory, even where it lies inside a
# repository (such as this one's .build).
export GIT_CEILING_DIRECTORIES="$(dirname "$scratch")"

build() { swift build --build-tests >"$1" 2>&1; }

# Runs the test `filter` in `configuration` (fast or full) and prints what happened: passed,
# failed (the test failed or its process crashed), timed out, or ran no test.
run_test() {
  local filter="$1" configuration="$2" log="$3" status=0 full=""
  [[ $configuration == full ]] && full=1
  MAINONCE_FULL_EXPLORATION="$full" timeout "$bound" \
    swift test --skip-build --filter "$filter" >"$log" 2>&1 || status=$?
  if ((status == 124)); then
    echo "timed out"
  elif ((status != 0)); then
    echo "caught"
  elif grep -qE "Test run with [1-9][0-9]* tests? .*passed" "$log"; then
    echo "survived"
  else
    echo "ran no test"
  fi
}

echo "scratch copy: $scratch (logs in $logs)"
if ! build "$logs/unmutated.build.log"; then
  tail -20 "$logs/unmutated.build.log"
  echo "the unmutated package does not build" >&2
  exit 1
fi
mapfile -t filters < <(for patch in "${patches[@]}"; do header Test "$patch"; done | sort -u)
for filter in "${filters[@]}"; do
  for configuration in fast full; do
    log="$logs/unmutated.${filter//[^A-Za-z0-9]/_}.$configuration.log"
    result="$(run_test "$filter" "$configuration" "$log")"
    if [[ $result != survived ]]; then
      tail -20 "$log"
      echo "unmutated, $filter ($configuration) did not pass: $result" >&2
      exit 1
    fi
  done
done
echo "unmutated: ${filters[*]} pass in both configurations"

failures=0
printf '%-42s %-10s %-10s %s\n' mutation fast full verdict
for patch in "${patches[@]}"; do
  name="$(basename "$patch" .patch)"
  filter="$(header Test "$patch")"
  equivalent="$(header Equivalent "$patch")"
  if ! git apply "$repository/$patch" 2>"$logs/$name.apply.log"; then
    printf '%-42s %-10s %-10s %s\n' "$name" - - "ERROR: the patch does not apply"
    failures=$((failures + 1))
    continue
  fi
  if build "$logs/$name.build.log"; then
    fast="$(run_test "$filter" fast "$logs/$name.fast.log")"
    full="$(run_test "$filter" full "$logs/$name.full.log")"
  else
    fast="-" full="-"
  fi
  git apply -R "$repository/$patch"
  if [[ $fast == - ]]; then
    verdict="ERROR: does not compile (see $logs/$name.build.log)"
  elif [[ -n $equivalent && $fast == survived && $full == survived ]]; then
    verdict="ok, equivalent: $equivalent"
  elif [[ -n $equivalent ]]; then
    verdict="FAIL: marked equivalent, but not so"
  elif [[ $fast == caught && $full == caught ]]; then
    verdict="ok"
  else
    verdict="FAIL: $(header Mutation "$patch")"
  fi
  [[ $verdict == ok* ]] || failures=$((failures + 1))
  printf '%-42s %-10s %-10s %s\n' "$name" "$fast" "$full" "$verdict"
done

if ((failures > 0)); then
  echo "$failures of ${#patches[@]} mutations were not as expected" >&2
  exit 1
fi
echo "all ${#patches[@]} mutations as expected"
