"""Lock-step twins: a kernel whose block's threads run one after the other between its barriers, in one loop.

A plain run of the CPU emulator runs a block's threads as fibers: thread 0 until its next ``__syncthreads()``, then
thread 1, and so on; when all wait, the barrier opens and the round starts again. A barrier costs each thread a call
and two fiber switches, a third of a tiled matmul's time. The order is fixed, and it is the order a loop over the
threads gives for each stretch of code between two barriers. :func:`twins` writes that loop for every kernel it can,
as a second function right after the kernel (``jitlab_steps_NAME``; the launch shim hands both to the runtime, which
runs the twin in plain runs and the fibers in checked ones):

* the body splits at its ``__syncthreads()`` statements, which may stand in blocks, ``for`` and ``while`` loops and
  ``if``s. Each stretch becomes a loop over the block's threads. A condition holding a barrier is computed by every
  thread; threads that disagree are the barrier divergence the fibers report, and so is a thread that returned
  before a barrier the others reach;
* a variable declared beside the barriers that two stretches use (and a parameter the kernel assigns) gets a slot
  per thread on the fiber's stack, read into a local of the same name when a stretch starts and written back when it
  ends, in assembly (no access hook). Arrays and variables whose address is taken are used in their slot;
* ``__shared__`` arrays, constants with literal values, types and ``static_assert``s move to the twin's top.

Every piece of the user's code keeps its line (``#line``), and the twin starts ``#ifndef JITLAB_NO_STEPS``: a unit
the host compiler rejects is compiled again without the twins, so a twin never stands between a user and the
compiler's message about their own code. What keeps a kernel with the fibers is :mod:`lockstep_rules`' to say, and
a variable beside the barriers declared ``auto``, as a reference, ``volatile``, with braces or with its ``struct``.
A block whose slots would not fit the fiber's stack (``kStepsBytes``) is declined before it runs: fibers again.
"""

from __future__ import annotations

from collections import Counter

from jitlab.jit.engines import plain_reads
from jitlab.jit.engines.lockstep_rules import (CARRIERS, Refused, assigned, check, declared, file_facts, first_barrier,
                                               holds_barrier, is_barrier, statements, text, walk)
from jitlab.jit.parse import line_directive

#: Declarations that go to the twin's top as they are (none has a thread's value).
_TYPES = {"type_definition", "alias_declaration", "static_assert_declaration", "struct_specifier", "class_specifier"}


def _slot_type(decl, declarator) -> str:
    """The C++ type of a slot for ``declarator`` of ``decl`` (a declaration or parameter): its type, the pointee's
    qualifiers, the stars and the array extents; the variable's own ``const`` and ``__restrict__`` dropped."""
    qualifiers = [text(c) for c in decl.children if c.type == "type_qualifier"]
    if any(q == "volatile" for q in qualifiers):
        raise Refused("a volatile variable beside the barriers")
    base = text(decl.child_by_field_name("type"))
    node = declarator.child_by_field_name("declarator") if declarator.type == "init_declarator" else declarator
    stars, extents = 0, []
    while node.type == "pointer_declarator":
        if any(c.type == "type_qualifier" and c.text == b"volatile" for c in node.children):
            raise Refused("a volatile pointer beside the barriers")
        stars, node = stars + 1, node.child_by_field_name("declarator")
    while node.type == "array_declarator":
        extents.insert(0, f"[{text(node.child_by_field_name('size'))}]")
        node = node.child_by_field_name("declarator")
    kept = [q for q in qualifiers if q not in ("const", "constexpr", "__restrict__", "__restrict")] if not stars else \
        [q for q in qualifiers if q not in ("__restrict__", "__restrict", "constexpr")]
    return " ".join([*kept, base]) + "*" * stars + "".join(extents)


