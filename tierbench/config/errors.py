"""The one base class of every error a user can fix: the CLI prints its message as one line."""

from __future__ import annotations


class TierbenchError(Exception):
    """A problem the user can act on; the message is one sentence naming the input and the fix."""


class ConfigError(TierbenchError):
    """An experiment, mode, trace or cluster file that cannot be used; names the file and key."""
