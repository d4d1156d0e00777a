"""Whether a checkpoint file's bytes are whole: the formats checkpoints are made of.

A program that dies in the middle of a save leaves a prefix of a file behind, and a program
that writes in place (``torch.save(state, "ckpt.pt")``) leaves it under the name of a good one.
The settle time cannot tell a prefix from a file (a big save pauses), so before a capture of a
directory-contract program every file it takes is checked here against its format. Each check
reads a few bytes at the head or the tail, which the capture reads again anyway:

- a zip archive (what ``torch.save`` writes: ``.pt``, ``.pth``, ``.bin``, ``.ckpt``, and
  Accelerate's ``.pkl`` files) ends with its central directory, written after every member;
- a ``.safetensors`` file is an 8-byte header length, the JSON header, then every tensor's bytes:
  it holds at least as many bytes as the header says;
- a pickle of protocol 2 or later (``.pkl``, ``.pickle``, a torch distributed checkpoint's
  ``.metadata``: they begin with the PROTO opcode) ends with the STOP opcode; a ``.pkl`` of
  another format (a compressed ``joblib.dump``) is the program's own;
- a hidden temporary file (``.tmp*``, ``*.tmp``, ``*.partial``, ``*~``: safetensors, fsspec and
  editors write them and rename them into place) means a write is under way.

Any other file passes: its format is the program's own, and the settle time and the time rule
(nothing that changed just before a death by signal) are what protect it.

Passing says only that no tear was seen in the bytes read. :func:`whole` asks more: whether
the format's own records account for every byte of the file, so that no prefix of a longer
write could pass. It is what lets a file written just before a death by signal be taken
(:mod:`nodus.stages.completeness`):

- a zip archive: its end record closes the file, and its central directory lists as many
  members as the end record says, each with its local header where the directory puts it
  and its bytes before the directory (member checksums are not read: that would read the file
  twice; a prefix of a longer archive has no such directory at its end);
- a safetensors file: the tensors' bytes end exactly at the file's end;
- a pickle (protocol 2 or later, at most :data:`PICKLE_READ_LIMIT` bytes): its opcodes, read
  without running them, end with STOP at the file's last byte;
- a JSON object or array (a Trainer's ``trainer_state.json``): it parses (a prefix of one never
  does).

A file of any other format is never proven whole here.
"""

from __future__ import annotations

import io
import json
import os
import posixpath
import struct
from collections.abc import Iterator

__all__ = ["CHECKED_SUFFIXES", "PICKLE_READ_LIMIT", "temporary", "torn", "whole"]

ZIP_SUFFIXES = frozenset({".pt", ".pth", ".bin", ".ckpt", ".tar", ".pkl", ".pickle"})
PICKLE_SUFFIXES = frozenset({".pkl", ".pickle"})
SAFETENSORS_SUFFIX = ".safetensors"
CHECKED_SUFFIXES = ZIP_SUFFIXES | {SAFETENSORS_SUFFIX}
"""Files whose bytes are checked (by name: reading every file of a selection to find its
format would cost a read of each; checkpoint files carry these suffixes)."""
_DCP_METADATA = ".metadata"

_ZIP_LOCAL = b"PK\x03\x04"
_ZIP_END = b"PK\x05\x06"
_ZIP_CENTRAL = b"PK\x01\x02"
_ZIP64_LOCATOR = b"PK\x06\x07"
_ZIP64_END = b"PK\x06\x06"
_ZIP_END_SIZE = 22
_ZIP_MAX_COMMENT = 0xFFFF
_PICKLE_STOP = b"."
_PICKLE_PROTO = b"\x80"
_SAFETENSORS_MAX_HEADER = 100 * 1024 * 1024  # the format's own limit
_ZIP_CENTRAL_SIZE = 46
_ZIP_LOCAL_SIZE = 30
_ZIP64_EXTRA = 0x0001
PICKLE_READ_LIMIT = 64 * 1024 * 1024
"""The largest pickle or JSON file :func:`whole` reads through (RNG states and trainer states
are kilobytes; a bigger one is left to the time rule rather than read twice)."""


def temporary(name: str) -> bool:
    """Whether a file name is a temporary file a writer renames into place when it is done."""
    base = posixpath.basename(name)
    return (
        base.startswith(".tmp")
        or base.endswith((".tmp", ".partial", "~"))
        or ".tmp." in base  # `x.tmp.1234`, as some writers number them
    )


