"""PyTorch twin of the course model, for the speed comparison of `cargo run --release --bin bench`.

The model is nanoGPT's (Karpathy, MIT licence) at the course config: vocab 6000, 4 layers, 4 heads,
n_embd 128, block 128, batch 32, untied lm_head, biases, no dropout, AdamW (0.9, 0.95), grad clip 1.0.
It trains on random tokens, as the Rust bench does, and prints the median tokens/s.

    pip install torch          # the default index's wheel runs on the CPU
    python bench/torch_twin.py --steps 20
    python bench/torch_twin.py --steps 20 --autocast   # bf16 matmuls (AMX where the CPU has it)

With --corpus it trains on a real corpus instead, with this project's recipe and split (one poem in
20 held out, the same character vocabulary), for --max-iters steps or --minutes, whichever comes
first, and prints the wall time and the validation loss over the whole held-out split, every
character predicted once (as `train` reports it):

    python bench/torch_twin.py --corpus data/poems.txt --n-layer 2 --batch-size 8 --position rope \
        --learning-rate 2e-3 --tie-weights --beta2 0.999 --dropout 0.05 --verse-places --schedule wsd \
        --max-iters 5600

(configs/default.toml's recipe; add --frequency-order --adaptive-head 2000 for an adaptive softmax of
the 2,000 most frequent characters and one cluster of the rest; for an equal-time run, match --max-iters to the twin's own
measured speed, as WSD's decay is placed by it, and cap the time with --minutes). With
--evaluate RUN it loads a run's weights instead and prints their whole-split loss, as an
evaluation independent of the Rust code:

    python bench/torch_twin.py --corpus data/poems.txt --evaluate checkpoints/<run>

With --corpus-kind text the corpus is running text, split as nanoGPT's shakespeare_char/prepare.py
splits it (the first 90 % of the characters train); configs/shakespeare.toml's twin, nanoGPT's
README settings for a CPU:

    python bench/torch_twin.py --corpus data/shakespeare.txt --corpus-kind text --n-layer 4 \
        --block-size 64 --batch-size 12 --max-iters 2000 --learning-rate 1e-3 --warmup-iters 100 \
        --beta2 0.99 --tie-weights --no-bias

Not part of the tests or CI.
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from muon_reference import Muon


def rotate(x, base=10000.0):
    """RoPE as this project applies it: pairs (2i, 2i+1) of each head turned by m·base^(-2i/D)."""
    T, D = x.size(-2), x.size(-1)
    theta = base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    angles = torch.arange(T, dtype=torch.float64)[:, None] * theta[None, :]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, rope=False, dropout=0.0, bias=True):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.n_head = n_head
        self.rope = rope
        self.dropout = dropout
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if self.rope:
            q, k = rotate(q), rotate(k)
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C)))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, rope=False, dropout=0.0, bias=True):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd, bias=bias)
        self.attn = CausalSelfAttention(n_embd, n_head, rope, dropout, bias)
        self.ln_2 = nn.LayerNorm(n_embd, bias=bias)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd, bias=bias), nn.GELU(),
                                 nn.Linear(4 * n_embd, n_embd, bias=bias), nn.Dropout(dropout))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


PLACE_ROWS, LINE_ROWS = 9, 9  # places 0..7 and lines 0..7, each then "unknown"
ENDS_LINE, RHYMES = PLACE_ROWS + LINE_ROWS, PLACE_ROWS + LINE_ROWS + 1
PUNCTUATION = "，。？！；"


def verse_places(chars):
    """The rows of the verse-place table each position of a window of characters takes, read as
    src/verse/inputs/places.rs reads them (written here from its description): a (T, 20) 0/1 matrix."""
    rows = torch.zeros(len(chars), RHYMES + 1)
    place = line = first_line = None
    for i, c in enumerate(chars):
        if c == "\n":
            place, line, first_line = 0, 0, None
        elif c in PUNCTUATION:
            if line == 0:
                first_line = place if place else None
            place, line = 0, None if line is None else line + 1
        elif place is not None:
            place += 1
        rows[i, PLACE_ROWS - 1 if place is None else min(place, PLACE_ROWS - 2)] = 1
        rows[i, PLACE_ROWS + (LINE_ROWS - 1 if line is None else min(line, LINE_ROWS - 2))] = 1
        if place is not None and first_line is not None and place + 1 == first_line:
            rows[i, ENDS_LINE] = 1
            if line is not None and line % 2 == 1:
                rows[i, RHYMES] = 1
    return rows


class GPT(nn.Module):
    def __init__(self, vocab, block, n_layer, n_head, n_embd, rope=False, dropout=0.0, tie_weights=False,
                 bias=True, places=False, adaptive_head=0):
        super().__init__()
        # An adaptive softmax (Grave et al. 2017) of two clusters over the output layer's rows: the
        # first `adaptive_head` ids (the most frequent, with --frequency-order) and a vector that
        # stands for the rest, whose own softmax is computed only where the target is one of them.
        self.adaptive_head = adaptive_head
        self.tail_vector = nn.Parameter(torch.zeros(n_embd)) if adaptive_head else None
        self.wte = nn.Embedding(vocab, n_embd)
        self.wvp = nn.Parameter(torch.zeros(RHYMES + 1, n_embd)) if places else None
        self.wpe = None if rope else nn.Embedding(block, n_embd)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList(Block(n_embd, n_head, rope, dropout, bias) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd, bias=bias)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        if tie_weights:
            self.lm_head.weight = self.wte.weight
        for name, p in self.named_parameters():
            if p.dim() >= 2 and not name.startswith("wvp"):
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("c_proj.weight") or name.endswith("mlp.2.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets, places=None):
        T = idx.size(1)
        x = self.wte(idx)
        if self.wvp is not None:
            x = x + places @ self.wvp  # (B, T, 20) @ (20, C)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(T, device=idx.device))
        x = self.drop(x)
        for block in self.h:
            x = block(x)
        h = self.ln_f(x)
        if self.adaptive_head:
            return self.adaptive_loss(h.view(-1, h.size(-1)), targets.reshape(-1))
        logits = self.lm_head(h)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))

    def adaptive_loss(self, h, y):
        """The mean negative log-likelihood of targets `y` (N) under the two-cluster softmax of
        `h` (N, C): p(c) = p_head(c) for the head's ids, p_head(tail) · p_tail(c) for the rest."""
        k, w = self.adaptive_head, self.lm_head.weight
        head_w = torch.cat([w[:k], self.tail_vector[None, :]])  # (K+1, C)
        in_tail = y >= k
        head_y = torch.where(in_tail, torch.full_like(y, k), y)
        total = F.cross_entropy(h @ head_w.t(), head_y, reduction="sum")
        if in_tail.any():
            total = total + F.cross_entropy(h[in_tail] @ w[k:].t(), y[in_tail] - k, reduction="sum")
        return total / y.numel()


