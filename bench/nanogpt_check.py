"""Checks that a run directory loads unchanged into nanoGPT's GPT module structure (strict load_state_dict)
and prints its greedy continuation of 白日, to compare with
`cargo run --release --bin sample -- --checkpoint RUN --prompt 白日 --temperature 0 --num-samples 1
--max-new-tokens 40 --no-stop-at-newline --json`. Needs torch, safetensors and tokenizers; not part of CI.

    python bench/nanogpt_check.py checkpoints/<run>
"""
# nanoGPT's GPT module structure (Karpathy, MIT), eval mode, loading the run's safetensors unchanged.
import json, math, sys, torch, torch.nn as nn, torch.nn.functional as F, tomllib
from safetensors.torch import load_file
from tokenizers import Tokenizer
run = sys.argv[1]
cfg = tomllib.load(open(f"{run}/config.toml", "rb"))["model"]
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
missing, unexpected = model.load_state_dict(load_file(f"{run}/model.safetensors"), strict=True), None
tok = Tokenizer.from_file(f"{run}/tokenizer.json")
ids = tok.encode("\n白日").ids
with torch.no_grad():
    for _ in range(40):
        ids.append(int(model(torch.tensor([ids[-cfg["block_size"]:]]))[0, -1].argmax()))
print(json.dumps({"text": tok.decode(ids[1:])}, ensure_ascii=False))
