#!/usr/bin/env bash
# The regulated-verse figures of one run (docs/experiments.md, section 7; issue #46): 100 samples
# per row at temperature 0.8, seed 7 or $SEED (free, and each form without and with --meter), scored as
# regulated verse with the run's likelihood; then the real held-out poems' row, the free samples'
# well-formed rate, and the meter's cost per form (mean NLL per character of the --meter samples
# against the form's free samples, both under the run's model).
# Usage: [SEED=8] bash bench/verse_eval.sh checkpoints/<run> [figures.json]   (after `cargo build --release`;
# the figures also go to figures.json if given, for bench/record.py --extra)
set -euo pipefail
[[ $# -ge 1 && $# -le 2 ]] || { echo "error: usage: bash bench/verse_eval.sh checkpoints/<run> [figures.json]" >&2; exit 2; }
run=$1
seed=${SEED:-7}
[[ "$seed" =~ ^[0-9]+$ ]] || { echo "error: SEED=$seed: give a whole number, e.g. SEED=8" >&2; exit 2; }
bin=$(dirname "$0")/../target/release
out=${2:-}
# The figures file is written anew only where it is absent or one of this script's.
if [[ -n "$out" && -e "$out" ]] && ! grep -qF '"written_by": "bench/verse_eval.sh"' "$out"; then
  echo "$0: $out exists and was not written by this script: it is left as it is; give another figures file" >&2
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

draw() { # name, extra sample flags...
  local name=$1
  shift
  "$bin/sample" --checkpoint "$run" --num-samples 100 --seed "$seed" --temperature 0.8 --json "$@" \
    >"$tmp/$name.jsonl" 2>"$tmp/$name.err" || { echo "error: $0: sample $*: $(tail -1 "$tmp/$name.err")" >&2; exit 1; }
  python3 -c 'import json,sys; [print(json.loads(l)["text"]) for l in sys.stdin]' \
    <"$tmp/$name.jsonl" >"$tmp/$name.txt"
  "$bin/score" "$tmp/$name.txt" --checkpoint "$run" --json >"$tmp/$name.score.json"
}

draw free
for form in wujue qijue wulv qilv; do
  draw "$form" --form "$form"
  draw "$form-meter" --form "$form" --meter
done
# The run's own corpus (data/titled.txt for a titled run: its poems weighed after their headers).
corpus=$(python3 -c 'import sys, tomllib; c = tomllib.load(open(sys.argv[1], "rb")); print(c.get("data", {}).get("corpus", "data/poems.txt"))' "$run/config.toml")
"$bin/score" --val --corpus "$corpus" --checkpoint "$run" --json >"$tmp/real.score.json"

python3 - "$tmp" "$run" "${2:-}" "$seed" <<'EOF'
import json, sys
tmp, run, out, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
figures = {"settings": {"samples_per_row": 100, "temperature": 0.8, "seed": seed}}
load = lambda name: json.load(open(f"{tmp}/{name}.score.json"))
pct = lambda a, b: f"{100 * a / max(b, 1):.0f} %"
print(f"run {run}\n")
print("| poems | n | regular form | fit a template | mean tone fit | rhyme | repeated rhyme | rhyme, distinct | longest copied run (median / max) | lines verbatim | NLL per char |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
rows = [("real poems (val split)", "real"), ("unconstrained", "free")]
for form in ["wujue", "qijue", "wulv", "qilv"]:
    rows += [(f"`--form {form}`", form), (f"`--form {form} --meter`", f"{form}-meter")]
for label, name in rows:
    d = load(name)
    s = d["summary"]
    n, reg = s["poems"], s["regular"]
    print(f"| {label} | {n} | {pct(reg, n)} | {pct(s['fitting_a_template'], reg)} | "
          f"{100 * s['mean_tone_fit']:.1f} % | {pct(s['rhyming'], reg)} | "
          f"{pct(s['repeated_rhyme'], reg)} | {pct(s['rhyming_distinct'], reg)} | "
          f"{s['copied_run_median']} / {s['copied_run_max']} | {100 * s['lines_verbatim']:.1f} % | "
          f"{d['mean_nll']:.3f} |")
    figures[name] = {"poems": n, "regular_percent": round(100 * reg / max(n, 1)),
                     "template_percent": round(100 * s["fitting_a_template"] / max(reg, 1)),
                     "mean_tone_fit_percent": round(100 * s["mean_tone_fit"], 1),
                     "rhyme_percent": round(100 * s["rhyming"] / max(reg, 1)),
                     "repeated_rhyme_percent": round(100 * s["repeated_rhyme"] / max(reg, 1)),
                     "rhyme_distinct_percent": round(100 * s["rhyming_distinct"] / max(reg, 1)),
                     "nll_per_char": round(d["mean_nll"], 3)}
well = [json.loads(l)["well_formed"] for l in open(f"{tmp}/free.jsonl")]
print(f"\nfree samples well-formed: {sum(well)} of {len(well)}")
for form in ["wujue", "qijue", "wulv", "qilv"]:
    cost = load(f"{form}-meter")["mean_nll"] - load(form)["mean_nll"]
    print(f"meter cost, {form}: {cost:+.3f} nats per character")
    figures[f"{form}-meter"]["meter_cost"] = round(cost, 3)
figures["free"]["well_formed"] = sum(well)
if out:
    figures["written_by"] = "bench/verse_eval.sh"
    json.dump(figures, open(out, "w"), indent=1)
EOF
