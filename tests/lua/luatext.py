"""Reading lua/*.lua for the static tests: headers, a small Lua 5.1 tokenizer, the functions
of a file with their lengths, top-level names, and the key families a text builds.

A header is the comment block right after a script's ``#!lua`` shebang (a unit's first
lines); the body is the rest. Key families are read from the only way the scripts build a
key, ``P .. '<family>'`` (``P`` = ARGV[1], the prefix): ``lanes``, ``due:``, ...
"""

from __future__ import annotations

import pathlib
import re
from dataclasses import dataclass

from scheduler.stores.redis.protocol import keys as keys_mod
from scheduler.stores.redis.protocol import scripts as lua

LUA = pathlib.Path(__file__).resolve().parents[2] / "lua"
UNITS = LUA / lua.INCLUDE_DIR
SCRIPT_FILES = sorted(LUA.glob("*.lua"))
UNIT_FILES = sorted(UNITS.glob("*.lua"))
LUA_FILES = SCRIPT_FILES + UNIT_FILES

KEYWORDS_OPENING = {"function", "if", "do", "repeat"}  # `while`/`for` open with their `do`
KEYWORDS_CLOSING = {"end", "until"}


def split(path: pathlib.Path) -> tuple[str, list[str], str]:
    """(shebang or "", header comment lines without the '-- ', body)."""
    text = path.read_text()
    shebang = ""
    if text.startswith("#!"):
        shebang, _, text = text.partition("\n")
    lines = text.split("\n")
    n = 0
    while n < len(lines) and lines[n].startswith("--") and not lines[n].startswith("--@"):
        n += 1
    header = [re.sub(r"^-- ?", "", line) for line in lines[:n]]
    return shebang, header, "\n".join(lines[n:])


def labelled(header: list[str], label: str) -> str | None:
    """The text of the header line ``<label>: ...`` and its indented continuation lines."""
    for i, line in enumerate(header):
        if line.startswith(f"{label}:"):
            block = [line[len(label) + 1 :]]
            for more in header[i + 1 :]:
                if not more.startswith(" "):
                    break
                block.append(more)
            return " ".join(x.strip() for x in block)
    return None


def units_of(path: pathlib.Path) -> list[str]:
    """The units a script or unit needs (the loader's order)."""
    return lua.unit_order(path.read_text(), path.name, LUA)


def closure_code(path: pathlib.Path) -> str:
    """The code a file runs: the units it needs, then its own body (no header)."""
    parts = [split(UNITS / f"{u}.lua")[2] for u in units_of(path)]
    return "\n".join([*parts, split(path)[2]])


# ---- tokens -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Token:
    kind: str  # "name" (identifiers and keywords), "str", "num", "op"
    text: str  # a string token's text is its contents, without the quotes
    line: int


_LONG_OPEN = re.compile(r"\[(=*)\[")
_NAME = re.compile(r"[A-Za-z_]\w*")
_NUM = re.compile(r"0[xX][0-9a-fA-F]+|\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?")
_OPS = ("...", "..", "==", "~=", "<=", ">=")


def tokens(text: str) -> list[Token]:
    """Lua 5.1 tokens, without comments (enough for the structure checks)."""
    out: list[Token] = []
    i, line, n = 0, 1, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c in " \t\r":
            i += 1
        elif text.startswith("--", i):
            long = _LONG_OPEN.match(text, i + 2)
            if long:
                end = text.index(f"]{long.group(1)}]", long.end())
                stop = end + len(long.group(0))
            else:
                stop = text.find("\n", i)
                stop = n if stop < 0 else stop
            line += text.count("\n", i, stop)
            i = stop
        elif c in "'\"":
            j = i + 1
            while text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(Token("str", text[i + 1 : j], line))
            line += text.count("\n", i, j)
            i = j + 1
        elif (long := _LONG_OPEN.match(text, i)) is not None:
            end = text.index(f"]{long.group(1)}]", long.end())
            out.append(Token("str", text[long.end() : end], line))
            line += text.count("\n", i, end)
            i = end + len(long.group(0))
        elif (m := _NAME.match(text, i)) is not None:
            out.append(Token("name", m.group(0), line))
            i = m.end()
        elif (m := _NUM.match(text, i)) is not None:
            out.append(Token("num", m.group(0), line))
            i = m.end()
        else:
            op = next((o for o in _OPS if text.startswith(o, i)), c)
            out.append(Token("op", op, line))
            i += len(op)
    return out


@dataclass(frozen=True)
class Function:
    name: str  # "" for an anonymous function
    first: int  # line of its `function` keyword
    last: int  # line of its `end`

    @property
    def lines(self) -> int:
        return self.last - self.first + 1


