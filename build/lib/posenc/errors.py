"""Exception types. Every user-facing failure is one of these, with a one-line message.

The CLI catches :class:`PosencError`, prints ``error: <message>`` and exits with status 2.
"""


class PosencError(Exception):
    """Base class for errors caused by bad user input (config, data, checkpoints)."""


class ConfigError(PosencError, ValueError):
    """Invalid configuration value or combination."""


class DataError(PosencError, ValueError):
    """Invalid or inconsistent input data (names the file and line where possible)."""


class CheckpointError(PosencError, ValueError):
    """Missing, corrupt or incompatible checkpoint."""
