#!/usr/bin/env bash
# A root for qemu-user's -L that holds the ARM libraries and a fixed cache geometry:
#
#   arm_root.sh DIR     then   qemu-aarch64 -L DIR …
#
# gemm chooses how it blocks a product's inner dimension from the caches that Linux lists under
# /sys/devices/system/cpu, and qemu-user shows the emulated program the host's: the blocking, and
# with it the order of a matmul's sums on ARM, then follows the machine CI runs on (under an Intel
# Xeon's L1 of 48 KiB, 12-way, the fixed run of same_bits.sh ended 6.398175298541681 on ARM
# against 6.398175570066223 on x86-64; under an AMD Zen 4's, 32 KiB, 8-way, as on x86-64). qemu
# looks for each path under DIR first, so DIR/sys gives every run the same caches: those below
# (a Zen 4's, per core: L1 data 32 KiB 8-way, L2 1 MiB 8-way, L3 32 MiB 16-way shared by two).
set -euo pipefail
dir=$1
rm -rf "$dir"
mkdir -p "$dir"
for entry in /usr/aarch64-linux-gnu/*; do
  ln -s "$entry" "$dir/$(basename "$entry")"
done
# index level type size ways shared
caches=("0 1 Data 32K 8 own" "1 1 Instruction 32K 8 own" "2 2 Unified 1024K 8 own" "3 3 Unified 32768K 16 0-1")
for cpu in 0 1; do
  for cache in "${caches[@]}"; do
    read -r index level type size ways shared <<< "$cache"
    d="$dir/sys/devices/system/cpu/cpu$cpu/cache/index$index"
    mkdir -p "$d"
    echo "$level" > "$d/level"
    echo "$type" > "$d/type"
    echo "$size" > "$d/size"
    echo "$ways" > "$d/ways_of_associativity"
    echo 64 > "$d/coherency_line_size"
    [[ $shared == own ]] && shared=$cpu
    echo "$shared" > "$d/shared_cpu_list"
  done
done
