#!/usr/bin/env bash
# One short fixed run, the same to every digit wherever it runs: configs/tiny.toml for 200 steps
# (seed 3), stopped after step 100 and resumed, then two poems sampled. Its figures (the
# whole-split loss, the last training loss) and its poems must be those of x86-64 Linux on ARM
# Linux (qemu-user) and on Windows (wine), where the matmuls take other kernels (NEON), the fused
# loops the portable path, and the files, the lock and the resume go through another system.
#
#   same_bits.sh NAME BIN_DIR EXE [RUNNER...]   e.g. same_bits.sh arm target/aarch64-unknown-linux-gnu/release "" qemu-aarch64 -L /usr/aarch64-linux-gnu
#
# writes target/same_bits/NAME.txt and compares it with target/same_bits/x86-64.txt where that
# exists (the native run, made first).
set -euo pipefail
cd "$(dirname "$0")/.."
name=$1 bin=$2 exe=$3
shift 3
out=target/same_bits
rm -rf "$out/$name"
mkdir -p "$out/$name"
"$@" "$bin/train$exe" --config configs/tiny.toml --max-iters 200 --seed 3 --out "$out/$name/run" \
  --stop-at 100 > /dev/null 2> "$out/$name/log.txt"
"$@" "$bin/train$exe" --resume "$out/$name/run" --json > "$out/$name/summary.json" 2>> "$out/$name/log.txt"
{
  grep -o '"val_loss_whole":[^,]*' "$out/$name/summary.json"
  grep -o '"train_loss":[^,]*' "$out/$name/summary.json"
  "$@" "$bin/sample$exe" --checkpoint "$out/$name/run" --num-samples 2 --seed 5 2>> "$out/$name/log.txt" | tr -d '\r'
} > "$out/$name.txt"
echo "$name: $(head -1 "$out/$name.txt")"
if [[ "$name" != x86-64 ]]; then
  if ! diff "$out/x86-64.txt" "$out/$name.txt"; then
    echo "$name differs from x86-64 Linux (above): the same run must give the same bits" >&2
    exit 1
  fi
fi
