"""The base of the record's enums: members are their strings (str-valued), so whatever is
written, printed, compared or used as a key is the same plain string it always was."""

from __future__ import annotations

from enum import Enum


class Word(str, Enum):
    """A str-valued Enum whose str(), format() and hash are the value's (like Python 3.11's
    StrEnum, which Python 3.10 lacks): ``f"{TaskState.RUNNING}"`` is ``running``, and a member
    finds a dict entry keyed by its plain string and the other way round."""

    __str__ = str.__str__
    __format__ = str.__format__
    __hash__ = str.__hash__

    @classmethod
    def values(cls) -> tuple[str, ...]:
        return tuple(m.value for m in cls)
