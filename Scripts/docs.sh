#!/usr/bin/env bash
# Builds MainOnce's DocC documentation with the toolchain's own docc: no package plugin.
#
#   Scripts/docs.sh            builds .build/docs/MainOnce.doccarchive, failing on any warning
#   Scripts/docs.sh preview    builds it and serves it at http://localhost:8080/documentation/mainonce
#   Scripts/docs.sh static     builds it and writes a static website to .build/docs/site
#
# The symbol graphs are extracted from the built MainOnce module on every run, with
# `swift symbolgraph-extract`, after `swift build --target MainOnce` (a no-op when it is built
# already). Emitting them as a side effect of compiling (`-emit-symbol-graph`) writes them only
# when MainOnce recompiles, so a second run after a no-op build found none and produced no
# symbol pages. `swift package dump-symbol-graph` extracts every module of the package, the
# test modules too, and fails on a fresh clone, where no test build has made those. Extension
# blocks are included, so that MainOnce's extensions of Dispatch types
# (DispatchSemaphore.wait(for:), DispatchGroup.wait(for:), DispatchQueue.trackedSync) get pages.
#
# Every mode fails if the symbol graphs are missing; `build` and `static` also fail if the
# output has no page for onceOnMain(token:), or fewer pages than one for each symbol in the
# symbol graphs and one for each article (counted at each run, so that no figure goes stale).
set -euo pipefail
cd "$(dirname "$0")/.."

mode="${1:-build}"
case "$mode" in
  build | preview | static) ;;
  *)
    echo "usage: Scripts/docs.sh [build|preview|static]" >&2
    exit 64
    ;;
esac
output=".build/docs"
symbols="$output/symbol-graphs"
fail() {
  echo "Scripts/docs.sh: $*" >&2
  exit 1
}

built="$(swift build --target MainOnce 2>&1)" ||
  { printf '%s\n' "$built" >&2; fail "swift build --target MainOnce failed"; }
bin="$(swift build --show-bin-path)"
triple="$(basename "$(dirname "$bin")")" # .build/<triple>/debug
# MainOnce imports the C shim: its module map is the one SwiftPM generated for the build.
shim_map="$bin/_CMainOnceShims.build/module.modulemap"
[[ -f $shim_map ]] || fail "no module map for _CMainOnceShims at $shim_map"
rm -rf "$symbols" && mkdir -p "$symbols"
# Only MainOnce's own graphs: the package's other targets (demo, tests, fixtures) have none to show.
extracted="$(swift symbolgraph-extract -module-name MainOnce -target "$triple" \
  -I "$bin/Modules" -module-cache-path "$bin/ModuleCache" \
  -Xcc -fmodule-map-file="$shim_map" -Xcc -I -Xcc Sources/_CMainOnceShims/include \
  -minimum-access-level public -emit-extension-block-symbols -output-dir "$symbols" 2>&1)" ||
  { printf '%s\n' "$extracted" >&2; fail "swift symbolgraph-extract failed for MainOnce"; }
[[ -f "$symbols/MainOnce.symbols.json" ]] ||
  { printf '%s\n' "$extracted" >&2; fail "no symbol graph for MainOnce in $symbols"; }

# A page for each symbol (each has a `kind` whose identifier is `swift.…`; a relationship's kind
# is a plain string) and for each article but the catalog's root page, whose page is the
# module's, above documentation/mainonce: fewer means docc left symbols out.
symbol_count="$(cat "$symbols"/*.symbols.json |
  grep -oE '"kind" *: *\{ *"identifier" *: *"swift\.' | wc -l)"
article_count="$(find Sources/MainOnce/MainOnce.docc -name '*.md' ! -name MainOnce.md | wc -l)"
minimum_pages=$((symbol_count + article_count))

# The archive or website at $1 must have the symbol pages, not only the articles.
check_symbol_pages() {
  local pages="$1/data/documentation/mainonce" count
  [[ -f "$pages/onceonmain(token:file:line:_:).json" ]] ||
    fail "$1 has no page for onceOnMain(token:file:line:_:): the symbol pages are missing"
  count="$(find "$pages" -name '*.json' | wc -l)"
  ((count >= minimum_pages)) ||
    fail "$1 has $count pages under documentation/mainonce, expected at least" \
      "$minimum_pages: one for each of $symbol_count symbols and $article_count articles"
  echo "pages under documentation/mainonce: $count ($symbol_count symbols, $article_count articles)"
}

options=(
  Sources/MainOnce/MainOnce.docc --additional-symbol-graph-dir "$symbols"
  --fallback-display-name MainOnce --fallback-bundle-identifier MainOnce
)
case "$mode" in
  build)
    rm -rf "$output/MainOnce.doccarchive"
    docc convert "${options[@]}" --output-path "$output/MainOnce.doccarchive" \
      --analyze --warnings-as-errors
    check_symbol_pages "$output/MainOnce.doccarchive"
    echo "documentation: $output/MainOnce.doccarchive"
    ;;
  preview)
    docc preview "${options[@]}" --output-path "$output/preview" --port 8080
    ;;
  static)
    rm -rf "$output/site"
    docc convert "${options[@]}" --output-path "$output/site" \
      --transform-for-static-hosting --hosting-base-path /
    check_symbol_pages "$output/site"
    echo "website: $output/site (open documentation/mainonce/index.html through a web server)"
    ;;
esac
