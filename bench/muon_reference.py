"""Muon (Keller Jordan, 2024, "Muon: an optimizer for hidden layers in neural networks", as
modded-nanogpt runs it), written out from its description for bench/optim_reference.py and
bench/torch_twin.py: the momentum buffer (lerp), Nesterov's look-ahead, five quintic Newton-Schulz
steps on the wide orientation, and a step scaled by sqrt(max(1, rows/cols)). In the dtype of the
parameters (modded-nanogpt iterates in bf16 on a GPU).
"""
import torch


def newton_schulz5(g, steps=5):
    """The orthogonalisation of Muon: five quintic Newton-Schulz steps on the wide orientation."""
    a, b, c = (3.4445, -4.7750, 2.0315)
    x = g.T if g.size(0) > g.size(1) else g
    x = x / (x.norm() + 1e-7)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if g.size(0) > g.size(1) else x


class Muon(torch.optim.Optimizer):
    """momentum buffer lerp, Nesterov look-ahead, Newton-Schulz, step scaled by sqrt(max(1, rows/cols))."""

    def __init__(self, params, lr, momentum):
        super().__init__(params, dict(lr=lr, momentum=momentum))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            mu = group["momentum"]
            for p in group["params"]:
                state = self.state[p]
                if "buf" not in state:
                    state["buf"] = torch.zeros_like(p)
                buf = state["buf"]
                buf.lerp_(p.grad, 1 - mu)
                update = p.grad.lerp(buf, mu)
                scale = max(1.0, p.size(0) / p.size(1)) ** 0.5
                p.add_(newton_schulz5(update), alpha=-group["lr"] * scale)
