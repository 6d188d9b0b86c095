"""jitlab's exceptions: every one says what went wrong and how to fix it."""

from __future__ import annotations

from dataclasses import dataclass, field


class JitlabError(Exception):
    """Base class of every error jitlab raises on purpose."""


class SnippetError(JitlabError, ValueError):
    """A snippet jitlab cannot read: missing file, no kernels, unparsable, unmappable types."""


class ToolchainError(JitlabError, RuntimeError):
    """A missing or mismatched build tool (nvcc, ninja, C++ compiler, CUDA versions)."""


class LaunchError(JitlabError, RuntimeError):
    """A kernel launch or host call that CUDA reported as failed."""


class ArgumentError(JitlabError, TypeError, ValueError):
    """A call with arguments that do not fit: the kernel's signature, or a keyword's type or value (a ``TypeError``
    and a ``ValueError``, so code written against torch's ``load_inline``, which raises the latter, catches it)."""


class FlagError(ArgumentError, RuntimeError):
    """A compiler flag jitlab will not pass: one that only a shell would act on. A ``RuntimeError`` as well,
    as torch's build fails with one for such a flag."""


@dataclass
class Diagnostic:
    """One compiler message, located in the user's file."""

    path: str
    line: int
    column: int | None
    severity: str  # "error", "warning", "fatal error", ...
    message: str

    def location(self) -> str:
        col = f":{self.column}" if self.column else ""
        return f"{self.path}:{self.line}{col}"


@dataclass
class CompileError(JitlabError, RuntimeError):
    """A build that failed. ``str(err)`` shows the first errors with source excerpts. A ``RuntimeError``, as torch's
    ``load_inline`` raises for a failed build.

    Attributes:
        summary: One line: which snippet failed and with which compiler.
        diagnostics: Parsed errors, first first, located in the user's files.
        log: The full compiler output, never truncated.
        excerpt: The rendered first errors with source lines and carets.
    """

    summary: str
    diagnostics: list[Diagnostic] = field(default_factory=list)
    log: str = ""
    excerpt: str = ""

    def __post_init__(self) -> None:
        super().__init__(self.summary, self.diagnostics, self.log, self.excerpt)

    def __str__(self) -> str:
        parts = [self.summary]
        if self.excerpt:
            parts.append(self.excerpt)
        elif self.log:
            tail = self.log.strip().splitlines()[-25:]
            parts.append("\n".join(tail))
        parts.append("(the full compiler output is in this error's .log)")
        return "\n".join(parts)

    def __reduce__(self):  # picklable, so worker processes can send it back
        return (CompileError, (self.summary, self.diagnostics, self.log, self.excerpt))


class CacheError(JitlabError, RuntimeError):
    """A build cache jitlab cannot use: read-only, a file, a full disk, a lock another process holds."""
