"""Rhyme segments read from the real Song ci, apart from the Rust 词谱 (issue #72's reading).

For each tune, of its ci in data/ci.txt with the tune's commonest shape (each sentence's length
and mark), two sentence ends rhyme together where they share a 部 of data/cilin.tsv (by its
number: 平 and 仄 of one 部 rhyme together) in at least 60 % of them; a segment is the ends so
linked (two or more). A ci rhymes in
every segment where it has that shape and each segment's ends are distinct characters sharing one
部. Used by bench/ci_eval.sh; run alone it prints the real ci's figures:
    python3 bench/ci_segments.py [tune ...]
"""
import collections
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MARKS = "，、。"


def read_cilin(path=os.path.join(ROOT, "data", "cilin.tsv")):
    cilin = {}
    for line in open(path, encoding="utf-8"):
        if line.startswith("#") or not line.strip():
            continue
        char, bu = line.rstrip("\n").split("\t")
        cilin[char] = {int("".join(d for d in b if d.isdigit())) for b in bu.split(",")}
    return cilin


def split_ci(line):
    """(tune, text) of a line `【tune】text`, or None."""
    line = line.strip()
    if not line.startswith("【") or "】" not in line:
        return None
    tune, text = line[1:].split("】", 1)
    return tune, text


def shape_and_finals(text):
    shape, finals, length = [], [], 0
    for c in text:
        if c in MARKS:
            shape.append((length, c))
            finals.append(prev if length else None)
            length = 0
        else:
            length, prev = length + 1, c
    return tuple(shape), finals


class Reading:
    def __init__(self, ci_path=os.path.join(ROOT, "data", "ci.txt")):
        self.cilin = read_cilin()
        by_tune = collections.defaultdict(lambda: collections.defaultdict(list))
        for line in open(ci_path, encoding="utf-8"):
            parsed = split_ci(line)
            if parsed:
                shape, finals = shape_and_finals(parsed[1])
                by_tune[parsed[0]][shape].append(finals)
        self.tunes = {}
        for tune, shapes in by_tune.items():
            shape, finals = max(shapes.items(), key=lambda kv: len(kv[1]))
            self.tunes[tune] = (shape, self._segments(finals))
        self.by_count = sorted(by_tune, key=lambda t: -sum(map(len, by_tune[t].values())))

    def _share(self, a, b):
        return bool(self.cilin.get(a, set()) & self.cilin.get(b, set()))

    def _segments(self, finals):
        n = len(finals[0])
        label = list(range(n))
        links = [(i, j) for j in range(n) for i in range(j)
                 if 10 * sum(self._share(f[i], f[j]) for f in finals) >= 6 * len(finals)]
        changed = True
        while changed:
            changed = False
            for i, j in links:
                low = min(label[i], label[j])
                if (label[i], label[j]) != (low, low):
                    label[i] = label[j] = low
                    changed = True
        groups = [[s for s in range(n) if label[s] == root] for root in range(n)]
        return [g for g in groups if len(g) >= 2]

    def form_kept(self, line):
        """Whether the ci (`【tune】text`) has its tune's commonest shape."""
        parsed = split_ci(line)
        return bool(parsed) and parsed[0] in self.tunes and \
            shape_and_finals(parsed[1])[0] == self.tunes[parsed[0]][0]

    def segments_rhymed(self, line):
        """(segments of the ci's tune, of them rhymed), or None where the ci lacks its tune's shape
        or the tune has no segment."""
        if not self.form_kept(line):
            return None
        tune, text = split_ci(line)
        shape, segments = self.tunes[tune]
        if not segments:
            return None
        finals = shape_and_finals(text)[1]
        rhymed = 0
        for segment in segments:
            ends = [finals[s] for s in segment]
            shared = set.intersection(*(self.cilin.get(c, set()) for c in ends))
            rhymed += len(set(ends)) == len(ends) and bool(shared)
        return len(segments), rhymed

    def every_segment(self, line):
        """Whether the ci rhymes in every segment of its tune (False where it lacks the shape)."""
        counts = self.segments_rhymed(line)
        return bool(counts) and counts[0] == counts[1]


def summary(reading, lines):
    """Shares of the ci `lines` that keep their tune's form, and that rhyme in every segment."""
    lines = [l for l in lines if l.strip()]
    n = max(len(lines), 1)
    return {"ci": len(lines),
            "form_percent": round(100 * sum(map(reading.form_kept, lines)) / n, 1),
            "every_segment_percent": round(100 * sum(map(reading.every_segment, lines)) / n, 1)}


if __name__ == "__main__":
    reading = Reading()
    tunes = sys.argv[1:] or reading.by_count[:10]
    lines = [l for l in open(os.path.join(ROOT, "data", "ci.txt"), encoding="utf-8")
             if (split_ci(l) or ("",))[0] in tunes]
    for tune in tunes:
        print(tune, reading.tunes[tune][1])
    print(summary(reading, lines))
