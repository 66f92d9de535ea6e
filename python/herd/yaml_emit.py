"""A small YAML emitter for task files (PyYAML is not available to Debian's python3).

Block style for mappings and lists; every string is double-quoted (so "2", "yes", "null" or
"L4:4" stay strings and nothing needs guessing), except multi-line scripts, which are written as
literal blocks ("|") when that is exact, so the file reads like a hand-written task YAML.
"""

import math
import re
from typing import Any, List

_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Words YAML 1.1 (PyYAML, so SkyPilot) reads as null or booleans: such keys must be quoted.
_SPECIAL_WORDS = {"null", "true", "false", "yes", "no", "on", "off", "y", "n"}
_SIMPLE_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r", "\0": "\\0"}
_INDENT = "  "


def _printable(ch: str) -> bool:
    """Whether ch may appear unescaped in a YAML scalar (YAML 1.2 c-printable, minus the
    line/paragraph separators and the BOM, which parsers treat specially)."""
    code = ord(ch)
    if 0x20 <= code <= 0x7E:
        return True
    if code < 0xA0 or 0xD800 <= code <= 0xDFFF:
        return False
    return code not in (0x2028, 0x2029, 0xFEFF) and code not in (0xFFFE, 0xFFFF)


def quote(text: str) -> str:
    """A YAML double-quoted scalar whose value is exactly text."""
    out = ['"']
    for ch in text:
        if ch in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[ch])
        elif _printable(ch):
            out.append(ch)
        else:
            code = ord(ch)
            if 0xD800 <= code <= 0xDFFF:
                raise ValueError(f"string {text!r} holds a lone surrogate; it is not valid text")
            if code <= 0xFF:
                out.append(f"\\x{code:02x}")
            elif code <= 0xFFFF:
                out.append(f"\\u{code:04x}")
            else:
                out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def _key(key: Any) -> str:
    if not isinstance(key, str):
        raise TypeError(f"mapping keys must be strings, got {key!r}")
    if _PLAIN_KEY.match(key) and key.lower() not in _SPECIAL_WORDS:
        return key
    return quote(key)


def _literal_block_lines(text: str) -> List[str]:
    """The header and lines of a literal block for text, or [] when a block would not read back
    exactly (then the caller quotes it)."""
    if "\n" not in text or text[0] in " \n":
        return []
    body = text.rstrip("\n")
    trailing = len(text) - len(body)
    if trailing > 1:
        return []
    lines = body.split("\n")
    for line in lines:
        # Whitespace-only lines and tabs make the indentation of a block ambiguous to readers.
        if (line and not line.strip()) or "\t" in line or not all(_printable(c) for c in line):
            return []
    return ["|" if trailing == 1 else "|-"] + lines


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} cannot be written to a task file")
        return repr(value)
    if isinstance(value, str):
        return quote(value)
    raise TypeError(f"cannot write {type(value).__name__} {value!r} to a task file")


def _emit(value: Any, inner: str, out: List[str], prefix: str) -> None:
    """Appends value to out. prefix is what precedes it on its first line ("key:" or "-", already
    indented); inner is the indentation of whatever value puts on the lines below it."""
    if isinstance(value, dict) and value:
        out.append(prefix)
        for k, v in value.items():
            _emit(v, inner + _INDENT, out, f"{inner}{_key(k)}:")
    elif isinstance(value, dict):
        out.append(f"{prefix} {{}}")
    elif isinstance(value, (list, tuple)) and value:
        out.append(prefix)
        for item in value:
            _emit(item, inner + _INDENT, out, f"{inner}-")
    elif isinstance(value, (list, tuple)):
        out.append(f"{prefix} []")
    elif isinstance(value, str) and _literal_block_lines(value):
        header, *lines = _literal_block_lines(value)
        out.append(f"{prefix} {header}")
        out.extend(inner + line if line else "" for line in lines)
    else:
        out.append(f"{prefix} {_scalar(value)}")


def dump(mapping: dict) -> str:
    """The YAML document for a mapping of strings to None, bool, int, float, str, lists and
    mappings. Key order is kept."""
    if not isinstance(mapping, dict):
        raise TypeError("a task file is a mapping")
    out: List[str] = []
    for k, v in mapping.items():
        _emit(v, _INDENT, out, _key(k) + ":")
    return "".join(line + "\n" for line in out)
