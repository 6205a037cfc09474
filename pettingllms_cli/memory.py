"""Keep resident memory close to what is in use: glibc otherwise keeps freed heap memory.

Several agents train one after another on one base; each frees its activations, and without
these calls the freed memory stays in the process, so N agents would look like N copies.
"""

from __future__ import annotations

import ctypes

M_MMAP_THRESHOLD = -3  # mallopt parameter: allocations above it are mmap-ed and returned on free


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc (macOS, musl): nothing to tune
        return None


def return_large_frees_to_os(threshold: int = 65536) -> None:
    """Serve allocations above `threshold` bytes with mmap, so freeing them returns the memory."""
    libc = _libc()
    if libc is not None and hasattr(libc, "mallopt"):
        libc.mallopt(M_MMAP_THRESHOLD, threshold)


def release_freed_memory() -> None:
    """Give freed heap memory back to the OS now."""
    libc = _libc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)
