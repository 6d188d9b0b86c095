"""Reference for hello_cpp.cpp (seed 004's load_inline hello, C++ only)."""
SIZES = [1]


def inputs(size, seed, device):
    return {}


def reference(inp):
    return "Hello World!"


def run(m, inp):
    return m.hello()
