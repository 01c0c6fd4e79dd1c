"""Errors a user can act on: the CLI prints their message as one line, without a trace."""


class UserError(RuntimeError):
    """Something the user can fix (a setting, a missing tool, an unreachable service)."""
