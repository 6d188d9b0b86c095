"""Exercise vadd_float4 (lesson 01): c = a + b, one float4 per thread, and the n % 4 tail."""
import torch

TITLE = "float4 loads: handle the tail"
LESSON = "01_vector_add"
ORDER = 4  # its place in the lesson
NUDGE = ('Each thread handles four floats. When n is not a multiple of '
         '4, who adds the last one to three elements?')
HINT = ("The launch has ceil(n / 4) threads, so when n % 4 != 0 thread n4 = n / 4 has no whole float4: "
        "add `else if (i == n4) { for (int k = 4 * n4; k < n; ++k) c[k] = a[k] + b[k]; }`.")
SIZES = [1, 2, 3, 4, 5, 1023, 1024, 1_000_003]  # n % 4 = 1, 2, 3 and 0


def inputs(size, seed, device):
    g = torch.Generator().manual_seed(seed)
    # fresh allocations: 16-byte aligned, as float4 loads need
    return {"a": torch.rand(size, generator=g).to(device), "b": torch.rand(size, generator=g).to(device)}


def reference(inp):
    return inp["a"] + inp["b"]


def run(k, inp):
    a, b = inp["a"], inp["b"]
    n = a.numel()
    c = torch.empty_like(a)
    threads = (n + 3) // 4  # one per float4, the last one partial
    k.vadd_float4(c, a, b, n, grid=(threads + 255) // 256, block=256)
    return c
