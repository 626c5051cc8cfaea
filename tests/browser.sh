#!/usr/bin/env bash
# The page in a real browser: headless Chromium opens the page served for a tiny run with
# ?selftest, whose script writes a qilv and checks it is set in 8 lines with tone marks, clicks
# its third character and its last one (past the tiny model's 32 learned positions) and checks
# that each attention heatmap is drawn for the character clicked; then trains the tiny config
# from the page, sees two evaluations and a sample arrive, stops it, finds it in the runs list
# and lays its curves over the first run's. A tiny run on titled poems is asked for a wujue by a
# poet and a title: the header is set apart from the poem's four lines; a tiny run on the Song ci
# writes a 浣溪沙 with its meter, set as its tune with tones and rhymes. Screenshots of the runs
# view and of the poem follow.
# Installs Debian's chromium if it is absent (needs apt and root). Run from anywhere:
# bash tests/browser.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/chromium.sh
out=target/browser-test
rm -rf "$out" && mkdir -p "$out"
cargo build --release -q --bin train --bin serve
head -n 400 data/titled.txt >"$out/titled.txt"
./target/release/train --config configs/tiny.toml --corpus "$out/titled.txt" --max-iters 30 --out "$out/runs/titled" >/dev/null 2>&1
head -n 2000 data/ci.txt >"$out/ci.txt"
./target/release/train --config configs/tiny.toml --corpus "$out/ci.txt" --corpus-kind lines --max-iters 30 --out "$out/runs/ci" >/dev/null 2>&1
./target/release/train --config configs/tiny.toml --max-iters 30 --out "$out/runs/first" >/dev/null 2>&1
./target/release/serve --runs "$out/runs" --port 0 >"$out/serve.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null' EXIT
for _ in $(seq 100); do grep -q '^serving' "$out/serve.log" && break; sleep 0.1; done
base="$(grep -o 'http://[^ ]*/' "$out/serve.log")"
url="${base}?selftest"
chrome=(chromium --headless --no-sandbox --disable-gpu --window-size=1280,1000 --virtual-time-budget=60000)
"${chrome[@]}" --dump-dom "$url" >"$out/dom.html" 2>"$out/chromium.log"
result="$(grep -o '<div id="selftest"[^>]*>[^<]*</div>' "$out/dom.html" || true)"
if [[ "$result" != *'>pass</div>' ]]; then
  echo "browser test failed: ${result:-no result in the page} (see $out/)" >&2
  exit 1
fi
"${chrome[@]}" --screenshot="$out/runs.png" "${base}?view=runs&compare=first,from-page" 2>>"$out/chromium.log"
"${chrome[@]}" --screenshot="$out/poem.png" "${base}?form=qilv&seed=1&write" 2>>"$out/chromium.log"
echo "browser test passed; screenshots: $out/runs.png, $out/poem.png"
