"""Checkpoint files in the formats nodus checks before a capture, holding a line of text.

nodus reads a ``.safetensors`` header and a ``torch.save`` archive's central directory before
it commits a directory-contract checkpoint (nodus.stages.formats), so a test that stands in for
a program must write files that are whole in their format: a safetensors header carrying the
text as metadata, a zip archive (what ``torch.save`` writes) holding it. Any other name gets the
text as it is. tests/runner/programs/inplace_writer.py writes the same way (it runs alone).
"""

from __future__ import annotations

import io
import json
import os
import struct
import zipfile

ZIPPED = (".pt", ".pth", ".bin", ".ckpt", ".pkl")


def encode(name: str, text: str) -> bytes:
    if name.endswith(".safetensors"):
        header = json.dumps({"__metadata__": {"text": text}}).encode()
        return struct.pack("<Q", len(header)) + header
    if name.endswith(ZIPPED):
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            archive.writestr("archive/data.txt", text)
        return buffer.getvalue()
    return text.encode()


def decode(name: str, data: bytes) -> str:
    if name.endswith(".safetensors"):
        (length,) = struct.unpack("<Q", data[:8])
        return json.loads(data[8 : 8 + length])["__metadata__"]["text"]
    if name.endswith(ZIPPED):
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return archive.read("archive/data.txt").decode()
    return data.decode()


def write_whole(path: str, text: str) -> None:
    with open(path, "wb") as handle:
        handle.write(encode(os.path.basename(path), text))


def read_whole(path: str) -> str:
    with open(path, "rb") as handle:
        return decode(os.path.basename(path), handle.read())
