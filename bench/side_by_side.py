"""The README's speed table, measured: this project's bench and its PyTorch twin, side by side.

Runs ROUNDS rounds on the course config, each round `bench --only course --json` and then
`bench/torch_twin.py` (eager fp32, and with --autocast where this CPU multiplies bf16), and prints
each round's ratios, then the medians of the rates and of the per-round ratios, with their ranges,
under the machine's CPU model and what the bench selected. Ratios of runs side by side are the
figures to compare; rates move with the machine's load.

    cargo build --release --bin bench     # once; the rounds run target/release/bench
    pip install torch                     # the twin's; the default index's wheel runs on the CPU
    python bench/side_by_side.py --rounds 6

--json FILE also writes every round's figures. Standard library only (and torch for the twin).
Not part of the tests or CI.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "target", "release", "bench")


def run_json(command):
    """The last line of a command's standard output, parsed as JSON; exits with its error."""
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        if "No module named 'torch'" in done.stderr:
            sys.exit("the PyTorch twin needs torch: pip install torch")
        sys.exit(f"{' '.join(command)} failed:\n{done.stderr.strip()}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def one_round(steps):
    """One round's tokens/s: ours (f32, bf16 where it runs, sampling) and the twin's (eager, and
    autocast where our bf16 runs)."""
    report = run_json([BENCH, "--only", "course", "--steps", str(steps), "--json"])
    rows = {row["dtype"]: row for row in report["models"]}
    f32 = rows["f32"]
    rates = {
        "ours_f32": f32["train_tokens_per_s"],
        "cached": f32["sample_tokens_per_s_cached"],
        # null where f32 is the decoder's fastest format: the cached rate is then f32's.
        "cached_f32": f32["sample_tokens_per_s_cached_f32"] or f32["sample_tokens_per_s_cached"],
        "no_cache": f32["sample_tokens_per_s_no_cache"],
    }
    twin = [sys.executable, os.path.join("bench", "torch_twin.py"), "--steps", str(steps)]
    eager = run_json(twin)
    rates["eager"] = eager["train_tokens_per_s"]
    if "bf16" in rows:
        rates["ours_bf16"] = rows["bf16"]["train_tokens_per_s"]
        rates["autocast"] = run_json(twin + ["--autocast"])["train_tokens_per_s"]
    return report["machine"], eager["torch"], rates


RATIOS = [
    ("training fp32 / PyTorch eager fp32", "ours_f32", "eager"),
    ("training bf16 / PyTorch eager fp32", "ours_bf16", "eager"),
    ("training bf16 / PyTorch autocast bf16", "ours_bf16", "autocast"),
    ("sampling with the cache / recomputing", "cached", "no_cache"),
    ("the same, f32 weights / recomputing", "cached_f32", "no_cache"),
]


def spread(values, digits, unit):
    """Median and unit (min–max), rounded."""
    fmt = f"{{:,.{digits}f}}".format
    return f"{fmt(statistics.median(values))}{unit} ({fmt(min(values))}–{fmt(max(values))})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=10, help="training steps per run (medians)")
    parser.add_argument("--json", metavar="FILE", help="also write every round's figures here")
    args = parser.parse_args()
    if args.rounds < 1 or args.steps < 1:
        sys.exit("--rounds and --steps must be at least 1")
    mark = '"written_by": "bench/side_by_side.py"'
    if args.json and os.path.exists(args.json) and mark not in open(args.json, errors="replace").read():
        sys.exit(f"{args.json} exists and was not written by this script: it is left as it is; give another --json")
    if not os.access(BENCH, os.X_OK):
        sys.exit(f"no bench binary at {BENCH}: run `cargo build --release --bin bench` first")
    rounds = []
    for i in range(args.rounds):
        machine, torch_version, rates = one_round(args.steps)
        rounds.append(rates)
        shown = ", ".join(f"{rates[a] / rates[b]:.2f}×" for _, a, b in RATIOS
                          if a in rates and b in rates)
        print(f"round {i + 1}: ours {rates['ours_f32']:,.0f}, eager {rates['eager']:,.0f} tok/s; "
              f"ratios {shown}", flush=True)
    print(f"\n{machine['cpu_model']} ({machine['isa']}), {machine['threads']} threads; gemm "
          f"{machine['gemm_kernels']}, bf16 {machine['bf16_kernels']}, loops "
          f"{machine['fused_kernels']}, decoder weights {machine['decoder_weights']}; "
          f"PyTorch {torch_version}; {args.rounds} rounds of {args.steps} steps\n")
    for key in ["ours_f32", "ours_bf16", "eager", "autocast", "cached", "cached_f32", "no_cache"]:
        if all(key in r for r in rounds):
            print(f"  {key:<12} {spread([r[key] for r in rounds], 0, ' tok/s')}")
    print()
    for name, a, b in RATIOS:
        if all(a in r and b in r for r in rounds):
            print(f"  {name:<40} {spread([r[a] / r[b] for r in rounds], 2, '×')}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"written_by": "bench/side_by_side.py", "machine": machine, "torch": torch_version,
                       "rounds": rounds}, f, indent=1)


if __name__ == "__main__":
    main()
