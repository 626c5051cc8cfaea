#!/usr/bin/env bash
# Ctrl-C on Windows saves the run as SIGINT does on Linux: wine turns a SIGINT sent to a console
# program into the console's Ctrl-C event, which train.exe's handler (src/train/interrupt.rs)
# takes. Trains configs/tiny.toml far past what it will reach, sends SIGINT once the first
# evaluation is written, and checks that it saved its checkpoint, said so and exited with 130 as
# on Linux (resuming on Windows is checked by .ci/same_bits.sh).
#
#   windows_ctrl_c.sh BIN_DIR   (the folder of train.exe; run by .ci/run under wine)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$1 out=target/windows_ctrl_c
rm -rf "$out"
mkdir -p "$out"
wine "$bin/train.exe" --config configs/tiny.toml --max-iters 100000 --out "$out/run" \
  > /dev/null 2> "$out/log.txt" &
pid=$!
for _ in $(seq 240); do
  [[ -s "$out/run/metrics.csv" ]] && break
  sleep 0.5
done
kill -INT "$pid"
status=0
wait "$pid" || status=$?
if ! grep -q "interrupted at step" "$out/log.txt" || [[ ! -f "$out/run/train_state.safetensors" ]] \
  || [[ $status != 130 ]]; then
  echo "Ctrl-C did not save the Windows run (exit $status):" >&2
  tail -5 "$out/log.txt" >&2
  exit 1
fi
echo "windows: $(grep "interrupted at step" "$out/log.txt")"