def torn(path: str, name: str | None = None) -> str | None:
    """Why the file at ``path`` (named ``name`` in its checkpoint) is not whole; None if it is
    or its format is not one checked here."""
    name = name or os.path.basename(path)
    if temporary(name):
        return "a temporary file: a write was under way"
    base = posixpath.basename(name)
    suffix = os.path.splitext(base)[1].lower()
    if suffix not in CHECKED_SUFFIXES and base != _DCP_METADATA:
        return None
    if os.path.islink(path):
        # Captured as a link, or left out when it leads out of the selection; what it points
        # at inside is a file of its own, checked as one (a loop or a dangling link is no tear).
        return None
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size == 0:
                return "empty"
            head = handle.read(8)
            if head.startswith(_ZIP_LOCAL) or _ZIP_LOCAL.startswith(head):
                return _zip(handle, size)
            if suffix == SAFETENSORS_SUFFIX:
                return _safetensors(handle, head, size)
            if (suffix in PICKLE_SUFFIXES or base == _DCP_METADATA) and head[:1] == _PICKLE_PROTO:
                return _pickle(handle, size)
    except OSError as error:
        return f"unreadable ({error.strerror or error})"
    return None  # e.g. a raw `.bin` that is no archive: a format of the program's own


def _zip_ends(handle, size: int) -> Iterator[tuple[bytes, int]]:
    """Each candidate end record in the file's last bytes, the last first: its bytes on (to the
    file's end) and its offset. A comment may hold the record's signature too."""
    tail_size = min(size, _ZIP_END_SIZE + _ZIP_MAX_COMMENT)
    handle.seek(size - tail_size)
    tail = handle.read(tail_size)
    at = tail.rfind(_ZIP_END)
    while at >= 0:
        yield tail[at:], size - tail_size + at
        at = tail.rfind(_ZIP_END, 0, at)


def _zip(handle, size: int) -> str | None:
    """A zip archive is whole once its end record points at a central directory before it."""
    for record, end in _zip_ends(handle, size):
        if _zip_end(handle, record, end, size) is None:
            return None
    return "a zip archive (torch.save) without its central directory: cut off while written"


def _zip_end(handle, record: bytes, end: int, size: int) -> str | None:
    """None when the end record at offset ``end`` closes the file and its directory is there."""
    if len(record) < _ZIP_END_SIZE:
        return "short end record"
    entries, directory_size, directory_at, comment = struct.unpack("<HII H", record[10:22])
    if end + _ZIP_END_SIZE + comment != size:
        return "the end record does not close the file"
    directory_end = end
    # torch writes a zip64 end record before the classic one even for small archives; the
    # classic fields are saturated only when the values need 64 bits.
    found = _zip64(handle, end)
    if found is not None:
        directory_size, directory_at, directory_end = found
    elif directory_at == 0xFFFFFFFF or directory_size == 0xFFFFFFFF or entries == 0xFFFF:
        return "zip64 end record missing"
    if directory_at + directory_size != directory_end:
        return "the central directory is not where the end record says"
    if directory_size == 0:
        return None
    handle.seek(directory_at)
    return None if handle.read(4) == _ZIP_CENTRAL else "no central directory at its offset"


def _zip64(handle, end: int) -> tuple[int, int, int] | None:
    """(directory size, directory offset, zip64 end record offset) of a zip64 archive."""
    if end < 20:
        return None
    handle.seek(end - 20)
    locator = handle.read(20)
    if not locator.startswith(_ZIP64_LOCATOR):
        return None
    (record_at,) = struct.unpack("<Q", locator[8:16])
    handle.seek(record_at)
    record = handle.read(56)
    if len(record) < 56 or not record.startswith(_ZIP64_END):
        return None
    directory_size, directory_at = struct.unpack("<QQ", record[40:56])
    return directory_size, directory_at, record_at


def _safetensors(handle, head: bytes, size: int) -> str | None:
    """The header's length, the header, and exactly the tensors' bytes after it."""
    if len(head) < 8:
        return "shorter than its header length"
    (length,) = struct.unpack("<Q", head)
    if length > _SAFETENSORS_MAX_HEADER or 8 + length > size:
        return "the header is cut off"
    try:
        header = json.loads(handle.read(length))
    except ValueError:
        return "the header is not whole JSON"
    if not isinstance(header, dict):
        return "the header is not a table of tensors"
    ends = [
        value["data_offsets"][1]
        for key, value in header.items()
        if key != "__metadata__" and isinstance(value, dict) and "data_offsets" in value
    ]
    data = size - 8 - length
    need = max(ends, default=0)
    if not isinstance(need, int) or data < need:
        return f"the tensors' bytes are cut off ({data} of {need})"
    return None


def _pickle(handle, size: int) -> str | None:
    handle.seek(size - 1)
    return None if handle.read(1) == _PICKLE_STOP else "a pickle that does not end in STOP"


# --- proven whole -----------------------------------------------------------------------------


