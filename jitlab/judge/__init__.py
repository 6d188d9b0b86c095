"""Judging a built kernel: the reference contract (``refs``), correctness with reasons (``checker``),
timing (``timing``, ``peaks``, ``benchmark``), records and charts (``results``, ``roofline``), and
``jitlab run`` over every kernel (``runner``).
"""
