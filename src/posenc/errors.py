"""Exception types. Every user-facing failure is one of these, with a one-line message.

The CLI catches :class:`PosencError`, prints ``error: <message>`` and exits with status 2.
A message never echoes a huge value whole: any run of more than :data:`MAX_TOKEN` characters
without a space is cut (with a count of what was left out), and so is a message over
:data:`MAX_MESSAGE` characters.
"""

from __future__ import annotations

import re

#: Longest run of non-space characters (typically an echoed value) kept in a message.
MAX_TOKEN = 200
#: Longest message kept whole.
MAX_MESSAGE = 1000

_LONG_TOKEN = re.compile(rf"\S{{{MAX_TOKEN + 1},}}")


def _cut(text: str, keep: int) -> str:
    return f"{text[:keep]} ...[{len(text) - keep} more characters]"


def clip_message(message: str) -> str:
    """``message`` with over-long tokens and an over-long total cut (see the module docstring)."""
    if len(message) <= MAX_TOKEN:
        return message
    message = _LONG_TOKEN.sub(lambda m: _cut(m.group(0), MAX_TOKEN), message)
    return message if len(message) <= MAX_MESSAGE else _cut(message, MAX_MESSAGE)


class PosencError(Exception):
    """Base class for errors caused by bad user input (config, data, checkpoints)."""

    def __init__(self, *args: object) -> None:
        if len(args) == 1 and isinstance(args[0], str):
            args = (clip_message(args[0]),)
        super().__init__(*args)


class ConfigError(PosencError, ValueError):
    """Invalid configuration value or combination."""


class DataError(PosencError, ValueError):
    """Invalid or inconsistent input data (names the file and line where possible)."""


class CheckpointError(PosencError, ValueError):
    """Missing, corrupt or incompatible checkpoint."""


class RunDirError(PosencError):
    """A directory posenc may not write into, or a file it could not write (one line)."""
