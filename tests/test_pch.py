"""The precompiled torch header: a user's macro that GCC must ignore it for is named, with its cost and fix."""

from __future__ import annotations

import pytest
import torch

import jitlab
from jitlab.jit import pch

GCC_LINE = ("cc1plus: warning: /p/torch-bind-1/jitlab_torch.h.gch: not used because `SCALE' is defined "
            "[-Winvalid-pch]\n")


def test_ignored_header_note_names_the_macros_units_cost_and_fix():
    """GCC's "not used because `SCALE' is defined" becomes one note naming the units, the macro, the cost and a rename."""
    note = pch.ignored_note({"s.cpp": "c++ ...\n" + GCC_LINE, "bind.cpp": GCC_LINE.replace("SCALE", "DEBUG"),
                             "other.cpp": "c++ ...\n"})
    assert note.startswith("s.cpp, bind.cpp compiled without the precompiled torch header")
    assert "`DEBUG`, `SCALE`" in note and "11 s instead of about 3 s" in note and "rename the macro" in note
    assert pch.ignored_note({"s.cpp": "c++ ...\n"}) == ""


@pytest.mark.slow
def test_a_define_torch_uses_is_named_in_the_build_notes(use_shared_cache, write, capfd):
    """defines={"SCALE": 2}: the build works, and its notes (printed too) name `SCALE` and say to rename it."""
    p = write("twice.cpp", """
        #include <torch/extension.h>
        torch::Tensor twice(torch::Tensor x) { return x * SCALE; }
    """)
    m = jitlab.load(p, defines={"SCALE": 2})
    assert m.twice(torch.ones(2)).tolist() == [2.0, 2.0]
    note = next(n for n in m.build.notes if "without the precompiled torch header" in n)
    assert "`SCALE`" in note and "twice.cpp" in note
    assert "the macro `SCALE`" in capfd.readouterr().err
