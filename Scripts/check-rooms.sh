#!/usr/bin/env bash
# Checks that MainOnce's rooms depend one way: each room uses only the rooms drawn below it in
# CONTRIBUTING.md's picture ("Rooms and their arrows"), never one beside it or above it; and
# that each room's opening comment names, in its "It calls ..." sentences, the rooms it uses.
#
#   Scripts/check-rooms.sh [SOURCES [CONTRIBUTING]]   # defaults: this repository's
#   ROOMS_VERBOSE=1 Scripts/check-rooms.sh            # also each use: room -> room: names
#
# A room is a folder of SOURCES; the files at its top are the room `API`. What counts is what the
# code uses, not where files sit or what they import. With comments and string literals blanked
# out (the code of an interpolation is kept), a room *declares* every type, protocol and
# typealias at the top level of its files, every top-level function and variable whose name is
# declared nowhere else in SOURCES, and every member that an extension in it adds to another
# room's type, if that name too is declared only there. A room *uses* another room when its code
# names one of the other room's declarations: a type anywhere but after a `.` (a nested type of
# that name is the enclosing type's; in a room that declares a nested type of the same name, the
# name is that room's), a function or variable not after a `.`, an extension's member after one.
# A name declared twice (a protocol's requirement and its witnesses, a method and a local) is
# nobody's, so a use of it counts for no room: a limit of reading names rather than types, which
# the per-room table makes visible to a reviewer.
#
# A room's opening comment is the first run of `//` lines of its first file, as the table in
# CONTRIBUTING.md's "Where things are" names it; the rooms it calls are those written as `Room/`
# in its sentences that begin "It calls" ("It calls no other room" names none).
#
# Prints, per room, the rooms it uses; exits 1, naming each use against the order (room, name,
# file:line), each opening comment that names other rooms than its room uses, and each room
# missing from the picture.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
sources="${1:-$root/Sources/MainOnce}"
contributing="${2:-$root/CONTRIBUTING.md}"

