"""What every engine's scrape shares: a bounded GET and the whole-request deadline."""

from __future__ import annotations

import httpx

DEFAULT_TIMEOUT_S = 5.0
# One engine's /metrics is about 60 KB and 8 engines about 400 KB: 32 MiB is far past any real
# payload, and small enough that a hostile server cannot exhaust memory.
DEFAULT_MAX_BYTES = 32 * 1024 * 1024


class PayloadTooLarge(Exception):
    pass


def return_freed_memory() -> None:
    """Hand the heap's free pages back to the system (glibc's malloc_trim), where there is glibc.

    A refused oversized body was up to max_bytes of chunks on the C heap; freed, glibc keeps those
    pages, and an agent that met one hostile answer stayed 35 MB bigger for the weeks it runs
    (benchmarks/soak.py measured it). Called on that path alone: it costs a walk of the heap."""
    global _malloc_trim
    if _malloc_trim is None:
        try:
            import ctypes

            _malloc_trim = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _malloc_trim = False  # not glibc: nothing to do
    if _malloc_trim:
        _malloc_trim(0)


_malloc_trim = None


async def get_bounded(client: httpx.AsyncClient, url: str, max_bytes: int) -> httpx.Response:
    """GET that stops reading past max_bytes, so a runaway payload costs bounded memory."""
    async with client.stream("GET", url) as response:
        declared = response.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_bytes:
            raise PayloadTooLarge(int(declared))
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > max_bytes:
                # freed here, not when the traceback lets go of this frame, so the trim finds them free
                chunks.clear()
                return_freed_memory()
                raise PayloadTooLarge(size)
            chunks.append(chunk)
        response._content = b"".join(chunks)  # noqa: SLF001 - httpx's documented buffering slot
        return response


def deadline_s(client: httpx.AsyncClient) -> float:
    """The whole-request deadline: the client's timeout (the --timeout the user gave)."""
    t = client.timeout
    values = [v for v in (t.read, t.connect, t.write, t.pool) if v is not None]
    return max(values) if values else DEFAULT_TIMEOUT_S
