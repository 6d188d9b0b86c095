"""A stand-in for the ``expecttest`` package (PyPI), which torch's test base class subclasses: used by
``jitlab_swap`` only where it is not installed. Expect-test rewriting (``assertExpectedInline`` with
``EXPECTTEST_ACCEPT``) is not here: the JIT-extension tests do not use it."""

import unittest

ACCEPT = False


class TestCase(unittest.TestCase):
    longMessage = True

    def assertExpectedInline(self, actual, expect, skip=0):
        self.assertMultiLineEqual(expect, actual)
