"""Exercise welford_merge (lesson 07): layer norm with one-pass Welford statistics merged by shuffles."""
import torch
import torch.nn.functional as F

TITLE = "Welford: merge two (count, mean, M2)"
LESSON = "07_softmax_layernorm"
ORDER = 4  # its place in the lesson
NUDGE = ('Merging two partial results: the count is a sum; the mean is a weighted '
         'average; M2 needs a correction for how far the two means are apart.')
HINT = ("nn = n + nb; if (nn == 0) return; delta = meanb - mean; mean += delta * nb / nn; "
        "m2 += m2b + delta * delta * n * nb / nn; n = nn;")
# (rows, cols); a size is rows * cols. Short rows leave lanes empty (n = 0); rows have means far from 0.
SHAPES = {r * c: (r, c) for r, c in [(3, 1), (4, 31), (4, 33), (8, 100), (5, 1000)]}
SIZES = list(SHAPES)
EPS = 1e-5
TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}


def inputs(size, seed, device):
    rows, cols = SHAPES.get(size, (1, size))
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g) * 2.0 + torch.arange(rows).float()[:, None] * 3.0
    return {"x": x.to(device), "w": torch.randn(cols, generator=g).to(device),
            "b": torch.randn(cols, generator=g).to(device)}


def reference(inp):
    x = inp["x"]
    return F.layer_norm(x, (x.shape[-1],), inp["w"], inp["b"], eps=EPS)


def run(k, inp):
    x = inp["x"]
    rows, cols = x.shape
    y = torch.empty_like(x)
    k.welford_merge(y, x, inp["w"], inp["b"], rows, cols, EPS, grid=-(-rows // 4), block=128)
    return y
