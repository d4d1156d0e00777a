"""Field types of the workload file, each carrying its own rule.

A rule raises ``ValueError`` phrased as what the person should do; :mod:`nodus.schemas.problems`
turns it into a :class:`~nodus.errors.Problem` at the field's path, next to the value found.
The rules live on the types (not in one big validator) so a list reports every bad element by
its index, and all problems of a file come back at once.
"""

from __future__ import annotations

import posixpath
import re
import shlex
import unicodedata
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field, WithJsonSchema

from nodus import protocol
from nodus.schemas import defaults, units

NAME_PATTERN = r"[a-z0-9][a-z0-9._-]*"
_NAME = re.compile(NAME_PATTERN)
_RUN = r"[A-Za-z0-9][A-Za-z0-9._-]*"
# RUN@STEP or RUN/STAGE@STEP; a snapshot id (ckpt_<hex>) names the same thing directly.
_RESUME_FROM = re.compile(rf"(?:ckpt_[0-9a-f]+|{_RUN}(?:/{NAME_PATTERN})?@[0-9]+)")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RESERVED_ENV_PREFIX = "NODUS_"
_MAX_CODE_BYTES = 4096  # PATH_MAX on Linux: anything longer cannot name a folder


def has_control_characters(text: str) -> bool:
    return any(unicodedata.category(char) == "Cc" for char in text)


def _utf8_size(text: str) -> int:
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate, only possible from Python callers
        raise ValueError("must be valid UTF-8 text") from None


def check_name(value: str) -> str:
    """Names become folder names, snapshot ids and ``RUN/STAGE@STEP`` parts, so they stay plain."""
    if not _NAME.fullmatch(value):
        raise ValueError(
            "names use lowercase letters, digits, '.', '_' and '-', "
            "and start with a letter or digit"
        )
    if len(value) > defaults.MAX_NAME_CHARS:
        raise ValueError(f"names are at most {defaults.MAX_NAME_CHARS} characters")
    return value


def check_relative_path(value: str) -> str:
    """A literal path inside the code folder (``checkpoint_paths``, ``outputs``).

    Captures and restores trust these paths, so anything that could leave the code folder or
    reach the runner-private ``.nodus`` folder is refused here, before a run exists.
    """
    if not value:
        raise ValueError("paths must not be empty; use '.' for the whole code folder")
    _check_characters_and_size(value, "paths")
    if value.startswith("/"):
        raise ValueError("paths must be relative to the code folder, not absolute")
    if ".." in value.split("/"):
        raise ValueError("paths must stay inside the code folder")
    if posixpath.normpath(value).split("/")[0] == protocol.CONTROL_DIR:
        raise ValueError(
            f"'{protocol.CONTROL_DIR}' is private to the runner and cannot be selected"
        )
    return value


def _check_characters_and_size(value: str, what: str) -> None:
    """No control characters, at most MAX_CHECKPOINT_PATH_BYTES; ``what`` names them in errors."""
    if has_control_characters(value):
        raise ValueError(f"{what} must not contain control characters")
    size = _utf8_size(value)
    if size > defaults.MAX_CHECKPOINT_PATH_BYTES:
        raise ValueError(
            f"{what} are at most {defaults.MAX_CHECKPOINT_PATH_BYTES} UTF-8 bytes "
            f"(this one has {size})"
        )


def check_file_name(value: str) -> str:
    """The name of one file inside a checkpoint folder (``checkpoint_complete``)."""
    if not value:
        raise ValueError("give the name of a file the program writes into each checkpoint folder")
    _check_characters_and_size(value, "file names")
    if "/" in value or value in (".", ".."):
        raise ValueError(
            "must be the name of a file directly inside the checkpoint folder (no '/', '.' or '..')"
        )
    return value


def check_step_name(value: str) -> str:
    """``checkpoint_name``: a name pattern holding ``{step}``."""
    _check_characters_and_size(value, "names")
    return protocol.checked_step_name(value)