class _Twin:
    """One kernel's twin, written from its syntax tree."""

    def __init__(self, fn, src: bytes, path, edits, facts):
        self.fn, self.src, self.path, self.edits, self.facts = fn, src, path, edits, facts
        self.hoisted: list[str] = []
        self.slots: dict[str, tuple[str, str]] = {}  # name -> (type, "copy" or "ref")
        self.counter = 0
        self.returns = False

    # ---- text ----------------------------------------------------------------------------------------
    def render(self, start: int, end: int, extra=()) -> str:
        """The source from ``start`` to ``end`` with the unit's edits inside it (and ``extra``) applied. A twin runs
        in plain runs only, so a read :mod:`~jitlab.jit.engines.plain_reads` rewrote tests its indices alone."""
        return plain_reads.rendered(self.src, [*self.edits, *extra], start, end).replace(f"::jitlab_simt::{plain_reads.PLAIN_READ}(", f"::jitlab_simt::{plain_reads.WITHIN}(") \
            .replace(f"::jitlab_simt::{plain_reads.IN_TENSOR}(", "::jitlab_simt::in_spans(jitlab_spans, ")

    def at(self, node, line: int | None = None) -> str:
        """A new line, and the line directive that places what follows at ``node``'s first line (or ``line``)."""
        return "\n" + line_directive(self.path, node.start_point[0] + 1 if line is None else line)

    def fresh(self) -> int:
        self.counter += 1
        return self.counter

    # ---- the plan: hoisted declarations, slots, and the code around the user's statements -------------
    def hoistable(self, stmt) -> bool:
        if stmt.type in _TYPES:
            return True
        if stmt.type != "declaration":
            return False
        words = {text(c) for c in stmt.children if c.type in ("type_qualifier", "storage_class_specifier")}
        if words & {"__shared__", "static", "extern"}:
            return True
        if words & {"const", "constexpr"}:
            values = [d.child_by_field_name("value") for d in stmt.children_by_field_name("declarator")]
            return all(v is not None and v.type != "initializer_list" and not any(
                n.type in ("identifier", "call_expression", "field_expression") and not text(n).isupper()
                for n in walk(v)) for v in values)
        return False

    def slot_declaration(self, decl) -> str:
        """Give ``decl``'s variables slots; the declaration's text becomes assignments (``x = v, y = w;``)."""
        type_node = decl.child_by_field_name("type")
        if type_node is None or type_node.type in ("placeholder_type_specifier", "auto", "decltype") or \
                b"auto" == type_node.text or b"decltype" in type_node.text or \
                type_node.type in ("struct_specifier", "class_specifier") and \
                type_node.child_by_field_name("body") is not None:
            raise Refused("a variable beside the barriers declared auto, decltype or with its struct")
        declarators = decl.children_by_field_name("declarator")
        extra = [(decl.start_byte, declarators[0].start_byte, b"")]
        for d in declarators:
            got = declared(d)
            if got is None:
                raise Refused("a reference, function or unsized array beside the barriers")
            name, kind = text(got[0]), got[1]
            if self.declared[name] > 1:  # two slots of one name, or a parameter's: one would hide the other
                raise Refused(f"{name} declared twice")
            self.slots[name] = (_slot_type(decl, d), "ref" if kind == "array" or name in self.addressed else "copy")
            if d.type == "init_declarator":
                value = d.child_by_field_name("value")
                if value is None or value.type in ("initializer_list", "argument_list"):
                    raise Refused("a variable beside the barriers initialised with braces or parentheses")
                if kind == "array":
                    raise Refused("an initialised array beside the barriers")
                inner = d.child_by_field_name("declarator")
                extra.append((inner.start_byte, inner.end_byte, got[0].text))
            else:
                extra.append((d.start_byte, d.end_byte, b"(void)0"))
        return self.render(decl.start_byte, decl.end_byte, extra)

    def names_in(self, nodes) -> set:
        return {text(n) for node in nodes for n in walk(node) if n.type == "identifier" and text(n) in self.slots}

    def thread_loop(self, code: str, nodes, lambda_=False) -> str:
        """``code`` (the user's statements for one thread) run for each thread of the block in turn; the loop's own
        code is placed at the first line of ``nodes`` and its end at their last (where a time limit may catch it)."""
        names = sorted(self.names_in(nodes))
        first = min((n.start_point[0] for n in nodes), default=self.fn.start_point[0]) + 1
        last = max((n.end_point[0] for n in nodes), default=self.fn.start_point[0]) + 1
        loads, stores = [], []
        for name in names:
            typ, how = self.slots[name]
            if how == "ref":
                loads.append(f"auto& {name} = jitlab_v_{name}[jitlab_t];")
            else:
                loads.append(f"::jitlab_simt::type_t<{typ}> {name} = ::jitlab_simt::unhooked_read(jitlab_v_{name}"
                             f"[jitlab_t]);")
                stores.append(f"::jitlab_simt::unhooked_write(jitlab_v_{name}[jitlab_t], {name});")
        head = "for (unsigned jitlab_t = 0; jitlab_t < jitlab_nt; ++jitlab_t) { ::jitlab_simt::step(jitlab_t);"
        if self.returns:
            head += " if (::jitlab_simt::unhooked_read(jitlab_done[jitlab_t])) continue;"
        if lambda_:  # a `return` in the stretch ends this thread's lambda; the flag says it returned
            loads.append("bool jitlab_ended = true;")
            code = f"[&]() __attribute__((always_inline)) {{{code}\njitlab_ended = false; }}();"
            stores.append("if (jitlab_ended) { ::jitlab_simt::unhooked_write(jitlab_done[jitlab_t], (unsigned char)1); "
                          "if (jitlab_gone++ == 0) jitlab_first_gone = jitlab_t; }")
        return f"{self.at(self.fn, first)}{head} {' '.join(loads)} {{{code}{self.at(self.fn, last)}}} {' '.join(stores)} }}"

    def region(self, stmts, out: list) -> None:
        if not stmts:
            return
        parts = []
        here = Counter(text(n) for s in stmts for n in walk(s) if n.type == "identifier")
        for s in stmts:
            names = [declared(d) for d in s.children_by_field_name("declarator")] if s.type == "declaration" else []
            if names and all(got is not None and here[text(got[0])] == self.uses[text(got[0])] for got in names):
                parts.append(self.at(s) + self.render(s.start_byte, s.end_byte))  # this stretch's own: no slot
            elif s.type == "declaration" and not self.hoistable(s):
                parts.append(self.at(s) + self.slot_declaration(s))
            else:
                parts.append(self.at(s) + self.render(s.start_byte, s.end_byte))
        returns = any(n.type == "return_statement" for s in stmts for n in walk(s))
        out.append(self.thread_loop("".join(parts), stmts, lambda_=returns))

    def condition(self, node, what: str, out: list, carrier) -> str:
        """Code that computes ``node`` (a condition) in every thread into a fresh variable (1 or 0; -1: no thread
        left), failing the launch where two threads disagree; returns the variable's name."""
        k = self.fresh()
        c, f = f"jitlab_c{k}", f"jitlab_f{k}"
        file = str(self.path).replace("\\", "\\\\").replace('"', '\\"')
        value = "true" if node is None else self.render(node.start_byte, node.end_byte)
        at = self.at(node) if node is not None else "\n"
        code = (f"const bool jitlab_b = static_cast<bool>({at}{value}\n); if ({c} < 0) {{ {c} = jitlab_b; {f} = "
                f"jitlab_t; }} else if (jitlab_b != ({c} > 0)) ::jitlab_simt::steps_parted({f}, jitlab_t, {c}, "
                f"\"{what}\", \"{file}\", {self.line_of(node)}, {self.line_of(first_barrier(carrier))});")
        out.append(f"{self.at(self.fn, self.line_of(node))}int {c} = -1; unsigned {f} = 0; (void){f};")
        out.append(self.thread_loop(code, [node] if node is not None else []))
        return c

    def line_of(self, node) -> int:
        return (node if node is not None else self.fn).start_point[0] + 1

    def barrier_point(self, stmt, out: list) -> None:
        if not self.returns:
            return
        file = str(self.path).replace("\\", "\\\\").replace('"', '\\"')
        out.append(f"{self.at(stmt)}if (jitlab_gone) {{ if (jitlab_gone == jitlab_nt) return 1; ::jitlab_simt::steps_returned("
                   f"jitlab_nt - jitlab_gone, jitlab_first_gone, \"{file}\", {stmt.start_point[0] + 1}); }}")

    def block(self, node, out: list) -> None:
        pending: list = []
        for s in statements(node):
            if self.hoistable(s):
                self.hoisted.append(self.at(s) + self.render(s.start_byte, s.end_byte))
            elif is_barrier(s):
                self.region(pending, out)
                pending = []
                self.barrier_point(s, out)
            elif s.type in CARRIERS and holds_barrier(s):
                self.region(pending, out)
                pending = []
                self.carrier(s, out)
            elif s.type in ("do_statement", "switch_statement", "for_range_loop") and holds_barrier(s):
                raise Refused(f"a barrier inside a {s.type.replace('_', ' ')}")
            else:
                pending.append(s)
        self.region(pending, out)

    def carrier(self, s, out: list) -> None:
        if s.type == "compound_statement":
            out.append("\n{")
            self.block(s, out)
            out.append("\n}")
        elif s.type == "if_statement":
            clause = s.child_by_field_name("condition")
            value = clause.child_by_field_name("value")
            if value is None or clause.child_by_field_name("initializer") is not None or \
                    value.type == "declaration":
                raise Refused("an if holding a barrier with a declaration in its condition")
            c = self.condition(value, "if", out, s)
            out.append(f"{self.at(s)}if ({c} > 0) {{")
            self.block(s.child_by_field_name("consequence"), out)
            out.append("\n}")
            alt = s.child_by_field_name("alternative")
            if alt is not None:
                out.append(" else {")
                self.block(alt.named_children[-1], out)
                out.append("\n}")
        else:  # for, while
            if s.type == "for_statement":
                init = s.child_by_field_name("initializer")
                if init is not None and init.type == "declaration":
                    self.region([init], out)
                elif init is not None:
                    out.append(self.thread_loop(self.at(init) + self.render(init.start_byte, init.end_byte) + ";",
                                                [init]))
                cond = s.child_by_field_name("condition")
            else:
                clause = s.child_by_field_name("condition")
                cond = clause.child_by_field_name("value")
                if cond is None or cond.type == "declaration":
                    raise Refused("a while holding a barrier with a declaration in its condition")
            out.append(f"{self.at(s)}for (;;) {{")
            c = self.condition(cond, "loop", out, s)
            out.append(f"{self.at(s)}if ({c} <= 0) break;")
            self.block(s.child_by_field_name("body"), out)
            update = s.child_by_field_name("update") if s.type == "for_statement" else None
            if update is not None:
                out.append(self.thread_loop(self.at(update) + self.render(update.start_byte, update.end_byte) + ";",
                                            [update]))
            out.append("\n}")

    # ---- the twin --------------------------------------------------------------------------------------
    def write(self) -> tuple[str, str]:
        self.returns, self.declared = check(self.fn, self.facts.syncing)
        fn = self.fn
        decl = fn.child_by_field_name("declarator")
        while decl is not None and decl.type != "function_declarator":
            decl = decl.child_by_field_name("declarator")
        if decl is None or decl.child_by_field_name("declarator").type != "identifier":
            raise Refused("a kernel whose name the parser cannot read")
        name = text(decl.child_by_field_name("declarator"))
        params = decl.child_by_field_name("parameters")
        body = fn.child_by_field_name("body")
        self.uses = Counter(text(n) for n in walk(body) if n.type == "identifier")
        # a variable whose address is taken lives in its slot (the address outlives a stretch)
        self.addressed = {text(n.children[1]) for n in walk(body) if n.type == "pointer_expression" and
                          n.children[0].type == "&" and n.children[1].type == "identifier"}
        # parameters the kernel assigns are each thread's own: slots, filled before the first stretch
        changed = {text(n) for n in walk(body) if n.type == "identifier" and assigned(n, self.facts.by_reference)}
        moved = []
        for p in params.named_children:
            got = declared(p.child_by_field_name("declarator")) if p.type == "parameter_declaration" and \
                p.child_by_field_name("declarator") is not None else None
            if got is None:
                continue
            pname = text(got[0])
            if pname in changed:
                if self.declared[pname] > 1:
                    raise Refused(f"{pname} declared twice")
                self.slots[pname] = (_slot_type(p, p.child_by_field_name("declarator")), "copy")
                moved.append(pname)
        out: list = []
        self.block(body, out)
        if self.facts.macro_words & set(self.slots):
            raise Refused("a macro of the file names a variable beside the barriers")
        code = "".join(out)
        sizes = " + ".join(f"sizeof(::jitlab_simt::type_t<{t}>)" for t, _ in self.slots.values()) or "0"
        top = ["\nconst unsigned jitlab_nt = ::jitlab_simt::steps_threads();",
               "\nconst ::jitlab_simt::Spans jitlab_spans = ::jitlab_simt::tensor_spans(); (void)jitlab_spans;",
               f"\nif ((unsigned long long)jitlab_nt * ({sizes}) > ::jitlab_simt::kStepsBytes) return 0;"]
        top += [f"\n::jitlab_simt::type_t<{t}> jitlab_v_{n}[jitlab_nt];" for n, (t, _) in self.slots.items()]
        if self.returns:
            top.append("\nunsigned char jitlab_done[jitlab_nt]; unsigned jitlab_gone = 0, jitlab_first_gone = 0; "
                       "for (unsigned jitlab_t = 0; jitlab_t < jitlab_nt; ++jitlab_t) "
                       "::jitlab_simt::unhooked_write(jitlab_done[jitlab_t], (unsigned char)0);")
        for pname in moved:
            top.append(f"\nfor (unsigned jitlab_t = 0; jitlab_t < jitlab_nt; ++jitlab_t) "
                       f"::jitlab_simt::unhooked_write(jitlab_v_{pname}[jitlab_t], "
                       f"static_cast<::jitlab_simt::type_t<{self.slots[pname][0]}>>({pname}));")
        head = f"static int jitlab_steps_{name}{self.render(params.start_byte, params.end_byte)} {{"
        twin = (f"\n#ifndef JITLAB_NO_STEPS{self.at(fn)}{head}{''.join(self.hoisted)}{''.join(top)}{code}"
                f"\nreturn 1;\n}}\n#endif\n")
        return name, twin