def frequency_ordered(vocab, train, val):
    """The vocabulary and ids renumbered by the training text's character counts, most frequent
    first (ties by id), as an adaptive softmax's head takes the first ids."""
    counts = torch.bincount(train, minlength=len(vocab))
    order = sorted(range(len(vocab)), key=lambda i: (-int(counts[i]), i))
    new_id = torch.empty(len(vocab), dtype=torch.long)
    new_id[torch.tensor(order)] = torch.arange(len(vocab))
    return [vocab[i] for i in order], new_id[train], new_id[val]


def load_corpus(args):
    """The character vocabulary and the training and validation ids, split as `train` splits them
    (renumbered by frequency with --frequency-order)."""
    vocab, train, val = read_corpus(args)
    if getattr(args, "frequency_order", False):
        return frequency_ordered(vocab, train, val)
    return vocab, train, val


def read_corpus(args):
    """The character vocabulary and the training and validation ids, split as `train` splits them."""
    if args.corpus_kind == "text":
        text = open(args.corpus, encoding="utf-8").read()
        vocab = ["\n"] + sorted(set(text) - {"\n"})
        ids = {c: i for i, c in enumerate(vocab)}
        cut = len(text) * 9 // 10
        train, val = (torch.tensor([ids[c] for c in part], dtype=torch.long) for part in (text[:cut], text[cut:]))
    else:
        poems = [l.strip() for l in open(args.corpus, encoding="utf-8") if l.strip()]
        vocab = ["\n"] + sorted(set("".join(poems)) - {"\n"})
        ids = {c: i for i, c in enumerate(vocab)}
        encode = lambda ps: torch.tensor([ids[c] for p in ps for c in p + "\n"], dtype=torch.long)
        train = encode(p for i, p in enumerate(poems) if i % 20 != 19)
        val = encode(p for i, p in enumerate(poems) if i % 20 == 19)
    return vocab, train, val


