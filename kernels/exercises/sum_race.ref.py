"""Exercise sum_race (lesson 03): a many-block sum whose blocks combine their results in one float."""
import torch

TITLE = "fix the race"
LESSON = "03_reduction"
ORDER = 2  # its place in the lesson
NUDGE = 'Several blocks update out[0]. What can happen when two of them read it before either writes it back?'
HINT = ("`out[0] += s[0]` is a load, an add and a store; blocks that interleave them lose each other's sums. "
        "Use atomicAdd(out, s[0]), which does all three as one indivisible operation.")
SIZES = [1, 256, 257, 100_000, 1_000_003]  # one block cannot race; thousands always do
# Blocks add in a different order on every run: float rounding differs in the last bits.
TOLERANCE = {"rtol": 1e-5, "atol": 1e-3}


def inputs(size, seed, device):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.rand(size, generator=g).to(device)}  # positive: no cancellation in the sum


def reference(inp):
    return inp["x"].double().sum().float().reshape(1)


def run(k, inp):
    x = inp["x"]
    n = x.numel()
    out = torch.zeros(1, device=x.device)  # the kernel adds into it
    k.sum_race(out, x, n, grid=(n + 255) // 256, block=256)
    return out
