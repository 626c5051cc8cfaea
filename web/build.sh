#!/usr/bin/env bash
# The page as a static site that runs in the browser alone: the wasm module (web/, this
# project's decoder and training step built for wasm32-unknown-unknown), the page (the served
# page, src/serve/page.html, with its wasm back end), web/worker.js, the run's weights, tokenizer,
# config, curves and poets, and the tiny config and corpus for training in the tab. Any static
# file server serves the result: `cd web/dist && python3 -m http.server`.
#   bash web/build.sh checkpoints/<run> [output folder, web/dist by default]
# The output folder must be new, empty, or an earlier build of this script holding nothing else
# (its manifest.json says so); anything else is refused before anything is built or removed. A
# rebuild replaces the files of BUILT alone.
# Installs what it needs if it is absent: the wasm32-unknown-unknown target (rustup) and
# wasm-bindgen-cli at the version the crate uses (cargo install, once).
set -euo pipefail
usage="usage: bash web/build.sh checkpoints/<run> [out]: a run directory that train wrote, and a new or empty folder (or an earlier build)"
fail() { echo "error: web/build.sh: $*" >&2; exit 1; }
[[ $# -ge 1 && $# -le 2 ]] || { echo "error: web/build.sh: $usage" >&2; exit 2; }
# A path as the commands below take it: no control character (it could not stand in the
# manifest, nor be shown), no trailing slash, and a relative one after ./ (so that a name such
# as - or -l is a folder, not an option).
as_path() {
  local p="$1"
  [[ "$p" != *[[:cntrl:]]* ]] || fail "the path $(printf '%q' "$p") holds a control character: rename it"
  while [[ "$p" == */ && "$p" != / ]]; do p="${p%/}"; done
  [[ "$p" == /* ]] || p="./$p"
  printf '%s' "$p"
}
# Whether $1 is one of the other arguments.
one_of() {
  local x="$1" y
  shift
  for y; do [[ "$x" == "$y" ]] && return 0; done
  return 1
}
given="$1"
runarg="$(as_path "$1")"
[[ -d "$runarg" ]] || fail "no run directory at $given ($usage)"
run="$(cd "$runarg" && pwd -P)"
for file in config.toml tokenizer.json model.safetensors; do
  [[ -f "$run/$file" ]] || fail "$given has no $file: give a run that has evaluated at least once"
done
out="$(as_path "${2:-web/dist}")"

# Every file this script writes in the output folder, and its folders.
BUILT=(index.html worker.js shige_web.js shige_web_bg.wasm manifest.json
  run/config.toml run/tokenizer.json run/model.safetensors run/metrics.csv run/summary.json run/poets.tsv
  configs/tiny.toml data/tiny.txt)
BUILT_DIRS=(run configs data)
# How an earlier build's manifest.json begins.
MARK='{"builder": "shige web/build.sh", "run": '

# Refuses an output folder that holds anything this script did not write (a symbolic link to a
# folder is read through: what it holds would be written over).
check_out() {
  [[ -e "$out" || -L "$out" ]] || return 0
  [[ -d "$out" ]] || fail "$out is not a folder: give a new or empty folder"
  [[ -n "$(find -H "$out" -mindepth 1 -maxdepth 1 -print -quit)" ]] || return 0
  local first=""
  [[ -f "$out/manifest.json" && ! -L "$out/manifest.json" ]] && IFS= read -r first <"$out/manifest.json" || true
  [[ "$first" == "$MARK"* ]] \
    || fail "$out holds files and is no earlier build of this script (no manifest.json of one): give a new or empty folder; nothing was removed"
  local entry rel
  while IFS= read -r -d '' entry; do
    rel="${entry#"$out"/}"
    if [[ -d "$entry" && ! -L "$entry" ]] && one_of "$rel" "${BUILT_DIRS[@]}"; then continue; fi
    if [[ -f "$entry" && ! -L "$entry" ]] && one_of "$rel" "${BUILT[@]}"; then continue; fi
    fail "$out is an earlier build, but $(printf '%q' "$rel") is not one of its files: move it away or give another folder; nothing was removed"
  done < <(find -H "$out" -mindepth 1 -print0)
}
check_out
# The output folder as an absolute path (through its nearest folder that exists where it does not
# exist yet): neither inside the run nor holding it.
# The missing part of the path is taken as written, so it may not hold "." or "..".
absolute() {
  local p="$1" rest="" part base
  while [[ ! -d "$p" ]]; do
    [[ ! -e "$p" && ! -L "$p" ]] || fail "$(printf '%q' "$p") is not a folder: give an output folder whose parents are folders"
    part="$(basename "$p")"
    [[ "$part" != "." && "$part" != ".." ]] || fail "the output folder $(printf '%q' "$1") goes through . or .. where no folder exists yet: write it without them"
    rest="/$part$rest"
    p="$(dirname "$p")"
  done
  base="$(cd "$p" && pwd -P)"
  printf '%s%s' "${base%/}" "$rest"
}
out="$(absolute "$out")"
[[ "$run/" != "$out/"* ]] || fail "the run $given is inside the output folder $out: give another folder"
[[ "$out/" != "$run/"* ]] || fail "the output folder $out is inside the run $given: give a folder outside it"
cd "$(dirname "$0")/.."

# A JSON string of $1, or a refusal for a control character no file name should hold.
json_string() {
  local s="$1"
  [[ "$s" != *[[:cntrl:]]* ]] || fail "the run's folder name holds a control character: rename it"
  s="${s//\\/\\\\}"
  printf '"%s"' "${s//\"/\\\"}"
}
name="$(json_string "$(basename "$run")")"

rustup target add wasm32-unknown-unknown >/dev/null
version="$(grep -A1 '^name = "wasm-bindgen"$' Cargo.lock | sed -n 's/^version = "\(.*\)"$/\1/p')"
if [[ "$(wasm-bindgen --version 2>/dev/null)" != "wasm-bindgen $version" ]]; then
  echo "installing wasm-bindgen-cli $version (the version the crate uses) …"
  cargo install -q wasm-bindgen-cli --version "$version"
fi
cargo build -q --profile web --target wasm32-unknown-unknown -p shige-web

check_out # again: nothing else may have come meanwhile
mkdir -p "$out"
for file in "${BUILT[@]}"; do rm -f "$out/$file"; done
mkdir -p "$out/run" "$out/configs" "$out/data"
wasm-bindgen --target web --no-typescript --remove-name-section --remove-producers-section --out-dir "$out" target/wasm32-unknown-unknown/web/shige_web.wasm
sed 's|<meta name="shige-backend" content="server">|<meta name="shige-backend" content="wasm">|' src/serve/page.html >"$out/index.html"
grep -q 'content="wasm"' "$out/index.html" || fail "the page has no back-end marker to set"
cp web/worker.js "$out/"
cp "$run/config.toml" "$run/tokenizer.json" "$run/model.safetensors" "$out/run/"
for file in metrics.csv summary.json; do
  if [[ -f "$run/$file" ]]; then cp "$run/$file" "$out/run/"; fi
done
# The poets of the run's corpus (titled poems `【poet·title】…`) with their poems' counts, for the
# page to answer an unknown poet with the nearest names as the server does; none where the corpus
# is not at hand. Read byte by byte (LC_ALL=C): in UTF-8 the marks' bytes stand for the marks alone.
corpus="$(sed -n '/^\[data\]/,/^\[/s/^corpus = "\(.*\)"$/\1/p' "$run/config.toml")"
if [[ -f "$corpus" ]]; then
  LC_ALL=C awk -v opening="【" -v sep="·" -v closing="】" '
    index($0, opening) == 1 {
      rest = substr($0, length(opening) + 1); end = index(rest, closing)
      inside = substr(rest, 1, end - 1); at = index(inside, sep)
      if (end > 1 && at > 0) count[substr(inside, 1, at - 1)]++
    }
    END { for (poet in count) print count[poet] "\t" poet }' "$corpus" >"$out/run/poets.tsv"
  [[ -s "$out/run/poets.tsv" ]] || rm -f "$out/run/poets.tsv"
fi
# The page reads a config whole: tiny.toml names its base (configs/default.toml), so it is written
# out with its base's keys.
cargo run -q --release --bin train -- --config configs/tiny.toml --print-config >"$out/configs/tiny.toml"
cp data/tiny.txt "$out/data/"
printf '%s%s, "configs": {"tiny": "configs/tiny.toml"}, "corpus": "data/tiny.txt"}\n' "$MARK" "$name" >"$out/manifest.json"
echo "wrote $out ($(du -sh "$out" | cut -f1), of which the module $(du -h "$out/shige_web_bg.wasm" | cut -f1) and the weights $(du -h "$out/run/model.safetensors" | cut -f1)); serve it with: cd $(printf '%q' "$out") && python3 -m http.server"