def whole_split_loss(model, val, block, places_of):
    """The mean loss over the whole split, every character predicted once, in consecutive windows
    of `block` characters (the last one shorter), 32 to a batch."""
    model.eval()
    predicted = len(val) - 1
    windows = [(s, min(block, predicted - s)) for s in range(0, predicted, block)]
    batches = [windows[i:i + 32] for i in range(0, len(windows), 32)]
    batches = [[w for w in b if w[1] == block] for b in batches] + [[w] for w in windows if w[1] < block]
    total, count = 0.0, 0
    with torch.no_grad():
        for batch in filter(None, batches):
            x = torch.stack([val[s:s + n] for s, n in batch])
            y = torch.stack([val[s + 1:s + n + 1] for s, n in batch])
            total += float(model(x, y, places_of(x))) * x.numel()
            count += x.numel()
    return total / count


def evaluate_run(args):
    """Loads a run's model.safetensors (nanoGPT's names) into this module and prints its loss over
    the whole validation split: an evaluation independent of the Rust code."""
    from safetensors.torch import load_file
    import tomllib
    cfg = tomllib.load(open(f"{args.evaluate}/config.toml", "rb"))["model"]
    vocab, _, val = load_corpus(args)
    model = GPT(len(vocab), cfg["block_size"], cfg["n_layer"], cfg["n_head"], cfg["n_embd"],
                rope=cfg["position"] == "rope", tie_weights=cfg["tie_weights"], bias=cfg["bias"],
                places="verse_places" in cfg.get("inputs", []) or cfg.get("verse_places", False))
    renames = [("transformer.", ""), ("mlp.c_fc.", "mlp.0."), ("mlp.c_proj.", "mlp.2."), ("wvp.weight", "wvp")]
    weights = {}
    for name, tensor in load_file(f"{args.evaluate}/model.safetensors").items():
        for a, b in renames:
            name = name.replace(a, b)
        weights[name] = tensor
    model.load_state_dict(weights, strict=True)
    places_of = lambda x: torch.stack([verse_places([vocab[i] for i in w]) for w in x.tolist()]) \
        if model.wvp is not None else None
    print(json.dumps({"run": args.evaluate, "val_loss_whole": whole_split_loss(model, val, cfg["block_size"], places_of)}))


