"""The cache: `clean` deletes only what jitlab made, and `find_or_make` makes an unusable entry once more (CPU)."""

from __future__ import annotations

import dataclasses
import os
import time

import pytest

import jitlab
from jitlab import config
from jitlab.jit import cache as jcache
from jitlab.jit import cachedir, locks
from jitlab.jit.plan import Manifest


def fake_build(root, name: str, manifest: bool = True):
    """A build folder as jitlab leaves one: an artifact and (when complete) the manifest."""
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "x.so").write_bytes(b"\0" * 8)
    if manifest:
        jcache.write_manifest(folder, Manifest(artifact="x.so", size=8, sha256=""))
    return folder


def user_files(root):
    """Files a user keeps in the folder their JITLAB_CACHE_DIR wrongly points at."""
    (root / "thesis.tex").write_text("\\chapter{1}")
    (root / "src").mkdir()
    (root / "src" / "main.c").write_text("int main() {}")
    (root / "notes_0123456789abcdef").mkdir()  # named like a build, but no manifest and no jitlab tag
    (root / "notes_0123456789abcdef" / "todo.txt").write_text("keep me")


def test_clean_keeps_a_users_files_in_the_cache_folder(tmp_path, monkeypatch, write):
    """A real build is removed; the user's files beside it survive and are listed."""
    docs = tmp_path / "Documents"
    docs.mkdir()
    user_files(docs)
    monkeypatch.setenv("JITLAB_CACHE_DIR", str(docs))
    snippet = write("twice.cpp", "void twice(float* y, const float* x, int n) { for (int i = 0; i < n; ++i) y[i] = 2 * x[i]; }")
    b = jitlab.build(snippet)
    assert b.folder.parent == docs and b.folder.is_dir()
    done = jitlab.clean()
    assert done.removed >= 1 and not b.folder.exists()
    assert (docs / "thesis.tex").read_text() == "\\chapter{1}" and (docs / "src" / "main.c").is_file()
    assert (docs / "notes_0123456789abcdef" / "todo.txt").read_text() == "keep me"
    assert {p.name for p in done.left} >= {"thesis.tex", "src", "notes_0123456789abcdef"}


def test_clean_through_a_symlinked_cache_keeps_user_files(tmp_path, monkeypatch):
    """JITLAB_CACHE_DIR as a link to a folder of user files: builds go, the user's files stay."""
    real = tmp_path / "projects"
    real.mkdir()
    user_files(real)
    build = fake_build(real, "k_0123456789abcdef")
    link = tmp_path / "cache_link"
    link.symlink_to(real)
    monkeypatch.setenv("JITLAB_CACHE_DIR", str(link))
    done = jitlab.clean(older_than_days=0)
    assert done.removed == 1 and not build.exists()
    assert (real / "src" / "main.c").is_file() and (real / "notes_0123456789abcdef").is_dir()


def test_a_cache_jitlab_creates_is_tagged_and_its_unfinished_builds_are_cleaned(tmp_path, monkeypatch):
    """A cache folder jitlab creates carries CACHEDIR.TAG; there an unfinished build (no manifest) is jitlab's."""
    root = tmp_path / "new_cache"
    monkeypatch.setenv("JITLAB_CACHE_DIR", str(root))
    with locks.build_lock("k_0123456789abcdef"):
        pass
    assert cachedir.is_tagged(root)
    unfinished = fake_build(root, "k_fedcba9876543210", manifest=False)
    assert jitlab.clean().removed == 1 and not unfinished.exists()


def test_clean_keeps_precompiled_headers_unless_asked(cache):
    """The precompiled torch headers (minutes to make) survive `clean`; headers=True removes them."""
    fake_build(cache, "k_0123456789abcdef")
    gch = fake_build(cache / "pch", "torch-host-0123456789abcdef")
    assert jitlab.clean().removed == 1 and gch.is_dir()
    assert jitlab.clean(headers=True).removed == 1 and not gch.exists()


