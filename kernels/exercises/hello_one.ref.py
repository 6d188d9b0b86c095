"""Exercise hello_one (lesson 00): of a 2 x 4 launch, only thread 3 of block 1 prints."""
import contextlib
import io

TITLE = "one thread speaks"
LESSON = "00_setup_and_hello"
ORDER = 1  # its place in the lesson
NUDGE = ('How many threads run the printf line, and how could a thread '
         'tell whether it is the one that should speak?')
HINT = ("Every thread runs the whole kernel. Wrap the printf in "
        "`if (blockIdx.x == 1 && threadIdx.x == 3) { ... }` so the other 7 threads skip it.")
SIZES = [1]


def inputs(size, seed, device):
    return {}


def reference(inp):
    return "hello from block 1, thread 3\n"


def run(k, inp):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):  # jitlab forwards device printf into sys.stdout
        k.hello_one(grid=2, block=4)
    return out.getvalue()