def check_step_key(value: str) -> str:
    """``step_key``: the name of a top-level key of a checkpoint (``iter_num``)."""
    if not _KEY.fullmatch(value):
        raise ValueError(
            "must be the name of a top-level key of the program's checkpoint, e.g. 'iter_num' "
            "(letters, digits, '_', '-' and '.', at most 100)"
        )
    return value


_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,99}")


def check_resume_args(values: list[str]) -> list[str]:
    """``resume_args``: arguments added to the command of a restored attempt."""
    for value in values:
        _check_characters_and_size(value, "arguments")
        protocol.checked_resume_arg(value)
    return values


def normal_path(value: str) -> str:
    """``./state/`` and ``state`` select the same thing; resolution stores the short form."""
    return posixpath.normpath(value)


def check_code(value: str) -> str:
    """The source folder, relative to the workload file (or absolute); any folder may be used."""
    if not value:
        raise ValueError("give a folder, relative to the workload file ('.' is its own folder)")
    if has_control_characters(value):
        raise ValueError("folder names must not contain control characters")
    if _utf8_size(value) > _MAX_CODE_BYTES:
        raise ValueError(f"folder names are at most {_MAX_CODE_BYTES} UTF-8 bytes")
    return value


def _split_command(value: Any) -> Any:
    """A string is split the way a shell would; a tuple from Python is taken as a list."""
    if isinstance(value, str):
        try:
            return shlex.split(value)
        except ValueError as error:
            raise ValueError(f"cannot be split like a shell would ({error})") from None
    if isinstance(value, tuple):
        return list(value)
    return value


def check_command(value: list[str]) -> list[str]:
    if not value or not value[0].strip():
        raise ValueError("the command is empty; give the program to run, e.g. 'python train.py'")
    if any("\0" in argument for argument in value):
        raise ValueError("arguments must not contain NUL characters")
    return value


def check_env(value: dict[str, str]) -> dict[str, str]:
    """Names a process environment can carry; ``NODUS_*`` is how the runner talks to the stage."""
    for name, text in value.items():
        if not _ENV_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a valid variable name (letters, digits, '_')")
        if name.startswith(_RESERVED_ENV_PREFIX):
            raise ValueError(
                f"{name!r}: names starting with {_RESERVED_ENV_PREFIX} are set by nodus"
            )
        if "\0" in text:
            raise ValueError(f"{name!r}: values must not contain NUL characters")
    return value


def check_secret_name(name: str) -> str:
    """One of ``secrets``: the name of a variable whose value the attempt takes from the
    environment of whoever drives it; only names are ever written down (docs/security.md)."""
    if not _ENV_NAME.fullmatch(name):
        raise ValueError("not a valid variable name (letters, digits, '_')")
    if name.startswith(_RESERVED_ENV_PREFIX) or name in _SET_BY_NODUS:
        raise ValueError("nodus sets this variable for the program itself")
    return name


def check_unique_secrets(value: list[str]) -> list[str]:
    twice = sorted({name for name in value if value.count(name) > 1})
    if twice:
        raise ValueError(f"{', '.join(twice)} listed more than once")
    return value


# Variables the runner sets for every program over its own environment: a secret of that name
# would never reach the program.
_SET_BY_NODUS = frozenset({protocol.ENV_TMPDIR, *protocol.CACHE_VARIABLES})


def check_resume_from(value: str) -> str:
    if not _RESUME_FROM.fullmatch(value):
        raise ValueError("name a snapshot as RUN@STEP, RUN/STAGE@STEP or its id ckpt_<hex>")
    return value


def duration_seconds(value: Any) -> Any:
    """``"90s"``, ``"15m"``, ``"1h"``, ``"2d"`` or a number of seconds, as seconds (>= 0)."""
    if isinstance(value, bool):
        raise ValueError('give a duration such as "30s", "15m" or "1h"')
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and (parsed := units.duration_seconds(value)) is not None:
        seconds = parsed
    else:
        raise ValueError('give a duration such as "30s", "15m" or "1h" (or seconds)')
    if not 0 <= seconds < float("inf"):
        raise ValueError("a duration is 0 or more seconds")
    return seconds


