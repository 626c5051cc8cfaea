"""Expected values for tests/optim.rs, computed with PyTorch: AdamW (decoupled weight decay on the
matrix only), the warm-up + cosine schedule as SequentialLR(LinearLR, CosineAnnealingLR), and
clip_grad_norm_; then Muon (Keller Jordan's algorithm as modded-nanogpt runs it, written out
below from its description, in float64 instead of bf16) for two matrices beside AdamW for a
bias, on the warm-up + stable + decay schedule as a LambdaLR. Run once
(`python bench/optim_reference.py`) and paste its output into the test; not part of the tests
or CI.
"""
import torch

from muon_reference import Muon, newton_schulz5

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


def wsd(step, warmup=2, max_iters=6, decay_steps=3):
    """The factor of the peak at step (0-based): linear warm-up, held, then linear to a tenth."""
    if step < warmup:
        return (step + 1) / warmup
    start = max_iters - decay_steps
    if step < start:
        return 1.0
    return 1.0 - 0.9 * min(1.0, (step - start) / decay_steps)


def run_muon():
    f64 = dict(dtype=torch.float64)
    tall = torch.tensor([[0.5, -0.25, 1.0], [0.125, 2.0, -1.5], [0.3, 0.1, -0.7], [1.1, -0.4, 0.2]], **f64, requires_grad=True)
    wide = torch.tensor([[0.2, -1.0, 0.6], [0.9, 0.4, -0.3]], **f64, requires_grad=True)
    bias = torch.tensor([0.1, -0.2, 0.3], **f64, requires_grad=True)
    muon = Muon([tall, wide], lr=0.02, momentum=0.95)
    adamw = torch.optim.AdamW([bias], lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    schedules = [torch.optim.lr_scheduler.LambdaLR(o, wsd) for o in (muon, adamw)]
    lrs = []
    for step in range(6):
        k = step + 1
        a = torch.tensor([[1.0, -2.0, 0.5], [3.0, 0.25, -1.0], [-0.5, 1.5, 2.0], [0.7, -0.1, 0.4]], **f64) * k
        b = torch.tensor([[0.3, 1.2, -0.8], [-1.1, 0.6, 0.2]], **f64) / k
        c = torch.tensor([-0.5, 1.5, 2.0], **f64) / k
        for o in (muon, adamw):
            o.zero_grad()
        loss = (tall * a).sum() + (wide * b).sum() + ((wide * wide).sum() * k) + (bias * c).sum()
        loss.backward()
        lrs.append((muon.param_groups[0]["lr"], adamw.param_groups[0]["lr"]))
        torch.nn.utils.clip_grad_norm_([tall, wide, bias], max_norm=1.0)
        muon.step()
        adamw.step()
        for sched in schedules:
            sched.step()
    print("muon + adamw, wsd")
    print("lrs (muon, adamw)", lrs)
    print("tall", tall.detach().flatten().tolist())
    print("wide", wide.detach().flatten().tolist())
    print("bias", bias.detach().flatten().tolist())
    g = torch.tensor([[1.0, 2.0, 0.5, -1.0], [0.25, -0.5, 3.0, 1.5], [2.0, 0.0, -1.0, 0.75]], **f64)
    print("newton_schulz5 of a 3x4", newton_schulz5(g).flatten().tolist())
    print("newton_schulz5 of its 4x3 transpose", newton_schulz5(g.T).flatten().tolist())


run_muon()
