"""Expected values for tests/optim.rs, computed with PyTorch: AdamW (decoupled weight decay on the
matrix only), the warm-up + cosine schedule as SequentialLR(LinearLR, CosineAnnealingLR), and
clip_grad_norm_. Run once (`python bench/optim_reference.py`) and paste its output into the test;
not part of the tests or CI.
"""
import torch

torch.set_printoptions(precision=10)
PEAK, WARMUP, MAX_ITERS = 0.01, 2, 6


def run(beta2):
    w = torch.tensor([[0.5, -0.25, 1.0], [0.125, 2.0, -1.5]], dtype=torch.float64, requires_grad=True)
    b = torch.tensor([0.1, -0.2, 0.3], dtype=torch.float64, requires_grad=True)
    opt = torch.optim.AdamW(
        [{"params": [w], "weight_decay": 0.1}, {"params": [b], "weight_decay": 0.0}],
        lr=PEAK, betas=(0.9, beta2), eps=1e-8,
    )
    warmup = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1 / WARMUP, end_factor=1.0, total_iters=WARMUP - 1)
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=MAX_ITERS - WARMUP, eta_min=PEAK / 10)
    schedule = torch.optim.lr_scheduler.SequentialLR(opt, [warmup, cosine], milestones=[WARMUP])
    lrs, norms = [], []
    for step in range(MAX_ITERS):
        # Gradients of the loss sum(w ⊙ A) + sum(b ⊙ c) with fixed A and c that change by step.
        a = torch.tensor([[1.0, -2.0, 0.5], [3.0, 0.25, -1.0]], dtype=torch.float64) * (step + 1)
        c = torch.tensor([-0.5, 1.5, 2.0], dtype=torch.float64) / (step + 1)
        opt.zero_grad()
        ((w * a).sum() + (b * c).sum()).backward()
        lrs.append(opt.param_groups[0]["lr"])
        norms.append(float(torch.nn.utils.clip_grad_norm_([w, b], max_norm=1.0)))
        opt.step()
        schedule.step()
    print(f"beta2 {beta2}")
    print("lrs", lrs)
    print("norms before clipping", norms)
    print("w", w.detach().flatten().tolist())
    print("b", b.detach().flatten().tolist())


# nanoGPT's β2, and the default config's (its bias correction still large after six steps).
for beta2 in (0.95, 0.999):
    run(beta2)