# The picture: the first ```text block after the heading "Rooms and their arrows". Each line's
# capitalized words are rooms; a line lower down is a level lower. Rooms on one line are peers.
levels="$(awk '
  /^#+ .*Rooms and their arrows/ { heading = 1; next }
  heading && /^```/ { if (inside) exit; inside = 1; next }
  inside {
    line = ""
    rest = $0
    while (match(rest, /[A-Z][A-Za-z]+/)) {
      line = line (line == "" ? "" : " ") substr(rest, RSTART, RLENGTH)
      rest = substr(rest, RSTART + RLENGTH)
    }
    if (line != "") print line
  }' "$contributing")"
if [[ -z $levels ]]; then
  echo "check-rooms: no picture of the rooms in $contributing (a \`\`\`text block under a" \
    "heading \"Rooms and their arrows\")" >&2
  exit 1
fi
# Each room's first file, from the rows of "Where things are": | `Room/` | ... | `File.swift` |
openers="$(awk -F'|' '
  /^#+ / { inside = ($0 ~ /Where things are/) }
  inside && $2 ~ /^ *`[A-Za-z]+\/` *$/ {
    room = $2; gsub(/[ `\/]/, "", room)
    file = $(NF - 1); gsub(/[ `]/, "", file)
    print room, file
  }' "$contributing")"

mapfile -t files < <(find "$sources" -name '*.swift' | LC_ALL=C sort)
awk -v sources="$sources" -v levels="$levels" -v openers="$openers" \
  -v verbose="${ROOMS_VERBOSE:-}" '
# ---- Lexing: comments and strings blanked, interpolated code kept, line by line. ----
function push(mode, depth) { sp++; stack[sp] = mode; stackDepth[sp] = depth }
function lex(text,    out, i, n, c, two, three, mode) {
  out = ""
  n = length(text)
  i = 1
  while (i <= n) {
    c = substr(text, i, 1); two = substr(text, i, 2); three = substr(text, i, 3)
    mode = stack[sp]
    if (mode == "block") {
      if (two == "/*") { blockDepth++; out = out "  "; i += 2; continue }
      if (two == "*/") { if (--blockDepth == 0) sp--; out = out "  "; i += 2; continue }
      out = out " "; i++; continue
    }
    if (mode == "string" || mode == "multiline") {
      if (c == "\\") {
        if (substr(text, i + 1, 1) == "(") { push("code", 1); out = out "  "; i += 2; continue }
        out = out "  "; i += 2; continue
      }
      if (mode == "string" && c == "\"") { sp--; out = out " "; i++; continue }
      if (mode == "multiline" && three == "\"\"\"") { sp--; out = out "   "; i += 3; continue }
      out = out " "; i++; continue
    }
    # Code: at the top, or inside an interpolation.
    if (two == "//") break
    if (two == "/*") { push("block", 0); blockDepth = 1; out = out "  "; i += 2; continue }
    if (three == "\"\"\"") { push("multiline", 0); out = out "   "; i += 3; continue }
    if (c == "\"") { push("string", 0); out = out " "; i++; continue }
    if (sp > 0 && mode == "code") {
      if (c == "(") stackDepth[sp]++
      if (c == ")" && --stackDepth[sp] == 0) { sp--; out = out " "; i++; continue }
    }
    out = out c; i++
  }
  return out
}
function roomOf(path,    rest) {
  rest = substr(path, length(sources) + 2)
  return index(rest, "/") ? substr(rest, 1, index(rest, "/") - 1) : "API"
}
function declare(keyword, name) {
  if (keyword == "extension") {
    if (depth == 0) { extending = name; pendingExtension = 1 }
    return
  }
  if (keyword ~ /^(func|var|let|case)$/) valueCount[name]++
  if (keyword ~ /^(class|struct|enum|protocol|actor|typealias|associatedtype)$/) {
    if (depth > 0) nestedType[name, roomOf(FILENAME)] = 1
    else if (!(name in typeRoom)) typeRoom[name] = roomOf(FILENAME)
    return
  }
  if (depth == 0 && keyword ~ /^(func|var|let)$/) {
    globalRoom[name] = roomOf(FILENAME)
    return
  }
  if (extending != "" && depth == extensionDepth && keyword ~ /^(func|var|let)$/) {
    memberRoom[name] = roomOf(FILENAME); memberExtends[name] = extending
  }
}
# The rooms a room'"'"'s opening comment says it calls, as a sorted list.
function calledIn(file,    line, text, started, rest, sentence, found, list, r, n, names) {
  text = ""; started = 0
  while ((getline line < file) > 0) {
    if (line ~ /^\/\// && line !~ /^\/\/\//) { started = 1; sub(/^\/\/ ?/, "", line); text = text " " line }
    else if (started) break
  }
  close(file)
  rest = text
  while ((n = index(rest, "It calls")) > 0) {
    rest = substr(rest, n)
    sentence = match(rest, /\.( |$)/) ? substr(rest, 1, RSTART) : rest
    rest = substr(rest, length(sentence) + 1)
    while (match(sentence, /`[A-Za-z]+\//)) {
      found[substr(sentence, RSTART + 1, RLENGTH - 2)] = 1
      sentence = substr(sentence, RSTART + RLENGTH)
    }
  }
  list = ""
  for (r = 1; r <= roomTotal; r++) if (order[r] in found) list = list (list == "" ? "" : ", ") order[r]
  return list
}
FNR == 1 { sp = 0; depth = 0; extending = ""; pendingExtension = 0; pendingDeclaration = "" }
{
  code = lex($0)
  files[FILENAME] = 1
  lines[FILENAME, FNR] = code
  lineCount[FILENAME] = FNR
  # ---- Declarations, with the brace depth each is made at. ----
  rest = code
  while (match(rest, /[A-Za-z_][A-Za-z0-9_]*|[{}.]/)) {
    token = substr(rest, RSTART, RLENGTH)
    rest = substr(rest, RSTART + RLENGTH)
    if (token == "{") {
      depth++
      if (pendingExtension) { pendingExtension = 0; extensionDepth = depth }
      pendingDeclaration = ""
      continue
    }
    if (token == "}") { if (depth-- == extensionDepth) extending = ""; continue }
    if (token == ".") { afterDot = 1; pendingDeclaration = ""; continue }
    if (!afterDot && token ~ /^(class|struct|enum|protocol|actor|typealias|associatedtype|func|var|let|case|extension)$/) {
      pendingDeclaration = token
    } else if (pendingDeclaration != "") {
      if (!afterDot) declare(pendingDeclaration, token)
      pendingDeclaration = ""
    }
    afterDot = 0
  }
}
END {
  # Rooms and levels from the picture: level 1 is the top line.
  split(levels, levelLines, "\n")
  for (l = 1; l in levelLines; l++) {
    count = split(levelLines[l], names, " ")
    for (k = 1; k <= count; k++) { level[names[k]] = l; order[++roomTotal] = names[k] }
  }
  for (file in files) {
    room = roomOf(file)
    if (!(room in level) && !(room in missing)) {
      missing[room] = 1
      printf "room %s (%s) is not in the picture of the rooms\n", room, file
      failed = 1
    }
  }
  # Extension members count only where their extension is in another room than the type, and
  # the name is declared nowhere else.
  for (name in memberRoom)
    if (valueCount[name] != 1 || !(memberExtends[name] in typeRoom) \
      || typeRoom[memberExtends[name]] == memberRoom[name]) delete memberRoom[name]
  for (name in globalRoom) if (valueCount[name] != 1) delete globalRoom[name]
  # ---- Uses. ----
  for (file in files) {
    room = roomOf(file)
    for (n = 1; n <= lineCount[file]; n++) {
      rest = lines[file, n]
      previous = ""
      while (match(rest, /[A-Za-z_][A-Za-z0-9_]*|[^A-Za-z0-9_ ]/)) {
        token = substr(rest, RSTART, RLENGTH)
        before = previous
        previous = token
        rest = substr(rest, RSTART + RLENGTH)
        if (token !~ /^[A-Za-z_]/) continue
        target = ""
        if (before != "." && (token in typeRoom) && !((token, room) in nestedType))
          target = typeRoom[token]
        else if (before != "." && (token in globalRoom) && substr(rest, 1, 1) != ":")
          target = globalRoom[token]
        else if (before == "." && (token in memberRoom)) target = memberRoom[token]
        if (target == "" || target == room) continue
        key = room SUBSEP target
        uses[key]++
        if (!((key, token) in usedNames)) {
          usedNames[key, token] = 1
          example[key] = example[key] (example[key] == "" ? "" : ", ") token " (" \
            substr(file, length(sources) + 2) ":" n ")"
        }
      }
    }
  }
  # ---- The table, then what is wrong. ----
  printf "%-13s %s\n", "room", "uses"
  for (r = 1; r <= roomTotal; r++) {
    room = order[r]
    list = ""
    for (t = 1; t <= roomTotal; t++)
      if ((room SUBSEP order[t]) in uses) list = list (list == "" ? "" : ", ") order[t]
    used[room] = list
    printf "%-13s %s\n", room, (list == "" ? "-" : list)
  }
  if (verbose) for (r = 1; r <= roomTotal; r++) for (t = 1; t <= roomTotal; t++)
    if ((order[r] SUBSEP order[t]) in uses)
      printf "  %s -> %s: %s\n", order[r], order[t], example[order[r] SUBSEP order[t]]
  for (r = 1; r <= roomTotal; r++) for (t = 1; t <= roomTotal; t++) {
    room = order[r]; target = order[t]
    key = room SUBSEP target
    if (!(key in uses) || level[target] > level[room]) continue
    printf "%s uses %s, %s it: %s\n", room, target,
      (level[target] == level[room] ? "beside" : "above"), example[key]
    failed = 1
  }
  count = split(openers, openerLines, "\n")
  for (k = 1; k <= count; k++) {
    split(openerLines[k], pair, " ")
    room = pair[1]; file = sources "/" room "/" pair[2]
    if (!(room in level)) continue
    if ((getline probe < file) <= 0) {
      printf "%s: its first file %s/%s is missing\n", room, room, pair[2]
      failed = 1
      continue
    }
    close(file)
    called = calledIn(file)
    if (called != used[room]) {
      printf "%s: its opening comment (%s/%s) says it calls %s, but it uses %s\n", room, room,
        pair[2], (called == "" ? "no other room" : called), (used[room] == "" ? "none" : used[room])
      failed = 1
    }
  }
  if (failed) {
    print "check-rooms: the rooms must depend one way, as the picture in CONTRIBUTING.md draws them" \
      " (\"Rooms and their arrows\"), and say so in their opening comments"
    exit 1
  }
  print "every room uses only rooms below it, and its opening comment names them"
}' "${files[@]}"
