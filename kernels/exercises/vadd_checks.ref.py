"""Exercise vadd_checks (lesson 04): a torch-style a + b that must reject inputs its kernel cannot take.

Every bad input below is harmless to a kernel without checks (it reads and writes only memory that
belongs to the test), so a missing check shows up as a wrong answer, never as a crashed GPU. A CPU
tensor is tried only as b, and only in pinned memory, which the GPU can read: a CPU `a` would make
the unchecked kernel write to host memory it cannot reach.
"""
import torch

TITLE = "add input checks"
LESSON = "04_torch_bindings"
ORDER = 2  # its place in the lesson
NUDGE = ('List what the kernel assumes about a and b (device, layout, dtype, shape, size). '
         'Which of those can a caller get wrong, and what tells them so?')
HINT = ("One TORCH_CHECK(condition, \"message\") per assumption, before the allocation: a.is_cuda() and "
        "b.is_cuda(); a.is_contiguous() and b.is_contiguous(); a.scalar_type() == torch::kFloat32 (and b); "
        "a.dim() == 1 (and b); a.numel() == b.numel(). CHECK_INPUT(x) covers the first two.")
SIZES = [1, 1000, 100_003]


def inputs(size, seed, device):
    g = torch.Generator().manual_seed(seed)
    return {"a": torch.randn(size, generator=g).to(device), "b": torch.randn(size, generator=g).to(device)}


def reference(inp):
    return inp["a"] + inp["b"]


def _bad_inputs(a, b):
    n = a.numel()
    yield "float64 tensors", a.double(), b.double()
    if n > 1:  # torch calls any 1-element tensor contiguous, whatever its stride
        yield "a strided view (every other element of a longer tensor)", torch.cat([a, a])[::2], b
    yield "a 2-D tensor", a.view(1, n), b.view(1, n)
    yield "a longer b (b has one element more than a)", a, torch.cat([b, b[:1]])
    yield "b on the CPU", a, b.cpu().pin_memory()


def run(m, inp):
    a, b = inp["a"], inp["b"]
    c = m.vadd_checks(a, b)
    for what, x, y in _bad_inputs(a, b):
        try:
            m.vadd_checks(x, y)
            torch.cuda.synchronize()
        except (RuntimeError, ValueError, TypeError):
            continue
        raise AssertionError(f"vadd_checks accepted {what}: it must raise (a TORCH_CHECK with a message)")
    return c