def functions(text: str) -> list[Function]:
    """Every function of a Lua text (nested ones too), from `function` to its `end`."""
    toks = tokens(text)
    stack: list[tuple[str, str, int]] = []  # (opener, function name, line)
    found: list[Function] = []
    for i, t in enumerate(toks):
        if t.kind != "name":
            continue
        if t.text in KEYWORDS_OPENING:
            name = ""
            if t.text == "function" and i + 1 < len(toks) and toks[i + 1].kind == "name":
                name = toks[i + 1].text
            stack.append((t.text, name, t.line))
        elif t.text in KEYWORDS_CLOSING:
            opener, name, first = stack.pop()
            if (opener == "repeat") != (t.text == "until"):
                raise ValueError(f"line {t.line}: {t.text} closes {opener} of line {first}")
            if opener == "function":
                found.append(Function(name, first, t.line))
    if stack:
        raise ValueError(f"unclosed {stack[-1][0]} of line {stack[-1][2]}")
    return found


def top_level_names(text: str) -> list[str]:
    """The names a Lua text declares outside every block (`local x`, `local function f`)."""
    toks = tokens(text)
    depth, names = 0, []
    for i, t in enumerate(toks):
        if t.kind != "name":
            continue
        if t.text in KEYWORDS_OPENING:
            depth += 1
        elif t.text in KEYWORDS_CLOSING:
            depth -= 1
        elif t.text == "local" and depth == 0:
            names += _declared(toks, i + 1)
    return names


def _declared(toks: list[Token], j: int) -> list[str]:
    """The names declared from token ``j`` on, after a ``local`` or a ``for``: the name of
    a ``local function``, or a comma-separated list of names."""
    if toks[j].text == "function":
        return [toks[j + 1].text]
    names = []
    while toks[j].kind == "name":
        names.append(toks[j].text)
        if toks[j + 1].text != ",":
            break
        j += 2
    return names


def main_chunk_locals(text: str) -> list[str]:
    """The locals a Lua text's main chunk declares, at any block depth outside every
    function (`local x`, `local function f`, a numeric or generic `for`'s variables): an
    upper bound of how many are active at once, which Lua 5.1 caps at 200 per function."""
    toks = tokens(text)
    stack: list[str] = []
    names: list[str] = []
    for i, t in enumerate(toks):
        if t.kind != "name":
            continue
        if t.text in KEYWORDS_OPENING:
            stack.append(t.text)
        elif t.text in KEYWORDS_CLOSING:
            stack.pop()
        elif "function" in stack:
            continue
        elif t.text in ("local", "for"):
            names += _declared(toks, i + 1)
    return names


def upvalues(text: str) -> dict[str, set[str]]:
    """Each outermost function -> the main chunk's locals its body names (nested functions
    included): an upper bound of its upvalues, which Lua 5.1 caps at 60 per function."""
    toks = tokens(text)
    outer = set(main_chunk_locals(text))
    found: dict[str, set[str]] = {}
    stack: list[str] = []
    current = ""
    for i, t in enumerate(toks):
        if t.kind != "name":
            continue
        if t.text in KEYWORDS_OPENING:
            if t.text == "function" and "function" not in stack:
                current = toks[i + 1].text if toks[i + 1].kind == "name" else f"line {t.line}"
                found[current] = set()
            stack.append(t.text)
        elif t.text in KEYWORDS_CLOSING:
            stack.pop()
        elif "function" in stack and t.text in outer and toks[i - 1].text not in (".", ":"):
            found[current].add(t.text)
    for name, used in found.items():
        used.discard(name)  # a recursive local function names itself: not an upvalue
    return found


# ---- key families -----------------------------------------------------------------------


def key_families() -> dict[str, str]:
    """Every key family of keys.py -> its name in a header: ``lease`` -> ``lease``,
    ``job:`` -> ``job:<job_id>`` (the parameter of the Keys method that builds it)."""
    k = keys_mod.Keys("ns")
    out = {
        v[len(k.prefix) :]: v[len(k.prefix) :]
        for v in vars(k).values()
        if isinstance(v, str) and v.startswith(k.prefix) and v != k.prefix
    }
    for name, method in vars(keys_mod.Keys).items():
        if callable(method) and not name.startswith("_"):
            family = method(k, "x")[len(k.prefix) : -1]
            param = method.__code__.co_varnames[1]
            out[family] = f"{family}<{param}>"
    return out


def families_built(text: str) -> set[str]:
    """The key families a Lua text builds (``P .. 'job:'``). Raises if ``P`` appears in any
    other way, so that nothing a script touches escapes this reading."""
    toks = tokens(text)
    out = set()
    for i, t in enumerate(toks):
        if t.kind != "name" or t.text != "P":
            continue
        if i > 0 and toks[i - 1].text == "local" and toks[i + 1].text == "=":
            continue  # `local P = ARGV[1]`
        if toks[i + 1].text != ".." or toks[i + 2].kind != "str":
            raise ValueError(f"line {t.line}: P used other than as P .. '<family>'")
        out.add(toks[i + 2].text)
    return out