def test_clean_removes_the_object_caches_records_with_its_builds(cache):
    """The object cache's records about builds (the header set a unit needed, NVRTC's refusal of a program) go
    with a full clean and are not listed as someone else's; an age keeps the fresh ones."""
    hint, refused = cache / "objects" / "hints" / "k.k.host.cpp.headers", cache / "objects" / "refused" / "p.json"
    fake_build(cache / "objects", "k.host.cpp-0123456789abcdef")
    for record in (hint, refused):
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text("bind\n")
    old = time.time() - 3 * 86400
    os.utime(hint, (old, old))
    done = jitlab.clean(older_than_days=1)
    assert not hint.exists() and refused.is_file() and not done.left
    done = jitlab.clean()
    assert not refused.exists() and done.removed == 1 and not done.left


def test_clean_leaves_a_build_in_progress(cache):
    """A build whose lock another holder has is left and counted as busy."""
    build = fake_build(cache, "k_0123456789abcdef")
    with cache_lock_held(cache, "k_0123456789abcdef"):
        done = jitlab.clean()
    assert done.removed == 0 and done.busy == 1 and build.is_dir()


def test_older_than_keeps_recent_builds(cache):
    """--older-than-days keeps a build used since then."""
    old, new = fake_build(cache, "a_0123456789abcdef"), fake_build(cache, "b_0123456789abcdef")
    past = time.time() - 3 * 86400
    os.utime(old, (past, past))
    assert jitlab.clean(older_than_days=1).removed == 1 and new.is_dir() and not old.exists()


def test_negative_age_is_refused(cache, jitlab_cli):
    """A negative age would delete everything: refused, by the function and by the command."""
    build = fake_build(cache, "k_0123456789abcdef")
    with pytest.raises(ValueError, match="0 or more"):
        jitlab.clean(older_than_days=-1)
    r = jitlab_cli("clean", "--older-than-days", "-1")
    assert r.returncode == 2 and "0 or more" in r.stderr and build.is_dir()


def test_clean_command_lists_what_it_left(cache, jitlab_cli):
    """`jitlab clean` says what it removed, that it kept the headers, and what it did not make."""
    fake_build(cache, "k_0123456789abcdef")
    fake_build(cache / "pch", "torch-host-0123456789abcdef")
    (cache / "mine.txt").write_text("x")
    r = jitlab_cli("clean")
    assert r.returncode == 0, r.stderr
    assert "removed 1 build folder " in r.stdout and "kept the precompiled torch headers" in r.stdout
    assert "left 1 item jitlab did not make: mine.txt" in r.stdout


class cache_lock_held:
    """Hold a build's lock the way another process's build does (a second open file description)."""

    def __init__(self, root, name):
        self.path = root / f"{name}.lock"

    def __enter__(self):
        import fcntl

        self.f = open(self.path, "a+")
        fcntl.flock(self.f, fcntl.LOCK_EX)

    def __exit__(self, *exc):
        self.f.close()


# ---- what reaches the compiler ----------------------------------------------------------------
def test_no_shell_command_in_a_define_or_flag_runs(cache, write, tmp_path):
    """A define or flag holding `; touch FILE` is one argument to the compiler, never a shell command."""
    snippet = write("fill.cpp", "void fill(float* y, int n) { for (int i = 0; i < n; ++i) y[i] = V; }")
    planted = [tmp_path / "pwned1", tmp_path / "pwned2", tmp_path / "pwned3"]
    for attempt in ({"defines": {"V": f"1; touch {planted[0]}; echo"}},
                    {"defines": {"V": "`touch " + str(planted[1]) + "`"}},
                    {"defines": {"V": 2}, "cflags": [f"-O1;touch {planted[2]}"]}):
        with pytest.raises(jitlab.JitlabError):
            jitlab.load(snippet, **attempt)
    assert not any(p.exists() for p in planted)