def corpus_run(args):
    """Trains on the real corpus with this project's recipe and reports the whole-split loss."""
    vocab, train, val = load_corpus(args)
    block = args.block_size
    torch.manual_seed(args.seed)
    model = GPT(len(vocab), block, args.n_layer, args.n_head, args.n_embd, rope=args.position == "rope",
                dropout=args.dropout, tie_weights=args.tie_weights, bias=not args.no_bias,
                places=args.verse_places, adaptive_head=args.adaptive_head)
    # The verse places of each window (B, T, 20), or None.
    places_of = lambda x: torch.stack([verse_places([vocab[i] for i in w]) for w in x.tolist()]) \
        if args.verse_places else None
    # Muon takes the blocks' weight matrices (as this project's optim::muon_takes does); AdamW the rest.
    hidden = [p for n, p in model.named_parameters() if args.optimizer == "muon" and n.startswith("h.") and p.dim() == 2]
    rest = [p for p in model.parameters() if all(p is not h for h in hidden)]
    decay = [p for p in rest if p.dim() >= 2]
    no_decay = [p for p in rest if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.learning_rate, betas=(0.9, args.beta2))
    optimizers = [(opt, args.learning_rate)]
    if hidden:
        optimizers.append((Muon(hidden, lr=args.muon_learning_rate, momentum=0.95), args.muon_learning_rate))

    def factor_at(step):
        """The schedule's factor of the peak: warm-up, then cosine or WSD, to a tenth."""
        warm, total = args.warmup_iters, args.max_iters
        if step < warm:
            return (step + 1) / warm
        if args.schedule == "wsd":
            decay_steps = max(min(math.ceil(args.decay_fraction * total), total - warm), 1)
            progress = min(max(step - (total - decay_steps), 0) / decay_steps, 1.0)
            return 1.0 - 0.9 * progress
        progress = min((step - warm) / max(total - warm, 1), 1.0)
        return 0.1 + 0.5 * (1 + math.cos(math.pi * progress)) * 0.9

    start, step = time.perf_counter(), 0
    while step < args.max_iters and time.perf_counter() - start < 60 * args.minutes:
        for o, peak in optimizers:
            for group in o.param_groups:
                group["lr"] = peak * factor_at(step)
        offsets = torch.randint(0, len(train) - block - 1, (args.batch_size,))
        windows = torch.stack([train[o:o + block + 1] for o in offsets.tolist()])
        loss = model(windows[:, :-1], windows[:, 1:], places_of(windows[:, :-1]))
        for o, _ in optimizers:
            o.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for o, _ in optimizers:
            o.step()
        step += 1
    train_s = time.perf_counter() - start
    val_loss_whole = whole_split_loss(model, val, block, places_of)
    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(), "steps": step,
                      "train_s": train_s, "train_loss_last": float(loss), "val_loss_whole": val_loss_whole}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=6000)
    ap.add_argument("--corpus", help="train on this corpus (one poem per line) instead of random tokens")
    ap.add_argument("--corpus-kind", choices=["verse", "text"], default="verse",
                    help="verse: one poem per line, every 20th held out; text: running text, the last tenth held out")
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--block-size", type=int, default=128, help="--corpus runs")
    ap.add_argument("--no-bias", action="store_true", help="Linear and LayerNorm without biases (--corpus runs)")
    ap.add_argument("--position", choices=["learned", "rope"], default="learned")
    ap.add_argument("--learning-rate", type=float, default=2e-3)
    ap.add_argument("--warmup-iters", type=int, default=30)
    ap.add_argument("--max-iters", type=int, default=5200)
    ap.add_argument("--minutes", type=float, default=1e9)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--dropout", type=float, default=0.0, help="nanoGPT's: embeddings, attention weights, residual branches")
    ap.add_argument("--tie-weights", action="store_true", help="the output layer shares the embedding's matrix")
    ap.add_argument("--verse-places", action="store_true",
                    help="learned rows for each position's place in its poem, as verse_places = true (--corpus runs)")
    ap.add_argument("--beta2", type=float, default=0.95, help="AdamW's β2 (--corpus runs)")
    ap.add_argument("--optimizer", choices=["adamw", "muon"], default="adamw",
                    help="muon: Muon for the blocks' weight matrices, AdamW for the rest (--corpus runs)")
    ap.add_argument("--muon-learning-rate", type=float, default=0.02)
    ap.add_argument("--schedule", choices=["cosine", "wsd"], default="cosine", help="--corpus runs")
    ap.add_argument("--decay-fraction", type=float, default=0.2, help="WSD's share of decaying steps")
    ap.add_argument("--autocast", action="store_true",
                    help="bf16 mixed precision: the forward pass under torch.autocast('cpu', dtype=torch.bfloat16)")
    ap.add_argument("--frequency-order", action="store_true",
                    help="number the characters by their count in the training text, most frequent first (--corpus runs)")
    ap.add_argument("--adaptive-head", type=int, default=0, metavar="K",
                    help="an adaptive softmax: the first K ids in the head, the rest in one cluster (--corpus runs; "
                         "with --frequency-order, the K most frequent)")
    ap.add_argument("--evaluate", metavar="RUN",
                    help="print the whole-split loss of a run directory's weights on --corpus (no training)")
    args = ap.parse_args()
    if args.evaluate:
        return evaluate_run(args)
    if args.corpus:
        return corpus_run(args)
    torch.manual_seed(0)
    block = 128
    model = GPT(args.vocab, block, 4, 4, 128)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95))
    times = []
    for step in range(args.steps + 2):
        start = time.perf_counter()
        data = torch.randint(0, args.vocab, (args.batch_size, block + 1))
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast):
            loss = model(data[:, :-1], data[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step >= 2:
            times.append(time.perf_counter() - start)
    times.sort()
    tokens_per_s = args.batch_size * block / times[len(times) // 2]
    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(),
                      "dtype": "bf16-autocast" if args.autocast else "fp32", "train_tokens_per_s": tokens_per_s}))


if __name__ == "__main__":
    main()