def whole(path: str, name: str | None = None) -> bool:
    """Whether the file at ``path`` (named ``name``) is proven whole by its format: its records
    account for every byte of it (the module's docstring says how, per format). False for a
    torn file, an unreadable one, a link, and any format not checked here."""
    name = name or os.path.basename(path)
    if temporary(name) or os.path.islink(path):
        return False
    suffix = os.path.splitext(posixpath.basename(name))[1].lower()
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            head = handle.read(8)
            if size == 0:
                return False
            if head.startswith(_ZIP_LOCAL):
                return _zip_whole(handle, size)
            if suffix == SAFETENSORS_SUFFIX:
                return _safetensors(handle, head, size) is None and _safetensors_exact(
                    handle, head, size
                )
            if size > PICKLE_READ_LIMIT:
                return False
            if head[:1] == _PICKLE_PROTO:
                return _pickle_whole(handle, size)
            if suffix == ".json":
                handle.seek(0)
                return _json_whole(handle.read())
    except OSError:
        return False
    return False


def _zip_whole(handle, size: int) -> bool:
    """The end record closes the file and every member the directory lists lies before it."""
    return any(
        _zip_end(handle, record, end, size) is None and _members(handle, record, end)
        for record, end in _zip_ends(handle, size)
    )


def _members(handle, record: bytes, end: int) -> bool:
    entries, directory_size, directory_at = struct.unpack("<HII", record[10:20])
    found = _zip64(handle, end)
    if found is not None:
        directory_size, directory_at, _record_at = found
        handle.seek(found[2] + 32)
        (entries,) = struct.unpack("<Q", handle.read(8))
    handle.seek(directory_at)
    directory = handle.read(directory_size)
    if len(directory) != directory_size:
        return False
    at = count = 0
    while at < directory_size:
        header = directory[at : at + _ZIP_CENTRAL_SIZE]
        if len(header) < _ZIP_CENTRAL_SIZE or not header.startswith(_ZIP_CENTRAL):
            return False
        packed, plain = struct.unpack("<II", header[20:28])
        name_length, extra_length, comment_length = struct.unpack("<HHH", header[28:34])
        (local_at,) = struct.unpack("<I", header[42:46])
        extra = directory[at + 46 + name_length : at + 46 + name_length + extra_length]
        packed, local_at = _zip64_sizes(extra, plain, packed, local_at)
        if not _member_fits(handle, local_at, packed, directory_at):
            return False
        at += _ZIP_CENTRAL_SIZE + name_length + extra_length + comment_length
        count += 1
    return at == directory_size and count == entries


def _zip64_sizes(extra: bytes, plain: int, packed: int, local_at: int) -> tuple[int, int]:
    """A member's compressed size and local header offset, from its zip64 extra field when the
    classic fields are saturated (they come in the order: size, compressed size, offset)."""
    at = 0
    while at + 4 <= len(extra):
        kind, length = struct.unpack("<HH", extra[at : at + 4])
        if kind == _ZIP64_EXTRA:
            values = extra[at + 4 : at + 4 + length]
            fields = [v for (v,) in struct.iter_unpack("<Q", values[: len(values) // 8 * 8])]
            if plain == 0xFFFFFFFF and fields:
                fields.pop(0)
            if packed == 0xFFFFFFFF and fields:
                packed = fields.pop(0)
            if local_at == 0xFFFFFFFF and fields:
                local_at = fields.pop(0)
        at += 4 + length
    return packed, local_at


def _member_fits(handle, local_at: int, packed: int, directory_at: int) -> bool:
    """The member's local header is where the directory says, and its bytes end before the
    directory begins."""
    handle.seek(local_at)
    local = handle.read(_ZIP_LOCAL_SIZE)
    if len(local) < _ZIP_LOCAL_SIZE or not local.startswith(_ZIP_LOCAL):
        return False
    name_length, extra_length = struct.unpack("<HH", local[26:30])
    return local_at + _ZIP_LOCAL_SIZE + name_length + extra_length + packed <= directory_at


def _safetensors_exact(handle, head: bytes, size: int) -> bool:
    """The tensors' bytes end exactly where the file ends."""
    (length,) = struct.unpack("<Q", head)
    handle.seek(8)
    header = json.loads(handle.read(length))
    ends = [
        value["data_offsets"][1]
        for key, value in header.items()
        if key != "__metadata__" and isinstance(value, dict) and "data_offsets" in value
    ]
    return 8 + length + max(ends, default=0) == size


def _pickle_whole(handle, size: int) -> bool:
    """The opcodes, read and never run, end with STOP at the last byte."""
    import pickletools  # here: most commands never check a pickle (docs/benchmarks.md)

    handle.seek(0)
    stream = io.BytesIO(handle.read())
    try:
        for opcode, _arg, at in pickletools.genops(stream):
            if opcode.name == "STOP":
                return at == size - 1 and stream.tell() == size
    except (ValueError, EOFError, struct.error, UnicodeDecodeError):
        return False
    return False


def _json_whole(data: bytes) -> bool:
    try:
        value = json.loads(data)
    except ValueError:
        return False
    return isinstance(value, (dict, list))
