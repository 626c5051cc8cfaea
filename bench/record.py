#!/usr/bin/env python3
"""Records a finished run as docs/results/NAME.json: its summary.json and config.toml, the command
that made it, the commit it was built from and the machine, so that the README's figures can be
checked against it (tests/readme_figures.rs).

Usage: python3 bench/record.py NAME RUN_DIR --command "cargo run --release --bin train" [--commit REV]
       [--extra FILE.json]   (another figure file of the same run, e.g. bench/verse_eval.sh --json)
"""
import argparse, json, re, subprocess, sys, tomllib
from datetime import datetime, timezone
from pathlib import Path


def cpu():
    """The CPU's model name, family and model, and its vector extensions, from /proc/cpuinfo."""
    info = {}
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        key, _, value = line.partition(":")
        info.setdefault(key.strip(), value.strip())
    flags = info.get("flags", "").split()
    isa = [f for f in flags if f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "f16c")]
    return {
        "model_name": info.get("model name", "unknown"),
        "family": info.get("cpu family"),
        "model": info.get("model"),
        "isa": isa,
        "cores": len([l for l in Path("/proc/cpuinfo").read_text().splitlines() if l.startswith("processor")]),
    }


# Who wrote a record: this script, or (in records written before it said so) a record of this
# script's keys with a commit it resolved.
MARK = "bench/record.py"
KEYS = {"command", "commit", "machine", "recorded", "summary", "config"}


def written_here(path):
    """Whether the record at `path` was written by this script (it may write it again)."""
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(old, dict):
        return False
    legacy = KEYS <= old.keys() and re.fullmatch("[0-9a-f]{40}", str(old.get("commit")))
    return old.get("written_by") == MARK or bool(legacy)


def repository_path(path, out):
    """`path` as a record keeps it: from the repository's root where it lies inside, else the
    folder's name alone (no machine's absolute path)."""
    root = out.parent.parent.parent
    full = Path(path).resolve()
    try:
        return str(full.relative_to(root))
    except ValueError:
        return full.name


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("name")
    parser.add_argument("run")
    parser.add_argument("--command", required=True)
    parser.add_argument("--commit", default="HEAD")
    parser.add_argument("--extra", action="append", default=[])
    args = parser.parse_args()
    run = Path(args.run)
    out = Path(__file__).resolve().parent.parent / "docs" / "results" / f"{args.name}.json"
    if out.exists() and not written_here(out):
        sys.exit(f"record.py: {out} exists and was not written by {MARK} (a transcribed record?): "
                 "it is left as it is; choose another NAME")
    commit = subprocess.run(["git", "rev-parse", args.commit], capture_output=True, text=True, check=True)
    record = {
        "written_by": MARK,
        "command": args.command,
        "commit": commit.stdout.strip(),
        "machine": cpu(),
        "recorded": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "summary": json.loads((run / "summary.json").read_text()),
        "config": tomllib.loads((run / "config.toml").read_text()),
    }
    record["summary"]["checkpoint"] = repository_path(record["summary"].get("checkpoint", str(run)), out)
    for extra in args.extra:
        record[Path(extra).stem] = json.loads(Path(extra).read_text())
    out.write_text(json.dumps(record, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