def test_a_define_with_spaces_and_quotes_is_one_macro(cache, write):
    """A value with spaces and quotes reaches the code as written (one macro, no shell word-splitting)."""
    import torch

    snippet = write("fill2.cpp", """
        #include <cstring>
        void fill2(float* y, int n) { for (int i = 0; i < n; ++i) y[i] = std::strlen(WORD) + V; }
    """)
    m = jitlab.load(snippet, defines={"WORD": '"a b c"', "V": "(1 + 1)"})
    y = torch.zeros(3)
    m.fill2(y, 3)
    assert y.tolist() == [7.0, 7.0, 7.0]


def test_bool_defines_are_1_and_0(cache, write):
    """defines={'ON': True} is -DON=1, so `#if ON` is true; False is 0."""
    import torch

    snippet = write("flag.cpp", """
        void flag(float* y) {
        #if ON && !OFF
            y[0] = 1;
        #else
            y[0] = -1;
        #endif
        }
    """)
    y = torch.zeros(1)
    jitlab.load(snippet, defines={"ON": True, "OFF": False}).flag(y)
    assert y.item() == 1.0


@pytest.mark.parametrize("defines, said", [({"2FAST": 1}, "C identifier"), ({"A B": 1}, "C identifier"),
                                           ({"X": "1\n#include <evil>"}, "one line")])
def test_bad_defines_are_refused_before_any_build(cache, write, defines, said):
    """A macro name that is not an identifier, or a value with a line break, is refused with the fix."""
    snippet = write("d.cpp", "void d(float* y) { y[0] = 1; }")
    with pytest.raises(jitlab.SnippetError, match=said):
        jitlab.build(snippet, defines=defines)
    assert not cache.exists() or not any(cache.iterdir())


@pytest.mark.slow
def test_arch_may_be_a_number(cache, write):
    """arch=90 and arch=[75, 90] are sm_90 and sm_75, sm_90 (no TypeError from inside)."""
    snippet = write("a.cu", "__global__ void ones(float* y) { y[threadIdx.x] = 1; }")
    assert jitlab.build(snippet, arch=90, compile_only=True, engine="nvcc").archs == ["sm_90"]
    assert jitlab.build(snippet, arch=[75, 90], compile_only=True, engine="nvcc").archs == ["sm_75", "sm_90"]


@pytest.mark.parametrize("name", ["a", "e", "stream", "smem", "gx", "out", "a0"])
def test_kernel_names_never_clash_with_the_generated_shims(cache, write, name):
    """A kernel named like a shim's own variables (a, e, stream, …) compiles: the shim's names are prefixed."""
    snippet = write(f"{name}.cu", f"__global__ void {name}(float* y) {{ y[threadIdx.x] = 1; }}")
    assert jitlab.build(snippet, arch="sm_75", compile_only=True, engine="nvcc").resources[name]["sm_75"]


# ---- whose files the cache trusts -------------------------------------------------------------
def tiny(write):
    return write("one.cpp", "void one(float* y) { y[0] = 1; }")


