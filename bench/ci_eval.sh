#!/usr/bin/env bash
# The ci figures of one run trained on the Song ci (docs/experiments.md, section 15; issue #58): 100
# free samples, and for each of the 10 most common tunes whose tones the 词谱 learned
# (data/cipu_tones.tsv) 20 samples with --tune and 20 with --tune --meter (temperature 0.8, seed 7),
# scored by their tune's pattern, tones and rhymes, with the run's likelihood; the held-out real ci
# beside them; and the meter's cost (mean NLL per character of the --meter samples against the
# --tune samples of the same tunes, both under the run's model, the tune's header given).
# Usage: bash bench/ci_eval.sh checkpoints/<ci run> [figures.json]   (after `cargo build --release`)
set -euo pipefail
[[ $# -ge 1 && $# -le 2 ]] || { echo "error: usage: bash bench/ci_eval.sh checkpoints/<ci run> [figures.json]" >&2; exit 2; }
run=$1
root=$(dirname "$0")/..
bin=$root/target/release
out=${2:-}
# The figures file is written anew only where it is absent or one of this script's.
if [[ -n "$out" && -e "$out" ]] && ! grep -qF '"written_by": "bench/ci_eval.sh"' "$out"; then
  echo "$0: $out exists and was not written by this script: it is left as it is; give another figures file" >&2
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

draw() { # name, extra sample flags...
  local name=$1
  shift
  "$bin/sample" --checkpoint "$run" --seed 7 --temperature 0.8 --max-new-tokens 300 --json "$@" \
    >"$tmp/$name.jsonl" 2>"$tmp/$name.err" || { echo "error: $0: sample $*: $(tail -1 "$tmp/$name.err")" >&2; exit 1; }
  python3 -c 'import json,sys; [print(json.loads(l)["text"]) for l in sys.stdin]' \
    <"$tmp/$name.jsonl" >>"$tmp/$name.txt"
}

draw free --num-samples 100
tunes=$(grep -v '^#' "$root/data/cipu_tones.tsv" | head -10 | cut -f1)
for tune in $tunes; do
  draw tune --tune "$tune" --num-samples 20
  draw meter --tune "$tune" --meter --num-samples 20
done
for name in free tune meter; do
  "$bin/score" "$tmp/$name.txt" --corpus "$root/data/ci.txt" --checkpoint "$run" --json >"$tmp/$name.score.json"
done
"$bin/score" --val --corpus "$root/data/ci.txt" --checkpoint "$run" --json >"$tmp/real.score.json"

python3 - "$tmp" "$run" "${2:-}" <<'EOF'
import json, sys
tmp, run, out = sys.argv[1], sys.argv[2], sys.argv[3]
figures = {"settings": {"free_samples": 100, "tunes": 10, "samples_per_tune": 20, "temperature": 0.8, "seed": 7}}
print(f"run {run}\n")
print("| ci | n | tune's pattern | with learned tones | mean tone fit | every rhyme position rhymes | repeated rhyme | NLL per char |")
print("|---|---|---|---|---|---|---|---|")
for label, name in [("real ci (val split)", "real"), ("free samples", "free"),
                    ("`--tune` (10 tunes × 20)", "tune"), ("`--tune --meter` (10 tunes × 20)", "meter")]:
    d = json.load(open(f"{tmp}/{name}.score.json"))
    s = d["ci_summary"]
    pct = lambda a, b: round(100 * a / max(b, 1))
    row = {"ci": s["ci"], "pattern_percent": pct(s["fitting"], s["ci"]), "metered": s["metered"],
           "mean_tone_fit_percent": round(100 * s["mean_tone_fit"], 1),
           "rhyming_percent": pct(s["rhyming"], s["with_rhymes"]),
           "repeated_rhyme_percent": pct(s["repeated_rhyme"], s["metered"]),
           "nll_per_char": round(d["ci_mean_nll"], 3)}
    figures[name] = row
    print(f"| {label} | {row['ci']} | {row['pattern_percent']} % | {row['metered']} | "
          f"{row['mean_tone_fit_percent']} % | {row['rhyming_percent']} % | "
          f"{row['repeated_rhyme_percent']} % | {row['nll_per_char']:.3f} |")
cost = figures["meter"]["nll_per_char"] - figures["tune"]["nll_per_char"]
figures["meter"]["meter_cost"] = round(cost, 3)
print(f"\nmeter cost: {cost:+.3f} nats per character")
if out:
    figures["written_by"] = "bench/ci_eval.sh"
    json.dump(figures, open(out, "w"), indent=1)
EOF
