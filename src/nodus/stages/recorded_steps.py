"""The training step a ``torch.save`` checkpoint records inside it.

A program whose checkpoint name carries no step (nanoGPT's ``ckpt.pt``, Lightning's
``last.ckpt``) still writes its step into the file: a top-level ``iter_num``, ``global_step``,
``step`` or ``iteration`` beside the weights, and often an ``epoch``. This module reads those
plain numbers from the pickle that ``torch.save`` writes (``<archive>/data.pkl`` of its zip, or
the fourth pickle of the legacy format) without loading a tensor and without unpickling
anything: the pickle's opcodes are walked (:func:`pickletools.genops`) over a stack of symbols,
so a global (``os.system``) is only a name that is never looked up and a persistent id (a
tensor's storage) is never followed. Only the top-level object's own keys count, and only
plain integers (the epoch may be a float).

A hostile or damaged file costs a bounded read (:data:`MOST_BYTES` of pickle, :data:`MOST_OPS`
opcodes, :data:`MOST_MEMO` remembered values) and gives None, never an exception.
"""

from __future__ import annotations

import io
from typing import IO, TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import pickletools

__all__ = [
    "EPOCH_KEY",
    "MOST_BYTES",
    "MOST_FILES",
    "MOST_OPS",
    "STEP_KEYS",
    "SUFFIXES",
    "Recorded",
    "read",
]

STEP_KEYS = ("global_step", "iter_num", "step", "iteration")
"""The top-level keys that hold a program's step, in the order one is preferred."""
EPOCH_KEY = "epoch"
SUFFIXES = (".pt", ".pth", ".ckpt", ".tar")
"""The names ``torch.save`` checkpoints go by (nanoGPT's ``ckpt.pt``, Lightning's ``.ckpt``)."""
MOST_FILES = 4
"""How many of a selection's newest checkpoint files are read for their step."""
MOST_BYTES = 64 * 2**20
"""The most pickle bytes read from one file: a checkpoint's pickle holds only tensor metadata
(a hundred bytes a tensor), far less than this for any model; past it the file is not read."""
MOST_OPS = 1_000_000
"""The most opcodes walked in one pickle: a tensor takes about twenty, so fifty thousand
tensors; a pickle longer than that records nothing as far as this module reads it."""
MOST_MEMO = 100_000
"""The most memoized values remembered; later ones are read as opaque."""
_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C  # the first pickle of torch.save's legacy format
_SCALARS = (int, float, str, bool, type(None))
_LONGEST_TEXT = 200  # a longer string is never a key that matters


class Recorded:
    """What a checkpoint records: its step and epoch, each None where it records none."""

    __slots__ = ("epoch", "step")

    def __init__(self, step: int | None, epoch: float | None) -> None:
        self.step = step
        self.epoch = epoch

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Recorded) and (self.step, self.epoch) == (other.step, other.epoch)

    def __repr__(self) -> str:
        return f"Recorded(step={self.step}, epoch={self.epoch})"


def read(path: str, step_key: str | None = None) -> Recorded | None:
    """The step (``step_key``, else the first of :data:`STEP_KEYS` present) and epoch the
    ``torch.save`` file at ``path`` records at its top level; None when it is not such a file,
    is damaged, or records neither."""
    try:
        top = _top_level(path)
    except Exception:
        return None
    if top is None:
        return None
    keys = (step_key,) if step_key is not None else STEP_KEYS
    step = next((top[key] for key in keys if _is_int(top.get(key))), None)
    if step is not None and step < 0:
        step = None
    epoch = top.get(EPOCH_KEY)
    if not isinstance(epoch, (int, float)) or isinstance(epoch, bool) or epoch != epoch:
        epoch = None
    if step is None and epoch is None:
        return None
    return Recorded(step, epoch)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _top_level(path: str) -> dict[str, Any] | None:
    with open(path, "rb") as handle:
        head = handle.read(4)
        handle.seek(0)
        if head == b"PK\x03\x04":
            return _from_zip(handle)
        if head[:1] == b"\x80":  # a pickle: maybe the legacy format
            return _from_legacy(handle)
    return None


def _from_zip(handle: IO[bytes]) -> dict[str, Any] | None:
    # zipfile and pickletools are imported where a checkpoint is read: every `nodus run`
    # imports this module, and most never read a checkpoint (docs/benchmarks.md, "Start-up").
    import zipfile

    with zipfile.ZipFile(handle) as archive:
        names = [n for n in archive.namelist() if n.count("/") == 1 and n.endswith("/data.pkl")]
        if len(names) != 1:
            return None
        with archive.open(names[0]) as pickle:
            return _walk(_Capped(pickle))


def _from_legacy(handle: IO[bytes]) -> dict[str, Any] | None:
    """The legacy format: magic number, protocol version, system info, then the object."""
    capped = _Capped(handle)
    magic = _Walker(capped)
    magic.run()
    if magic.root != _LEGACY_MAGIC:
        return None
    for _ in range(2):  # the protocol version and the system info
        _Walker(capped).run()
    return _walk(capped)


def _walk(stream: _Capped) -> dict[str, Any] | None:
    walker = _Walker(stream)
    walker.run()
    return walker.top if walker.top_seen else None