def test_a_world_writable_cache_is_refused(tmp_path, monkeypatch, write):
    """A cache folder anyone may write (a /tmp folder, mode 777) is refused with the fix, nothing built."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("JITLAB_CACHE_DIR", str(shared))
    with pytest.raises(jitlab.CacheError, match=r"anyone may write it \(mode 777\).*JITLAB_CACHE_GROUP"):
        jitlab.build(tiny(write))
    assert list(shared.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="making a folder another user's needs root")
def test_a_cache_of_another_user_is_refused(tmp_path, monkeypatch, write):
    """A cache folder another user owns (one who could plant a build) is refused, naming the owner."""
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 4242, 4242)
    monkeypatch.setenv("JITLAB_CACHE_DIR", str(theirs))
    with pytest.raises(jitlab.CacheError, match="belongs to uid 4242, not to you"):
        jitlab.build(tiny(write))


@pytest.mark.skipif(os.geteuid() != 0, reason="making a build folder another user's needs root")
def test_a_planted_build_is_not_loaded(cache, write):
    """A build folder another user owns inside the cache (a planted .so) is refused, not loaded."""
    b = jitlab.build(tiny(write))
    os.chown(b.folder, 4242, 4242)
    with pytest.raises(jitlab.CacheError, match="will not load the cached build"):
        jitlab.load(tiny(write))


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to a group needs root")
def test_a_team_cache_needs_its_group_named(tmp_path, monkeypatch, write):
    """A group-writable cache is refused until JITLAB_CACHE_GROUP names its group, then used."""
    import grp

    team = tmp_path / "team"
    team.mkdir()
    gid = grp.getgrnam("users").gr_gid
    os.chown(team, os.geteuid(), gid)
    team.chmod(0o2775)
    monkeypatch.setenv("JITLAB_CACHE_DIR", str(team))
    with pytest.raises(jitlab.CacheError, match="group users may write it"):
        jitlab.build(tiny(write))
    monkeypatch.setenv("JITLAB_CACHE_GROUP", "users")
    assert jitlab.build(tiny(write)).folder.parent == team


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to a group needs root")
@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_a_team_cache_gives_the_team_what_jitlab_makes(tmp_path, monkeypatch, write, umask):
    """In a setgid 2775 team cache, the lock, the build folder, the manifest and the artifact jitlab makes
    are the group's to read and write (folders to enter), whatever the umask."""
    import grp
    import stat

    team = tmp_path / "team"
    team.mkdir()
    os.chown(team, os.geteuid(), grp.getgrnam("users").gr_gid)
    team.chmod(0o2775)
    monkeypatch.setenv("JITLAB_CACHE_DIR", str(team))
    monkeypatch.setenv("JITLAB_CACHE_GROUP", "users")
    old = os.umask(umask)
    try:
        b = jitlab.build(tiny(write))
    finally:
        os.umask(old)
    lock = team / f"{b.folder.name}.lock"
    made = {lock: 0o060, b.folder: 0o070, b.folder / jcache.MANIFEST: 0o060, b.artifact: 0o060}
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in made}
    assert all(modes[p.name] & bits == bits for p, bits in made.items()), {k: oct(v) for k, v in modes.items()}
    assert b.folder.stat().st_mode & stat.S_ISGID and not any(m & 0o002 for m in modes.values())


def test_a_planted_lock_link_truncates_nothing(cache, write, tmp_path):
    """A symbolic link at a build's lock path is refused; the file it points to is untouched."""
    b = jitlab.build(tiny(write))
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    snippet = write("two.cpp", "void two(float* y) { y[0] = 2; }")
    from jitlab.jit import builder

    plan, archs, parts = builder.prepare(snippet, jitlab.Options())
    name = jcache.module_name(plan.stem, jcache.build_key(parts))
    (cache_dir := b.folder.parent).joinpath(f"{name}.lock").symlink_to(victim)
    with pytest.raises(jitlab.CacheError, match="symbolic link"):
        jitlab.build(snippet)
    assert victim.read_text() == "precious" and cache_dir.exists()


def test_a_manifest_pointing_outside_its_entry_is_not_followed(cache, write, tmp_path):
    """A manifest whose artifact is `../elsewhere.so` (size and hash matching) is a corrupt entry: rebuilt."""
    b = jitlab.build(tiny(write))
    outside = b.folder.parent / "elsewhere.so"
    outside.write_bytes(b.artifact.read_bytes())
    jcache.write_manifest(b.folder, dataclasses.replace(b.manifest, artifact="../elsewhere.so"))
    with pytest.warns(UserWarning, match="not a file of the build's own folder"):
        again = jitlab.build(tiny(write))
    assert not again.cached and again.manifest.artifact != "../elsewhere.so"


def test_a_thread_waiting_on_a_sibling_thread_says_nothing(cache, capfd):
    """A build waiting for the same build in another thread of this process prints no 'waiting for' lines."""
    import threading

    from jitlab.jit import locks

    held = threading.Event()

    def first():
        with locks.build_lock("k_0123456789abcdef"):
            held.set()
            time.sleep(0.6)

    t = threading.Thread(target=first)
    t.start()
    held.wait(5)
    with locks.build_lock("k_0123456789abcdef", on_wait=lambda: print("on_wait called")):
        pass
    t.join()
    out, err = capfd.readouterr()
    assert "waiting for" not in err and "on_wait called" not in out


