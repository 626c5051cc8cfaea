#!/usr/bin/env bash
# The outside check (#80): nanoGPT's GPT modules in PyTorch (bench/nanogpt_check.py) load a run's
# weights unchanged and must give the likelihoods `score` gives and `sample`'s greedy text. The
# run: configs/tiny.toml (learned positions, no verse inputs: nanoGPT's model), 300 steps.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --root-user-action=ignore torch safetensors tokenizers numpy
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cargo run --quiet --release --bin train -- --config configs/tiny.toml --max-iters 300 --out "$dir/run" >/dev/null
# Poems that fit the block of 32: the 五绝 of the tiny corpus (24 characters, and two newlines).
python3 -c '
import sys
for line in open("data/tiny.txt", encoding="utf-8"):
    if len(line.strip()) == 24: print(line.strip())' > "$dir/poems.txt"
cargo run --quiet --release --bin score -- --checkpoint "$dir/run" --corpus data/tiny.txt --json "$dir/poems.txt" > "$dir/score.json"
cargo run --quiet --release --bin sample -- --checkpoint "$dir/run" --prompt 白日 --temperature 0 \
  --num-samples 1 --max-new-tokens 29 --no-stop-at-newline --json > "$dir/sample.json"
python3 bench/nanogpt_check.py "$dir/run" --score "$dir/score.json" --sample "$dir/sample.json"
