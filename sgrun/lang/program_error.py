"""ProgramError: a failure inside a DSL program, naming the program and the call that failed."""

from __future__ import annotations

import os
import sys

from sgrun.errors import SgrunError

_LANG_DIR = os.path.dirname(os.path.abspath(__file__))


class ProgramError(SgrunError):
    """A program failed. `function` is the program's name, `call` the failing call (e.g.
    "gen('answer', max_new_tokens=64)"), `call_site` where the user wrote it, `cause` the error."""

    def __init__(self, function: str, call: str, cause: BaseException, call_site: str = ""):
        where = f" at {call_site}" if call_site else ""
        super().__init__(f"program {function!r} failed in {call}{where}: {type(cause).__name__}: {cause}")
        self.function = function
        self.call = call
        self.call_site = call_site
        self.cause = cause
        self.__cause__ = cause

    def __reduce__(self):
        return (ProgramError, (self.function, self.call, self.cause, self.call_site))


def find_call_site() -> str:
    """'file:line' of the innermost frame outside sgrun/lang: the line of the user's program."""
    frame = sys._getframe(1)
    while frame is not None and os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == _LANG_DIR:
        frame = frame.f_back
    if frame is None:
        return ""
    return f"{os.path.relpath(frame.f_code.co_filename)}:{frame.f_lineno}"