def _list_from_tuple(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


Name = Annotated[
    str,
    AfterValidator(check_name),
    WithJsonSchema(
        {"type": "string", "pattern": f"^{NAME_PATTERN}$", "maxLength": defaults.MAX_NAME_CHARS}
    ),
]
RelativePath = Annotated[str, AfterValidator(check_relative_path)]
PathList = Annotated[
    list[RelativePath],
    BeforeValidator(_list_from_tuple),
    Field(max_length=defaults.MAX_CHECKPOINT_PATHS),
]
FileName = Annotated[str, AfterValidator(check_file_name)]
StepNameTemplate = Annotated[str, AfterValidator(check_step_name)]
StepKey = Annotated[str, AfterValidator(check_step_key)]
ResumeArgs = Annotated[
    list[str],
    BeforeValidator(_list_from_tuple),
    Field(max_length=defaults.MAX_CHECKPOINT_PATHS),
    AfterValidator(check_resume_args),
]
Code = Annotated[str, AfterValidator(check_code)]
Command = Annotated[
    list[str],
    BeforeValidator(_split_command),
    AfterValidator(check_command),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "minLength": 1},
                {"type": "array", "items": {"type": "string"}, "minItems": 1},
            ]
        }
    ),
]
Env = Annotated[dict[str, str], AfterValidator(check_env)]
SecretNames = Annotated[
    list[
        Annotated[
            str,
            AfterValidator(check_secret_name),
            WithJsonSchema({"type": "string", "pattern": f"^{_ENV_NAME.pattern}$"}),
        ]
    ],
    BeforeValidator(_list_from_tuple),
    Field(max_length=defaults.MAX_SECRETS),
    AfterValidator(check_unique_secrets),
]
ResumeFrom = Annotated[str, AfterValidator(check_resume_from)]
Duration = Annotated[
    float,
    BeforeValidator(duration_seconds),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "pattern": f"^{units.DURATION_PATTERN}$"},
                {"type": "number", "minimum": 0},
            ]
        }
    ),
]


def _hang_timeout(value: Any) -> Any:
    """``"auto"``, ``"off"``, or a duration above 0 (``"90s"``, ``"15m"``, seconds) as seconds."""
    if value in (defaults.HANG_TIMEOUT_AUTO, defaults.HANG_TIMEOUT_OFF):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool) and value <= 0:
        raise ValueError('a hang timeout is above 0 seconds (use "off" for none)')
    try:
        seconds = duration_seconds(value)
    except ValueError:
        raise ValueError(
            'give "auto", "off" or a duration such as "30s", "15m" or "1h" (or seconds)'
        ) from None
    if seconds <= 0:
        raise ValueError('a hang timeout is above 0 seconds (use "off" for none)')
    return seconds


HangTimeout = Annotated[
    float | str,
    BeforeValidator(_hang_timeout),
    WithJsonSchema(
        {
            "anyOf": [
                {"enum": [defaults.HANG_TIMEOUT_AUTO, defaults.HANG_TIMEOUT_OFF]},
                {"type": "string", "pattern": f"^{units.DURATION_PATTERN}$"},
                {"type": "number", "exclusiveMinimum": 0},
            ]
        }
    ),
]


def _memory(value: Any) -> int:
    """Bytes, or a size with a unit ("16GiB", "512MB"), as pydantic's ByteSize reads them."""
    from pydantic import ByteSize, TypeAdapter

    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError('memory is a number of bytes or a size with a unit, e.g. "16GiB"')
    return int(TypeAdapter(ByteSize).validate_python(value))


Memory = Annotated[int, BeforeValidator(_memory), Field(ge=0)]


def _save_every(value: Any) -> Any:
    """A number of optimizer steps (strict: ``"50"`` and ``50.0`` are not 50), or ``"auto"``."""
    if value == protocol.SAVE_EVERY_AUTO:
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f'must be an integer (optimizer steps) or "{protocol.SAVE_EVERY_AUTO}"')
    if value < 0:
        raise ValueError("must be at least 0")
    return value


SaveEvery = Annotated[
    int | str,
    BeforeValidator(_save_every),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 0},
                {"const": protocol.SAVE_EVERY_AUTO},
            ]
        }
    ),
]
