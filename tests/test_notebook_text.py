"""What jitlab prints in a notebook cell is folded at words (JupyterLab breaks long output lines mid-word)."""

from jitlab.notebook import magic
from jitlab.notebook.text import WIDTH, fold

PROSE = ("jitlab: kernels/saxpy.cu:3: the kernel writes y[i] for i up to 1023 but y has 1000 elements; add the bounds "
         "check `if (i < n)` around the body, or launch ceil(n / 256) blocks of 256 threads and test i against n")


def test_a_long_line_is_broken_at_spaces_with_every_word_kept():
    """A 200-character message becomes lines of at most WIDTH, broken at spaces, continuations indented."""
    folded = fold(PROSE)
    lines = folded.split("\n")
    assert len(lines) > 1 and all(len(line) <= WIDTH for line in lines)
    assert folded.split() == PROSE.split()  # the same words, none cut
    assert all(line.startswith("  ") and not line.startswith("   ") for line in lines[1:])


def test_short_and_indented_lines_and_long_words_keep_their_layout():
    """Short lines and indented ones (a compiler's excerpt) are untouched; a path longer than WIDTH stays whole."""
    excerpt = "    3 |     y[i] = a * x[i];" + " " * 90 + "// a long source line keeps its columns"
    path = "/home/learner/" + "deep/" * 30 + "saxpy.cu"
    text = f"short line\n{excerpt}\nsee {path} for the file"
    lines = fold(text).split("\n")
    assert lines[:2] == ["short line", excerpt]  # an indented line (a compiler excerpt) is not touched
    assert any(path in line for line in lines)  # a word longer than the width stays whole
    assert all(len(line) <= WIDTH for line in lines if line != excerpt and path not in line)


def test_the_magic_prints_its_refusal_folded(capsys):
    """A `%%cuda` line that would rebind a notebook's own name is refused with a message folded at words."""
    name = "a_snippet_name_long_enough_to_make_the_message_wrap"
    magic.run_cell(name, "__global__ void k(float* x) {}\n", {name: 5})
    out = capsys.readouterr().out
    lines = out.strip().split("\n")
    assert len(lines) > 1 and all(len(line) <= WIDTH for line in lines)
    assert f"would rebind {name}, bound in this notebook to a value of type int" in " ".join(out.split())
    assert "--force" in out
