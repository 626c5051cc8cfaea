#!/usr/bin/env bash
# The ci figures of one run trained on the Song ci (docs/experiments.md, section 15; issue #58): 100
# free samples, and for each of the 10 most common tunes whose tones the 词谱 learned
# (data/cipu_tones.tsv) 20 samples with --tune and 20 with --tune --meter (temperature 0.8, seed 7 or $SEED),
# scored by their tune's pattern, tones and rhymes, with the run's likelihood; the held-out real ci
# beside them; and the meter's cost (mean NLL per character of the --meter samples against the
# --tune samples of the same tunes, both under the run's model, the tune's header given). Then, by
# bench/ci_segments.py's reading of the real ci (each tune's rhyme segments learned from data/ci.txt,
# apart from the 词谱): the share of each set that keeps its tune's form and rhymes in every
# segment, with 20 more --tune --meter samples of each of the four tunes that change rhyme (换韵)
# and the real ci of those tunes beside them (issue #72).
# Usage: [SEED=8] bash bench/ci_eval.sh checkpoints/<ci run> [figures.json]   (after `cargo build --release`)
set -euo pipefail
[[ $# -ge 1 && $# -le 2 ]] || { echo "error: usage: bash bench/ci_eval.sh checkpoints/<ci run> [figures.json]" >&2; exit 2; }
run=$1
seed=${SEED:-7}
[[ "$seed" =~ ^[0-9]+$ ]] || { echo "error: SEED=$seed: give a whole number, e.g. SEED=8" >&2; exit 2; }
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
  "$bin/sample" --checkpoint "$run" --seed "$seed" --temperature 0.8 --max-new-tokens 300 --json "$@" \
    >"$tmp/$name.jsonl" 2>"$tmp/$name.err" || { echo "error: $0: sample $*: $(tail -1 "$tmp/$name.err")" >&2; exit 1; }
  python3 -c 'import json,sys; [print(json.loads(l)["text"]) for l in sys.stdin]' \
    <"$tmp/$name.jsonl" >>"$tmp/$name.txt"
}

draw free --num-samples 100
tunes=$(awk -F"\t" '!/^#/ && $2 == 1' "$root/data/cipu_tones.tsv" | head -10 | cut -f1)
for tune in $tunes; do
  draw tune --tune "$tune" --num-samples 20
  draw meter --tune "$tune" --meter --num-samples 20
done
changing="菩萨蛮 清平乐 虞美人 减字木兰花"
for tune in $changing; do
  draw changing --tune "$tune" --meter --num-samples 20
done
for name in free tune meter; do
  "$bin/score" "$tmp/$name.txt" --corpus "$root/data/ci.txt" --checkpoint "$run" --json >"$tmp/$name.score.json"
done
"$bin/score" --val --corpus "$root/data/ci.txt" --checkpoint "$run" --json >"$tmp/real.score.json"

python3 - "$tmp" "$run" "${2:-}" "$root" "$tunes" "$changing" "$seed" <<'EOF'
import json, os, sys
tmp, run, out, root, tunes, changing, seed = sys.argv[1:8]
sys.path.insert(0, os.path.join(root, "bench"))
import ci_segments
figures = {"settings": {"free_samples": 100, "tunes": 10, "samples_per_tune": 20, "temperature": 0.8, "seed": int(seed)}}
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

reading = ci_segments.Reading()
real = open(os.path.join(root, "data", "ci.txt"), encoding="utf-8").read().splitlines()
of_tunes = lambda lines, names: [l for l in lines if (ci_segments.split_ci(l) or ("",))[0] in names.split()]
sets = [("real ci of the 10 tunes (all of data/ci.txt)", "real_10_tunes", of_tunes(real, tunes)),
        ("free samples", "free", None), ("`--tune` (10 tunes × 20)", "tune", None),
        ("`--tune --meter` (10 tunes × 20)", "meter", None),
        ("real ci of the 4 tunes that change rhyme", "real_changing", of_tunes(real, changing)),
        ("`--tune --meter`, the 4 tunes that change rhyme (× 20)", "changing", None)]
print("\nBy bench/ci_segments.py's reading (segments learned from the real ci):\n")
print("| ci | n | its tune's commonest form | rhymes in every segment |\n|---|---|---|---|")
figures["segments"] = {}
for label, name, lines in sets:
    lines = lines if lines is not None else open(f"{tmp}/{name}.txt", encoding="utf-8").read().splitlines()
    row = ci_segments.summary(reading, lines)
    figures["segments"][name] = row
    print(f"| {label} | {row['ci']} | {row['form_percent']} % | {row['every_segment_percent']} % |")
if out:
    figures["written_by"] = "bench/ci_eval.sh"
    json.dump(figures, open(out, "w"), indent=1)
EOF
