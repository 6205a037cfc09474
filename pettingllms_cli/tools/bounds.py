"""Text that may reach a prompt has a size bound, and every cut says how much it removed.

One helper for every layer (tools render results, envs/messages.py bounds observations, policy/prompts.py bounds
a prompt to the model's context): a cut is marked in the text itself, `... 3.2 MB cut`, so a model (and a person
reading a transcript) sees that something was there.
"""

from __future__ import annotations


def human_size(n: int) -> str:
    """A byte or character count, short.

    >>> human_size(12), human_size(4_096), human_size(3_200_000)
    ('12 B', '4.1 kB', '3.2 MB')
    """
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def clip(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters (the mark included) from the end, marked with what was cut.

    >>> clip("abcdef", 10)
    'abcdef'
    >>> clip("x" * 3_200_000, 40)
    'xxxxxxxxxxxxxxxxxxxxxxxxx ... 3.2 MB cut'
    """
    if len(text) <= limit:
        return text
    keep, mark = _cut(len(text), limit, " ... {} cut")
    return text[:keep] + mark if keep else mark.strip()[:limit]


def clip_left(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters from the start (the newest part stays), marked.

    >>> clip_left("0123456789" * 10, 30)
    '[... 86 B cut] 67890123456789'
    """
    if len(text) <= limit:
        return text
    keep, mark = _cut(len(text), limit, "[... {} cut] ")
    return mark + text[len(text) - keep :] if keep else mark.strip()[:limit]


def _cut(size: int, limit: int, template: str) -> tuple[int, str]:
    """(characters kept, the mark) for cutting `size` characters to `limit`, the mark naming what was removed."""
    keep = max(0, limit - len(template.format(human_size(size))))
    return keep, template.format(human_size(size - keep))
