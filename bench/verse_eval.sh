#!/usr/bin/env bash
# The verse figures of issue #46 for one run: 100 free samples at temperature 0.8 (seed 7) scored
# as regulated verse, and the meter's cost (mean NLL per character under the run's model of 100
# `--form F --meter` samples against 100 `--form F` samples) for wulv and qilv.
# Usage: bash bench/verse_eval.sh checkpoints/<run>   (after `cargo build --release`)
set -euo pipefail
run=${1:?usage: bash bench/verse_eval.sh checkpoints/<run>}
bin=$(dirname "$0")/../target/release
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

draw() { # name, extra sample flags...
  local name=$1
  shift
  "$bin/sample" --checkpoint "$run" --num-samples 100 --seed 7 --temperature 0.8 --json "$@" \
    >"$tmp/$name.jsonl" 2>/dev/null
  python3 -c 'import json,sys; [print(json.loads(l)["text"]) for l in sys.stdin]' \
    <"$tmp/$name.jsonl" >"$tmp/$name.txt"
  "$bin/score" "$tmp/$name.txt" --checkpoint "$run" --json >"$tmp/$name.score.json"
}

draw free
for form in wulv qilv; do
  draw "$form"-free --form "$form"
  draw "$form"-meter --form "$form" --meter
done

python3 - "$tmp" "$run" <<'EOF'
import json, sys
tmp, run = sys.argv[1], sys.argv[2]
def load(name):
    return json.load(open(f"{tmp}/{name}.score.json"))
free = load("free")
s = free["summary"]
well = [json.loads(l)["well_formed"] for l in open(f"{tmp}/free.jsonl")]
print(f"run {run}")
print(f"free: well-formed {sum(well)}/{len(well)}, regular {s['regular']}, "
      f"rhyme {s['rhyming']}/{s['regular']} = {100 * s['rhyming'] / max(s['regular'], 1):.0f} %, "
      f"mean tone fit {100 * s['mean_tone_fit']:.1f} %, fit a template {s['fitting_a_template']}, "
      f"copied run median/max {s['copied_run_median']}/{s['copied_run_max']}, NLL {free['mean_nll']:.3f}")
for form in ["wulv", "qilv"]:
    f, m = load(f"{form}-free"), load(f"{form}-meter")
    rhyme = lambda d: f"{d['summary']['rhyming']}/{d['summary']['regular']}"
    print(f"{form}: rhyme free {rhyme(f)}, meter {rhyme(m)}; NLL per char free {f['mean_nll']:.3f}, "
          f"meter {m['mean_nll']:.3f}: meter cost {m['mean_nll'] - f['mean_nll']:.3f} nats")
EOF