def twins(root, src: bytes, path, edits) -> tuple[list[tuple[int, int, bytes]], set[str]]:
    """Insertions (at each kernel's end) of the lock-step twins of the file's kernels, and the kernels that have
    one. ``edits`` are the unit's other rewrites, applied inside the twins too."""
    facts = file_facts(root)
    if facts is None:
        return [], set()
    kernels = [n for n in walk(root) if n.type == "function_definition" and
               any(c.type == "__global__" or c.text == b"__global__" for c in n.children)]
    names = Counter(_name(k) for k in kernels)
    out, made = [], set()
    for k in kernels:
        try:
            name, twin = _Twin(k, src, path, edits, facts).write()
        except Refused:
            continue
        if names[name] != 1:
            continue
        out.append((k.end_byte, k.end_byte, (twin + line_directive(path, k.end_point[0] + 1)).encode(
            "utf-8", "surrogateescape")))
        made.add(name)
    return out, made


def _name(fn) -> str | None:
    d = fn.child_by_field_name("declarator")
    while d is not None and d.type != "function_declarator":
        d = d.child_by_field_name("declarator")
    name = d.child_by_field_name("declarator") if d is not None else None
    return text(name) if name is not None and name.type == "identifier" else None


def refusal(root, src: bytes, path, kernel: str) -> str | None:
    """Why ``kernel`` has no twin (None: it has one); for tests and the curious."""
    facts = file_facts(root)
    if facts is None:
        return "the file includes a header of its own, or a macro hides a barrier, warp collective or spin-wait"
    for k in (n for n in walk(root) if n.type == "function_definition" and _name(n) == kernel):
        try:
            _Twin(k, src, path, [], facts).write()
        except Refused as e:
            return str(e)
        return None
    return "no such kernel"
