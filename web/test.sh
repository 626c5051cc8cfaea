#!/usr/bin/env bash
# The static page in a real browser, with no server but a plain static one: trains a tiny run,
# builds the static site from it (web/build.sh), serves it with `python3 -m http.server`, and lets
# headless Chromium run the page's own check (?selftest): a qilv with its meter set in 8 lines of
# 7 with tones, the same text as `sample` writes for the same seed, the heatmaps, the lesson's
# order table, a tiny training in the tab with two evaluations and a poem, stopped and laid over
# the shipped run's curves; and no request to any other server. A screenshot follows.
# Installs Debian's chromium if it is absent (needs apt and root). Run from anywhere:
# bash web/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/chromium.sh
out=target/web-test
rm -rf "$out" && mkdir -p "$out/chromium"
cargo build --release -q --bin train --bin sample
# A run folder named with a quote and a backslash: the build's manifest stays JSON.
run="$out/tiny \"q\" \\ x"
./target/release/train --config configs/tiny.toml --max-iters 30 --out "$run" >/dev/null 2>&1
bash web/build.sh "$run" "$out/dist"
bash web/build.sh "$run" "$out/dist" >/dev/null # a rebuild over its own earlier build
python3 -c 'import json, sys; m = json.load(open(sys.argv[1])); assert m["run"] == sys.argv[2], m' \
  "$out/dist/manifest.json" "$(basename "$run")"
# A run on titled poems: the build lists its corpus's poets as the server counts them.
head -400 data/titled.txt >"$out/titled.txt"
./target/release/train --config configs/tiny.toml --corpus "$out/titled.txt" --max-iters 20 --out "$out/titled" >/dev/null 2>&1
bash web/build.sh "$out/titled" "$out/titled-dist" >/dev/null
python3 - "$out/titled.txt" "$out/titled-dist/run/poets.tsv" <<'PY'
import collections, sys
counts = collections.Counter(l[1:].split("】")[0].split("·")[0] for l in open(sys.argv[1], encoding="utf-8") if l.startswith("【"))
listed = {poet: int(n) for n, poet in (l.rstrip("\n").split("\t") for l in open(sys.argv[2], encoding="utf-8"))}
assert listed == dict(counts), (listed, counts)
PY
seed=3
expected="$(./target/release/sample --checkpoint "$run" --form qilv --meter --seed $seed --num-samples 1 --json \
  | python3 -c 'import json, sys, urllib.parse; print(urllib.parse.quote(json.loads(sys.stdin.readline())["text"]))')"

PYTHONUNBUFFERED=1 python3 -m http.server 0 --bind 127.0.0.1 --directory "$out/dist" >"$out/http.log" 2>&1 &
server=$!
chromium --headless --no-sandbox --disable-gpu --window-size=1280,1000 --remote-debugging-port=0 \
  --user-data-dir="$out/chromium" about:blank >"$out/chromium.log" 2>&1 &
browser=$!
trap 'kill $server $browser 2>/dev/null' EXIT
for _ in $(seq 300); do
  grep -q 'port [0-9]' "$out/http.log" && [[ -s "$out/chromium/DevToolsActivePort" ]] && break
  sleep 0.1
done
port="$(grep -o 'port [0-9]*' "$out/http.log" | head -1 | cut -d' ' -f2)"
[[ -n "$port" && -s "$out/chromium/DevToolsActivePort" ]] || { echo "the static server or Chromium did not start (see $out/)" >&2; exit 1; }
devtools="$(head -1 "$out/chromium/DevToolsActivePort")"
url="http://127.0.0.1:$port/?selftest&seed=$seed&expect=$expected"
if ! verdict="$(python3 web/selftest.py "$devtools" "$url" --timeout 300 --screenshot "$out/static.png")"; then
  echo "static page test failed: $verdict (see $out/)" >&2
  exit 1
fi
echo "static page test passed ($(du -sh "$out/dist" | cut -f1) served); screenshot: $out/static.png"
