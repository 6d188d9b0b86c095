"""Work in other processes: the warm isolated worker (``isolate`` in the parent, ``jobs`` in the
child), one job under compute-sanitizer (``sanitizer``) or Nsight Compute (``profiler``), and the
plumbing they share (``proc``).
"""
