"""The notebook layer, thin over plain functions: the playground (``session`` without widgets,
``watch``, ``report``, ``panel`` and its ``editor``), the ``%%cuda``/``%%cpp`` magics (``magic``),
the lessons' exercises (``exercises``) and running the lesson notebooks (``lessons``).
"""
