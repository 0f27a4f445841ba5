"""A recording's lines: its gzip members inflated and split, up to any damage (the reader's first
step, and the index's)."""

from __future__ import annotations

import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

from specwatch.recording.format import GZIP_MAGIC, MAX_HEADER_BYTES, READ_CHUNK, RecordingError

__all__ = ["iter_lines"]


def iter_lines(path: Path, warnings: list[str], start: int = 0,
               member_offsets: list[int] | None = None) -> Iterator[tuple[int, bytes]]:
    """(member index, line) for every complete line, across gzip members, from byte `start` (the
    beginning of a member, as in a RecordingIndex; members are counted from there). The byte offset
    of each member met is appended to `member_offsets` when given.

    Damage (a corrupt or truncated member) ends the iteration with a warning: what came before it
    was already yielded. A line cut off by truncation is dropped.
    """
    try:
        f = open(path, "rb")
    except OSError as exc:
        raise RecordingError(f"cannot open {path}: {exc.strerror or exc}") from None
    with f:
        first = f.read(2)
        if not first:
            raise RecordingError(f"{path} is empty: it is not a recording (nothing was ever written to it)")
        if first != GZIP_MAGIC:
            raise RecordingError(f"{path} is not a specwatch recording (it is not gzip-compressed)")
        if start:
            f.seek(start)
            if f.read(2) != GZIP_MAGIC:
                raise RecordingError(f"{path} changed since it was indexed: no part begins at byte {start}")
        f.seek(start)
        consumed = start  # the file's bytes read so far
        if member_offsets is not None:
            member_offsets.append(start)
        member = 0
        decompressor = zlib.decompressobj(31)
        fed = False  # whether the current member has been given any bytes
        seen_first_line = False
        partial = b""
        # The next chunk inflates in a worker thread while this one's lines are read: zlib lets go of
        # the GIL while it inflates, a tenth of a headless replay that then runs beside the reading.
        inflating = ThreadPoolExecutor(max_workers=1, thread_name_prefix="specwatch-inflate")
        abandoned = False  # closed before its end, perhaps by the garbage collector in any thread
        try:
            chunk = f.read(READ_CHUNK)
            consumed += len(chunk)
            job = inflating.submit(decompressor.decompress, chunk) if chunk else None
            fed = bool(chunk)
            while job is not None:
                try:
                    data = job.result()
                except zlib.error as exc:
                    if member == 0 and not seen_first_line:
                        raise RecordingError(f"{path} is not a readable recording: its compressed data are "
                                             f"corrupt ({exc})") from None
                    warnings.append(f"{path} is damaged in part {member + 1} ({exc}): replayed up to the damage")
                    return
                if not seen_first_line and (partial + data)[:1] not in (b"", b"{"):
                    raise RecordingError(f"{path} is not a specwatch recording (a gzip file, but not of JSON lines)")
                lines = (partial + data).split(b"\n")
                partial = lines.pop()
                lines_member = member
                if lines:
                    seen_first_line = True
                elif len(partial) > MAX_HEADER_BYTES and not seen_first_line:
                    raise RecordingError(f"{path} is not a specwatch recording (no header line)")
                # what comes next, worked out before this chunk's lines are read so that it inflates
                # meanwhile: the rest of this member, or the next member
                unreadable = False
                pending = b""
                if decompressor.eof:
                    rest = decompressor.unused_data
                    if partial:
                        warnings.append(f"{path}: part {member + 1} ends inside a line; that line was dropped")
                        partial = b""
                    member += 1
                    decompressor = zlib.decompressobj(31)
                    fed = False
                    if rest:
                        if rest[:2] != GZIP_MAGIC[:len(rest[:2])]:
                            warnings.append(f"{path} has unreadable data after part {member}: ignored")
                            unreadable = True
                        else:
                            pending = rest
                            if member_offsets is not None:
                                member_offsets.append(consumed - len(rest))
                job = None
                if not unreadable:
                    chunk = pending
                    if not chunk:
                        chunk = f.read(READ_CHUNK)
                        consumed += len(chunk)
                    if chunk:
                        job = inflating.submit(decompressor.decompress, chunk)
                        fed = True
                for line in lines:
                    if line:
                        yield lines_member, line
                if unreadable:
                    return
        except GeneratorExit:
            abandoned = True
            raise
        finally:
            # A reading read to its end (or to damage) is in its reader's thread with no chunk in
            # flight: the worker is joined, so no thread outlives the reading. An abandoned one is
            # not waited for: a reading dropped in a reference cycle may be finalised by the garbage
            # collector in any thread, its own worker's included; that worker ends after its chunk.
            inflating.shutdown(wait=not abandoned, cancel_futures=True)
        if fed and not decompressor.eof:
            # the last member never finished: a recorder still running, killed, or a cut copy
            if partial:
                warnings.append(f"{path} is truncated (its last line is incomplete and was dropped): "
                                "replayed up to the damage")
            else:
                warnings.append(f"{path} ends without its closing marker (the recorder was stopped abruptly "
                                "or is still running): replayed everything written")
