#!/usr/bin/env bash
# The page as a static site that runs in the browser alone: the wasm module (web/, this
# project's decoder and training step built for wasm32-unknown-unknown), the page (the served
# page, src/serve/page.html, with its wasm back end), web/worker.js, the run's weights, tokenizer,
# config and curves, and the tiny config and corpus for training in the tab. Any static file
# server serves the result: `cd web/dist && python3 -m http.server`.
#   bash web/build.sh checkpoints/<run> [output folder, web/dist by default]
# Installs what it needs if it is absent: the wasm32-unknown-unknown target (rustup) and
# wasm-bindgen-cli at the version the crate uses (cargo install, once).
set -euo pipefail
usage="usage: bash web/build.sh checkpoints/<run> [out]: a run directory that train wrote"
[[ $# -ge 1 && $# -le 2 ]] || { echo "$usage" >&2; exit 2; }
[[ -d "$1" ]] || { echo "web/build.sh: no run directory at $1 ($usage)" >&2; exit 1; }
run="$(cd "$1" && pwd)"
for file in config.toml tokenizer.json model.safetensors; do
  [[ -f "$run/$file" ]] || { echo "web/build.sh: $1 has no $file: give a run that has evaluated at least once" >&2; exit 1; }
done
out="${2:-web/dist}"
mkdir -p "$out" && out="$(cd "$out" && pwd)"
cd "$(dirname "$0")/.."

rustup target add wasm32-unknown-unknown >/dev/null
version="$(grep -A1 '^name = "wasm-bindgen"$' Cargo.lock | sed -n 's/^version = "\(.*\)"$/\1/p')"
if [[ "$(wasm-bindgen --version 2>/dev/null)" != "wasm-bindgen $version" ]]; then
  echo "installing wasm-bindgen-cli $version (the version the crate uses) …"
  cargo install -q wasm-bindgen-cli --version "$version"
fi
cargo build -q --profile web --target wasm32-unknown-unknown -p shige-web

find "$out" -mindepth 1 -delete
mkdir -p "$out/run" "$out/configs" "$out/data"
wasm-bindgen --target web --no-typescript --remove-name-section --remove-producers-section --out-dir "$out" target/wasm32-unknown-unknown/web/shige_web.wasm
sed 's|<meta name="shige-backend" content="server">|<meta name="shige-backend" content="wasm">|' src/serve/page.html >"$out/index.html"
grep -q 'content="wasm"' "$out/index.html" || { echo "web/build.sh: the page has no back-end marker to set" >&2; exit 1; }
cp web/worker.js "$out/"
cp "$run/config.toml" "$run/tokenizer.json" "$run/model.safetensors" "$out/run/"
for file in metrics.csv summary.json; do
  if [[ -f "$run/$file" ]]; then cp "$run/$file" "$out/run/"; fi
done
cp configs/tiny.toml "$out/configs/"
cp data/tiny.txt "$out/data/"
name="$(basename "$run")"
printf '{"run": "%s", "configs": {"tiny": "configs/tiny.toml"}, "corpus": "data/tiny.txt"}\n' "$name" >"$out/manifest.json"
echo "wrote $out ($(du -sh "$out" | cut -f1), of which the module $(du -h "$out/shige_web_bg.wasm" | cut -f1) and the weights $(du -h "$out/run/model.safetensors" | cut -f1)); serve it with: cd $out && python3 -m http.server"