class _Capped(io.RawIOBase):
    """A stream that ends in an error past :data:`MOST_BYTES`."""

    def __init__(self, inner: IO[bytes]) -> None:
        self.inner = inner
        self.left = MOST_BYTES

    def readable(self) -> bool:
        return True

    def tell(self) -> int:  # genops asks each opcode's position
        return MOST_BYTES - self.left

    def read(self, size: int = -1) -> bytes:
        if size < 0 or size > self.left:
            size = self.left + 1
        data = self.inner.read(size)
        self.left -= len(data)
        if self.left < 0:
            raise ValueError("the pickle is longer than a checkpoint's")
        return data

    def readline(self, size: int | None = -1) -> bytes:  # protocol 0 opcodes read lines
        line = self.inner.readline(min(self.left + 1, _LONGEST_TEXT * 10))
        self.left -= len(line)
        if self.left < 0:
            raise ValueError("the pickle is longer than a checkpoint's")
        return line


class _Opaque:
    """Anything that is not a plain number or short string: never looked into."""

    __slots__ = ()


_OPAQUE = _Opaque()
_MARK = object()
# What the symbolic stack keeps of each opcode's argument: the plain values.
_VALUE_OPS = {
    "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT", "BINFLOAT",
    "UNICODE", "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8",
}  # fmt: skip
_CONSTANTS = {"NONE": None, "NEWTRUE": True, "NEWFALSE": False}
_MEMO_PUT = {"PUT", "BINPUT", "LONG_BINPUT"}
_MEMO_GET = {"GET", "BINGET", "LONG_BINGET"}


class _Walker:
    """One pickle's opcodes over a stack of symbols: plain values, a dict under construction
    (its plain pairs), marks, and :data:`_OPAQUE` for everything else."""

    def __init__(self, stream: _Capped) -> None:
        self.stream = stream
        self.stack: list[Any] = []
        self.memo: dict[int, Any] = {}  # the plain values memoized, by index
        self.memoized = 0  # MEMOIZE's next index: every object memoized counts
        self.top: dict[str, Any] = {}
        self.top_seen = False  # the object at the bottom of the stack took dict items
        self.root: Any = None

    def run(self) -> None:
        import pickletools

        stream = cast(IO[bytes], self.stream)  # a readable stream: what genops reads
        for count, (opcode, arg, _pos) in enumerate(pickletools.genops(stream)):  # to its STOP
            if count >= MOST_OPS:
                raise ValueError("the pickle holds more than a checkpoint's objects")
            self.step(opcode, arg)

    def step(self, opcode: pickletools.OpcodeInfo, arg: Any) -> None:
        name, stack = opcode.name, self.stack
        if name in _VALUE_OPS:
            stack.append(arg if _kept(arg) else _OPAQUE)
        elif name in _CONSTANTS:
            stack.append(_CONSTANTS[name])
        elif name == "MARK":
            stack.append(_MARK)
        elif name in _MEMO_PUT or name == "MEMOIZE":
            self._memoize(name, arg)
        elif name in _MEMO_GET:
            stack.append(self.memo.get(arg, _OPAQUE))
        elif name == "SETITEM":
            value, key = stack.pop(), stack.pop()
            self._set(len(stack) - 1, [(key, value)])
        elif name == "SETITEMS":
            items = self._to_mark()
            self._set(len(stack) - 1, list(zip(items[::2], items[1::2], strict=False)))
        elif name == "DUP":
            stack.append(stack[-1])
        elif name == "STOP":
            self.root = stack[-1]
        else:
            self._generic(opcode)

    def _memoize(self, name: str, arg: Any) -> None:
        """The object on top of the stack put in the memo (at ``arg``, or MEMOIZE's next)."""
        index = arg
        if name == "MEMOIZE":
            index, self.memoized = self.memoized, self.memoized + 1
        self.memo.pop(index, None)  # a later object put at the same index replaces it
        stack = self.stack
        if stack and len(self.memo) < MOST_MEMO and isinstance(stack[-1], _SCALARS):
            self.memo[index] = stack[-1]

    def _set(self, at: int, pairs: list[tuple[Any, Any]]) -> None:
        """Items set on the object at stack index ``at``: kept only for the bottom one."""
        if at != 0:
            return
        self.top_seen = True
        for key, value in pairs:
            if isinstance(key, str) and isinstance(value, _SCALARS):
                self.top[key] = value

    def _to_mark(self) -> list[Any]:
        stack = self.stack
        at = len(stack) - 1
        while at >= 0 and stack[at] is not _MARK:
            at -= 1
        if at < 0:
            raise ValueError("no mark on the stack")
        items = stack[at + 1 :]
        del stack[at:]
        return items

    def _generic(self, opcode: pickletools.OpcodeInfo) -> None:
        """Any other opcode by its documented stack effect: what it consumes is dropped, what
        it makes is opaque (a global is never imported, a persistent id never followed)."""
        import pickletools

        before = opcode.stack_before
        if pickletools.markobject in before:
            self._to_mark()
            before = before[: before.index(pickletools.markobject)]
        if len(before) > len(self.stack):
            raise ValueError("the stack underflows")
        if before:
            del self.stack[len(self.stack) - len(before) :]
        self.stack.extend(_OPAQUE for _made in opcode.stack_after)


def _kept(arg: Any) -> bool:
    """Whether a pushed value is kept as it is: a scalar, and no text longer than a name's."""
    return isinstance(arg, _SCALARS) and not (isinstance(arg, str) and len(arg) > _LONGEST_TEXT)
