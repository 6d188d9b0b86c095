"""Watching a snippet file: a callback with the file's new text whenever it changes on disk.

``watchfiles`` (Rust notify: inotify, FSEvents, polling where those fail) in a daemon thread; the
playground reloads, rebuilds and re-checks from it.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path


class Watcher:
    """Calls ``on_change(text)`` from a daemon thread when the file's text on disk changes.

    Editors save by writing a temporary file and renaming it; watching the folder (filtered to the
    file) sees both that and in-place writes. Besides the events, the text is compared every
    ``timeout_ms``, so a change made before the watch was set up is not missed.

    Args:
        path: The file.
        on_change: Called with the new text; exceptions are kept in ``errors``, the watch goes on.
        known: Returns the text the caller already has (its own saves): equal text is no change.
        force_polling: ``watchfiles``' polling instead of inotify (network or odd file systems);
            ``None`` lets watchfiles decide (``WATCHFILES_FORCE_POLLING`` also works).
        poll_delay_ms: Polling interval when polling.
        timeout_ms: The periodic comparison's interval.
    """

    def __init__(self, path: str | Path, on_change, *, known=lambda: None, force_polling: bool | None = None,
                 poll_delay_ms: int = 100, timeout_ms: int = 1000):
        self.path = Path(path).absolute()
        self.on_change, self.known = on_change, known
        self.force_polling, self.poll_delay_ms, self.timeout_ms = force_polling, poll_delay_ms, timeout_ms
        self.ready = threading.Event()  # set once the watch is set up (its first wake-up)
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._seen: str | None = None  # the last text compared, so an unchanged file is reported once

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> Watcher:
        if not self.alive:
            # What the caller had when the watch began: while its own save is under way (what it knows is the
            # new text, the file still holds this one) the file has not changed. A change made before the
            # watch began differs from it, and is reported.
            self._seen = self.known()
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name=f"jitlab-watch-{self.path.name}", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop watching; waits up to ``timeout`` seconds for the thread to end."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _is_ours(self, change, path: str) -> bool:
        # Only the folder's direct children are reported (recursive=False); comparing names is
        # immune to symlinked folders being reported by their other spelling.
        return Path(path).name == self.path.name

    def _run(self) -> None:
        import watchfiles

        try:
            for _ in watchfiles.watch(self.path.parent, watch_filter=self._is_ours, stop_event=self._stop,
                                      rust_timeout=self.timeout_ms, yield_on_timeout=True, step=50,
                                      force_polling=self.force_polling, poll_delay_ms=self.poll_delay_ms,
                                      recursive=False):
                self.ready.set()
                self._compare()
        except Exception as e:  # e.g. the folder was deleted: keep the reason, end the watch
            self.errors.append(e)
        finally:
            self.ready.set()

    def _compare(self) -> None:
        text = self._settled_text()
        if text is None:  # between an editor's delete and rename, or deleted: wait for the next change
            return
        if text == self.known() or text == self._seen:
            self._seen = text
            return
        self._seen = text
        try:
            self.on_change(text)
        except Exception as e:  # a failing callback must not end the watch; the error is kept
            self.errors.append(e)

    def _settled_text(self, pause: float = 0.05, tries: int = 20) -> str | None:
        """The file's text once two reads ``pause`` apart agree: a writer that truncates and then
        writes (``Path.write_text``, many editors) is not caught half-way, as an empty file."""
        last = None
        for _ in range(tries):
            try:
                text = self.path.read_text(encoding="utf-8", errors="surrogateescape")
            except OSError:
                return None
            if text == last:
                return text
            last = text
            time.sleep(pause)
        return last
