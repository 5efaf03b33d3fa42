"""The stored turns' texts, outside the heap, for the turn index (turn_index.TurnIndex.texts).

A search shows about ten turns and needs their texts. Kuzu 0.11.3 reads a turn by key in
~0.22 ms at 20,000 turns (~2 ms a search, 0.7 ms at 2,000: a share of the search's growth
with the bank), and no query reads ten rows by key for less. Holding every text in memory
would cost ~1.5 KB a turn of the worker's resident size. So the texts go to a temporary file
in the bank's folder as the index gets them (its build already reads every text), and a
search reads its ten by offset from the page cache.

The file is unlinked when made (nothing is left on disk after the process, however it ends)
and written anew with each index: it is a copy, never the record. A forgotten turn's bytes
are overwritten with zeros at once."""
from __future__ import annotations

import logging
import tempfile
import threading
from pathlib import Path

log = logging.getLogger("memoryplus.turn_texts")


class TurnTexts:
    """Texts appended to one file, read and erased by where they are (offset, size in bytes):
    the turn index keeps each slot's."""

    def __init__(self, folder: Path):
        self._file = tempfile.TemporaryFile(dir=folder, prefix="turn-texts-")
        self._lock = threading.Lock()       # a seek and its read or write go together
        self._end = 0                       # where the next text goes

    @classmethod
    def open(cls, folder: Path) -> TurnTexts | None:
        """A store in `folder`, or None when no file can be made there (the search then reads
        the texts it shows from the bank, as before)."""
        try:
            return cls(folder)
        except OSError as exc:
            log.warning("the turns' texts are read from the bank: no file in %s (%s)", folder, exc)
            return None

    def put(self, text: str) -> tuple[int, int]:
        """Where `text` was written; size 0 if it was not (read from the bank then)."""
        data = text.encode("utf-8", "surrogatepass")
        try:
            with self._lock:            # (a seek writes out what the buffer holds)
                self._file.seek(self._end)
                self._file.write(data)
        except (OSError, ValueError) as exc:   # a full disk: this turn's text is read from the bank
            log.warning("a turn's text was not copied (%s): it is read from the bank", exc)
            return 0, 0
        at, self._end = self._end, self._end + len(data)
        return at, len(data)

    def get(self, at: int, size: int) -> str | None:
        """The text written there; None if there is none (size 0) or it cannot be read."""
        if not size:
            return None
        try:
            with self._lock:
                self._file.seek(at)
                data = self._file.read(size)
        except (OSError, ValueError) as exc:     # ValueError: closed with its bank
            log.warning("a turn's text could not be read from its copy (%s): read from the bank", exc)
            return None
        return data.decode("utf-8", "surrogatepass") if len(data) == size else None

    def erase(self, at: int, size: int) -> None:
        """The bytes there overwritten with zeros: a forgotten turn's text is gone from the copy."""
        if not size or self._file.closed:
            return                      # (a closed file's bytes went with it: it was unlinked)
        with self._lock:        # an error here is the removal's: the text must not stay
            self._file.seek(at)
            self._file.write(bytes(size))
            self._file.flush()

    def close(self) -> None:
        """The file closed (a folder with a file open cannot be removed on Windows); a read
        after gives None."""
        self._file.close()

    def __del__(self):
        try:
            self._file.close()
        except Exception:   # at interpreter exit the module's globals may be gone
            pass
