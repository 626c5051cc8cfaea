"""An outside check of the engine: nanoGPT's GPT module structure (its model.py's modules, re-typed
here in PyTorch) loads a run's model.safetensors unchanged (strict load_state_dict) and must give
the likelihood `score` gives each poem, and `sample`'s greedy continuation. CI runs it
(.ci/nanogpt_check.sh) on a run of learned positions and no verse inputs, the model nanoGPT has.

    python3 bench/nanogpt_check.py RUN --score SCORE.json --sample SAMPLE.json

SCORE.json: `score --checkpoint RUN --json POEMS` on poems that fit the block (the newline that opens
a poem, the poem and its ending newline); SAMPLE.json: `sample --checkpoint RUN --prompt 白日
--temperature 0 --num-samples 1 --max-new-tokens N --no-stop-at-newline --json` with 3 + N at most
the block. Needs torch, safetensors and tokenizers. Exits 1 where a figure differs.
"""
# nanoGPT's GPT module structure (Karpathy, MIT), eval mode, loading the run's safetensors unchanged.
import argparse, json, sys, torch, torch.nn as nn, torch.nn.functional as F, tomllib
from safetensors.torch import load_file
from tokenizers import Tokenizer
parser = argparse.ArgumentParser()
parser.add_argument("run")
parser.add_argument("--score", required=True)
parser.add_argument("--sample", required=True)
args = parser.parse_args()
cfg = tomllib.load(open(f"{args.run}/config.toml", "rb"))["model"]
if (cfg["position"] != "learned" or cfg.get("inputs") or cfg.get("activation", "gelu") != "gelu"
        or cfg.get("adaptive_head", 0)):
    sys.exit("nanoGPT's model has learned positions, GELU, no verse inputs and a full softmax: check a run of those")
class LayerNorm(nn.Module):
    def __init__(s, n, bias): super().__init__(); s.weight = nn.Parameter(torch.ones(n)); s.bias = nn.Parameter(torch.zeros(n)) if bias else None
    def forward(s, x): return F.layer_norm(x, s.weight.shape, s.weight, s.bias, 1e-5)
class CausalSelfAttention(nn.Module):
    def __init__(s, c):
        super().__init__(); s.c_attn = nn.Linear(c["n_embd"], 3 * c["n_embd"], bias=c["bias"]); s.c_proj = nn.Linear(c["n_embd"], c["n_embd"], bias=c["bias"]); s.n_head = c["n_head"]
    def forward(s, x):
        B, T, C = x.size(); q, k, v = s.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, s.n_head, C // s.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return s.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
class MLP(nn.Module):
    def __init__(s, c): super().__init__(); s.c_fc = nn.Linear(c["n_embd"], 4 * c["n_embd"], bias=c["bias"]); s.gelu = nn.GELU(); s.c_proj = nn.Linear(4 * c["n_embd"], c["n_embd"], bias=c["bias"])
    def forward(s, x): return s.c_proj(s.gelu(s.c_fc(x)))
class Block(nn.Module):
    def __init__(s, c): super().__init__(); s.ln_1 = LayerNorm(c["n_embd"], c["bias"]); s.attn = CausalSelfAttention(c); s.ln_2 = LayerNorm(c["n_embd"], c["bias"]); s.mlp = MLP(c)
    def forward(s, x): x = x + s.attn(s.ln_1(x)); return x + s.mlp(s.ln_2(x))
class GPT(nn.Module):
    def __init__(s, c):
        super().__init__()
        s.transformer = nn.ModuleDict(dict(wte=nn.Embedding(c["vocab_size"], c["n_embd"]), wpe=nn.Embedding(c["block_size"], c["n_embd"]), drop=nn.Dropout(0.0),
            h=nn.ModuleList([Block(c) for _ in range(c["n_layer"])]), ln_f=LayerNorm(c["n_embd"], c["bias"])))
        s.lm_head = nn.Linear(c["n_embd"], c["vocab_size"], bias=False)
        if c["tie_weights"]: s.transformer.wte.weight = s.lm_head.weight
    def forward(s, idx):
        x = s.transformer.drop(s.transformer.wte(idx) + s.transformer.wpe(torch.arange(idx.size(1))))
        for b in s.transformer.h: x = b(x)
        return s.lm_head(s.transformer.ln_f(x))
model = GPT(cfg).eval()
model.load_state_dict(load_file(f"{args.run}/model.safetensors"), strict=True)
tok = Tokenizer.from_file(f"{args.run}/tokenizer.json")
newline = tok.token_to_id("\n")
failures = []

# Each poem's mean negative log-likelihood per character, its ending newline included, given the
# newline that opens it: as `score` computes it.
poems = json.load(open(args.score))["poems"]
for poem in poems:
    ids = [newline] + tok.encode(poem["poem"], add_special_tokens=False).ids + [newline]
    if len(ids) - 1 > cfg["block_size"]:
        sys.exit(f"{poem['poem']}: longer than the block ({cfg['block_size']}); give poems that fit")
    with torch.no_grad():
        logits = model(torch.tensor([ids[:-1]]))[0].double()
    nll = F.cross_entropy(logits, torch.tensor(ids[1:])).item()
    # Both sum in f32 in their own order: they agree to a few parts in a million of the loss.
    if abs(nll - poem["nll"]) > 2e-5 * abs(nll):
        failures.append(f"{poem['poem']}: nanoGPT {nll:.7f}, score {poem['nll']:.7f}")
print(f"{len(poems)} poems' likelihoods compared")

# The greedy continuation of 白日.
sample = json.loads(open(args.sample).readline())
ids = [newline] + tok.encode("白日", add_special_tokens=False).ids
steps = len(tok.encode(sample["text"], add_special_tokens=False).ids) - 2
with torch.no_grad():
    for _ in range(steps):
        ids.append(int(model(torch.tensor([ids[-cfg["block_size"]:]]))[0, -1].argmax()))
text = tok.decode(ids[1:]).replace(" ", "")
if text != sample["text"]:
    failures.append(f"greedy: nanoGPT {text!r}, sample {sample['text']!r}")
print(json.dumps({"text": text, "failures": failures}, ensure_ascii=False))
sys.exit(1 if failures else 0)
