"""In a Python process started with ``scripts/jitlab_swap`` on ``PYTHONPATH`` and ``JITLAB_SWAP`` set (a
subprocess of a swapped test run): swap jitlab's ``load``/``load_inline`` into ``torch.utils.cpp_extension``
the moment that module is first imported, without importing torch earlier than the program does."""

import os
import sys


class _SwapOnImport:
    """A meta-path finder that lets the real finders find ``torch.utils.cpp_extension``, then swaps after it runs."""

    target = "torch.utils.cpp_extension"

    def find_spec(self, name, path=None, target=None):
        if name != self.target:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                run = spec.loader.exec_module

                def exec_module(module, run=run):
                    run(module)
                    sys.meta_path[:] = [f for f in sys.meta_path if f is not self]
                    import jitlab_swap

                    jitlab_swap.install()

                spec.loader.exec_module = exec_module
                return spec
        return None


if os.environ.get("JITLAB_SWAP"):
    sys.meta_path.insert(0, _SwapOnImport())