def test_a_long_stem_is_shortened_readably_with_a_hash():
    """A 250-character stem keeps its start and ends with a hash: the module name fits a folder name; two differ."""
    a, b = jcache.module_name("x" * 249 + "a", "0" * 16), jcache.module_name("x" * 249 + "b", "0" * 16)
    assert a.startswith("x" * 30) and a.endswith("_" + "0" * 16) and len(a.encode()) <= jcache.STEM_BYTES + 17
    assert a != b and a.isidentifier() and jcache.module_name("saxpy", "0" * 16) == "saxpy_" + "0" * 16
    assert len(jcache.module_name("é" * 200, "0" * 16).encode()) <= jcache.STEM_BYTES + 17


def test_a_snippet_with_a_250_character_name_builds_and_loads(cache, write):
    """A snippet file named with 250 characters builds into a folder whose name fits, and its function runs."""
    m = jitlab.load(write("k" * 250 + ".cpp", "int seven() { return 7; }\n"))
    assert m.seven() == 7 and len(m.build.folder.name) < 100


def counting_make():
    """A ``make`` for :func:`jcache.find_or_make` that writes a small artifact and counts its calls."""
    calls = []

    def make(name, folder):
        calls.append(name)
        (folder / "x.so").write_bytes(b"library")
        return jcache.made(folder / "x.so")

    return make, calls


def test_a_found_entry_that_cannot_be_used_is_made_once_more(tmp_path):
    """With rebuild_once, an entry found in the cache that use() finds unusable is emptied, made again and used."""
    make, calls = counting_make()
    jcache.find_or_make("lib_0123456789abcdef", make, root=tmp_path)

    def use(entry):
        if entry.cached:
            raise jcache.Unusable("cannot use it", "could not be loaded (invalid ELF header)")
        return ("used", entry.cached)

    with pytest.warns(UserWarning, match=r"cached build lib_0123456789abcdef could not be loaded \(invalid ELF header\); rebuilding"):
        got = jcache.find_or_make("lib_0123456789abcdef", make, root=tmp_path, use=use, rebuild_once=True)
    assert got == ("used", False) and len(calls) == 2


def test_an_entry_made_just_now_that_cannot_be_used_is_an_error(tmp_path):
    """An entry made by this call that use() cannot use raises use's error: it is not made a second time."""
    make, calls = counting_make()

    def use(entry):
        raise jcache.Unusable("jitlab: lib was built but could not be loaded", "could not be loaded")

    with pytest.raises(jitlab.ToolchainError, match="was built but could not be loaded"):
        jcache.find_or_make("lib_0123456789abcdef", make, root=tmp_path, use=use, rebuild_once=True)
    assert len(calls) == 1


def test_without_rebuild_once_an_unusable_entry_is_an_error(tmp_path):
    """Without rebuild_once, a found entry that use() cannot use raises; nothing is made again."""
    make, calls = counting_make()
    jcache.find_or_make("lib_0123456789abcdef", make, root=tmp_path)

    def use(entry):
        raise jcache.Unusable("jitlab: lib was built but could not be loaded", "could not be loaded")

    with pytest.raises(jcache.Unusable):
        jcache.find_or_make("lib_0123456789abcdef", make, root=tmp_path, use=use)
    assert len(calls) == 1



def test_a_manifest_is_written_from_its_dataclass_with_the_format_and_unknown_deps(tmp_path):
    """write_manifest writes a Manifest's record with jitlab's format and `deps` null when unknown; it reads back the same."""
    folder = tmp_path / "entry"
    folder.mkdir()
    (folder / "x.so").write_bytes(b"\0" * 8)
    record = jcache.write_manifest(folder, dataclasses.replace(jcache.made(folder / "x.so", engine="nvcc"), deps=None))
    assert record["deps"] is None and record["format"] == config.FORMAT_VERSION and "read" not in record
    assert jcache.read_manifest(folder) == record
    assert Manifest.from_record(record).engine == "nvcc"
