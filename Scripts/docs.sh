#!/usr/bin/env bash
# Builds MainOnce's DocC documentation with the toolchain's own docc: no package plugin.
#
#   Scripts/docs.sh            builds .build/docs/MainOnce.doccarchive, failing on any warning
#   Scripts/docs.sh preview    builds it and serves it at http://localhost:8080/documentation/mainonce
#   Scripts/docs.sh static     builds it and writes a static website to .build/docs/site
#
# The symbol graph includes extension blocks, so that MainOnce's extensions of Dispatch types
# (DispatchSemaphore.wait(for:), DispatchGroup.wait(for:), DispatchQueue.trackedSync) get pages.
set -euo pipefail
cd "$(dirname "$0")/.."

mode="${1:-build}"
output=".build/docs"
symbols="$output/symbol-graphs"
rm -rf "$symbols" && mkdir -p "$symbols"

swift build --target MainOnce -Xswiftc -emit-symbol-graph -Xswiftc -emit-symbol-graph-dir \
  -Xswiftc "$symbols" -Xswiftc -emit-extension-block-symbols

options=(
  Sources/MainOnce/MainOnce.docc --additional-symbol-graph-dir "$symbols"
  --fallback-display-name MainOnce --fallback-bundle-identifier MainOnce
)
case "$mode" in
  build)
    docc convert "${options[@]}" --output-path "$output/MainOnce.doccarchive" \
      --analyze --warnings-as-errors
    echo "documentation: $output/MainOnce.doccarchive"
    ;;
  preview)
    docc preview "${options[@]}" --output-path "$output/preview" --port 8080
    ;;
  static)
    docc convert "${options[@]}" --output-path "$output/site" \
      --transform-for-static-hosting --hosting-base-path /
    echo "website: $output/site (open documentation/mainonce/index.html through a web server)"
    ;;
  *)
    echo "usage: Scripts/docs.sh [build|preview|static]" >&2
    exit 64
    ;;
esac
