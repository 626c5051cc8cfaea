#!/usr/bin/env bash
# The page in a real browser: headless Chromium opens the page served for a tiny run with
# ?selftest, whose script writes a qilv, clicks its third character and its last one (past the
# tiny model's 32 learned positions) and checks that each attention heatmap is drawn for the
# character clicked; the script then saves a screenshot. Installs Debian's chromium if
# it is absent (needs apt and root). Run from anywhere: bash tests/browser.sh
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null; then
  echo "installing chromium …"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null
fi
out=target/browser-test
rm -rf "$out" && mkdir -p "$out"
cargo build --release -q --bin train --bin serve
./target/release/train --config configs/tiny.toml --max-iters 30 --out "$out/run" >/dev/null
./target/release/serve --checkpoint "$out/run" --port 0 >"$out/serve.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null' EXIT
for _ in $(seq 100); do grep -q '^serving' "$out/serve.log" && break; sleep 0.1; done
url="$(grep -o 'http://[^ ]*/' "$out/serve.log")?selftest"
chrome=(chromium --headless --no-sandbox --disable-gpu --window-size=1280,1000 --virtual-time-budget=60000)
"${chrome[@]}" --dump-dom "$url" >"$out/dom.html" 2>"$out/chromium.log"
result="$(grep -o '<div id="selftest"[^>]*>[^<]*</div>' "$out/dom.html" || true)"
if [[ "$result" != *'>pass</div>' ]]; then
  echo "browser test failed: ${result:-no result in the page} (see $out/)" >&2
  exit 1
fi
"${chrome[@]}" --screenshot="$out/page.png" "$url" 2>>"$out/chromium.log"
echo "browser test passed; screenshot: $out/page.png"
