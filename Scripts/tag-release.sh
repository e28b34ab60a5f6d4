#!/usr/bin/env bash
# Tags a release: an annotated tag named by the version (`0.1.0`, no `v`), whose message is the
# version's CHANGELOG entry, on the commit checked out. Tags are permanent: run it last, once
# CI has passed on that commit (CONTRIBUTING, *Cutting a release*).
#
#   Scripts/tag-release.sh VERSION
set -euo pipefail
cd "$(dirname "$0")/.."

version="${1:?usage: Scripts/tag-release.sh VERSION}"
if ! [[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
  echo "$version is not a version: MAJOR.MINOR.PATCH" >&2
  exit 64
fi
if [[ -n $(git status --porcelain --untracked-files=no) ]]; then
  echo "the working tree has uncommitted changes: tag a commit, not a working tree" >&2
  exit 1
fi
if git rev-parse -q --verify "refs/tags/$version" >/dev/null; then
  echo "the tag $version exists already: tags are permanent; release a new version instead" >&2
  exit 1
fi
# The entry: its heading, then everything up to the next version's heading (or the history).
entry="$(awk -v version="$version" '
  index($0, "## " version " ") == 1 { taking = 1; print; next }
  taking && /^## / { exit }
  taking { print }
' CHANGELOG.md)"
if [[ -z $entry ]]; then
  echo "CHANGELOG.md has no entry headed '## $version — DATE'" >&2
  exit 1
fi
minor="${version%.*}"
if ! grep -q "upToNextMinor(from: \"$minor\." README.md; then
  echo "the README's install block does not ask for $minor.x: update it first" >&2
  exit 1
fi
git tag -a "$version" -F - <<<"$entry"
echo "tagged $(git rev-parse --short HEAD) as $version; push it with: git push origin $version"
