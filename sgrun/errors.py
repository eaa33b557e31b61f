"""Project exceptions. Errors a user can cause say what to change."""

from __future__ import annotations


class SgrunError(Exception):
    """Base class of every error sgrun raises on purpose."""


class ModelLoadError(SgrunError):
    """The model file or folder could not be found, fetched or read."""


class InvalidRequestError(SgrunError, ValueError):
    """A request field has a bad value; `field` names it."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


class ConstraintError(SgrunError, ValueError):
    """A constraint (schema, regex, grammar, choices) cannot be compiled or enforced."""


class EngineFatalError(SgrunError, RuntimeError):
    """The engine cannot go on (e.g. a tensor-parallel rank died): every request in flight ends
    with this error and the engine stops, instead of retrying or hanging."""
