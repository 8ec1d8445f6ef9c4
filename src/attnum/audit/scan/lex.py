"""The lexing under ``attnum scan``'s rules: tokens, numbers, and lines with comments and strings blanked.

Every expression here has deterministic alternatives (each takes a maximal run and has no choice to
revisit), so lexing a line costs O(its length) whatever it holds.
"""

from __future__ import annotations

import math
import re

SENTINEL_MIN = 1e3  # below this a literal is not plausibly standing in for infinity

# Deterministic alternatives only: name | number (its suffix included) | string | operator | any char.
_TOKEN = re.compile(r"[A-Za-z_]\w*|(?:\d[\d_]*\.?[\d_]*|\.\d[\d_]*)(?:[eE][-+]?\d[\d_]*)?\w*"
                    r"|\"[^\"]*\"|'[^']*'|==|!=|<=|>=|\+=|-=|\*=|/=|::|->|\*\*|\S")
# Comment/string lexers: each alternative consumes a maximal run (escapes in pairs), never revisited.
_PY_PIECE = re.compile(r"""[^'"#]+|\"\"\"|'''|"(?:[^"\\]|\\.)*(?:"|\\?$)|'(?:[^'\\]|\\.)*(?:'|\\?$)|#""")
_C_PIECE = re.compile(r"""[^'"/]+|"(?:[^"\\]|\\.)*(?:"|\\?$)|'(?:[^'\\]|\\.)*(?:'|\\?$)|//|/\*|/""")
BIGISH = re.compile(r"\d\d\d\d|\d\.?[eE]\+?\d|\d_\d")  # fixed-length alternatives: a literal >= 1e3 may be here
_KEPT_STRINGS = {"-inf", "-infinity"}  # kept so that float("-inf") reads as masking


def tokens(line: str) -> list[str]:
    return _TOKEN.findall(line)


def is_name(tok: str) -> bool:
    return tok[:1].isalpha() or tok[:1] == "_"


def number(tok: str) -> float | None:
    """The value of a decimal literal token (C suffixes allowed); None for anything else."""
    if not tok or not (tok[0].isdigit() or tok[0] == "."):
        return None
    try:
        value = float(tok.rstrip("fFlLuU"))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def big(tok: str) -> bool:
    v = number(tok)
    return v is not None and abs(v) >= SENTINEL_MIN


def code_lines(text: str, python: bool) -> list[str]:
    """``text`` split at "\\n", with comments and string contents blanked; line numbers kept."""
    out, state = [], None  # state: the open triple quote (Python) or "/*" (C), else None
    piece = _PY_PIECE if python else _C_PIECE
    for line in text.split("\n"):
        kept, pos, n = [], 0, len(line)
        while pos < n:
            if state is not None:
                end = line.find("*/" if state == "/*" else state, pos)
                if end < 0:
                    pos = n
                    break
                kept.append(" " if state == "/*" else '""')
                pos, state = end + (2 if state == "/*" else 3), None
                continue
            m = piece.match(line, pos)
            tok = m.group()
            if tok in ('"""', "'''", "/*"):
                state = tok
            elif tok in ("#", "//"):
                break
            elif tok[0] in "'\"":
                q = tok[0]
                body = tok[1:-1] if len(tok) > 1 and tok.endswith(q) else tok[1:]
                kept.append(q + (body if body.lower() in _KEPT_STRINGS else "") + q)
            else:
                kept.append(tok)
            pos = m.end()
        out.append("".join(kept))
    return out


def matching_parens(t: list[str]) -> dict[int, int]:
    stack, match = [], {}
    for i, tok in enumerate(t):
        if tok == "(":
            stack.append(i)
        elif tok == ")" and stack:
            match[stack.pop()] = i
    return match
