"""``extraPaths`` entries with a glob: ``{path, pattern}`` indexes only the files below ``path``
whose path relative to it matches ``pattern`` (what OpenClaw 2026.9's ``doctor`` writes when it
turns QMD collections into extraPaths).

The glob language is the one of qmd's masks and of fast-glob, case-sensitive, matched against
the path below ``path`` with forward slashes:

- ``*`` any run of characters within one path segment, ``?`` one such character;
- ``**`` as a whole segment: any number of segments, none included (``**/*.md`` matches
  ``a.md`` and ``x/y/a.md``; ``notes/**`` everything below ``notes/``);
- ``[abc]``, ``[a-z]``, ``[!a]`` / ``[^a]``: one character of (or not of) a set;
- ``{md,markdown}``: either alternative (nesting allowed).

A pattern without a slash matches at the top of ``path`` only (``*.md`` is not ``**/*.md``).
An extra path that is also listed plainly (a string, or ``{path}`` without a pattern) keeps
all its files. The pattern only narrows: what it selects must still be memory (Markdown, or
media under ``multimodal``). A ``{path, pattern}`` whose path is a single file indexes that file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

from pipeline.config import Settings

__all__ = ["PathPatterns", "compile_glob", "glob_matches"]


def _expand_braces(pattern: str) -> list[str]:
    """``a{b,c}d`` → ``[abd, acd]``, innermost-first so nested braces work too."""
    depth, start = 0, -1
    for i, ch in enumerate(pattern):
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
            if depth == 0:
                body, options, level, last = pattern[start + 1:i], [], 0, 0
                for j, c in enumerate(body):
                    level += (c == "{") - (c == "}")
                    if c == "," and level == 0:
                        options.append(body[last:j])
                        last = j + 1
                options.append(body[last:])
                if len(options) == 1:  # "{x}" is literal text
                    continue
                head, tail = pattern[:start], pattern[i + 1:]
                return [out for opt in options for out in _expand_braces(head + opt + tail)]
    return [pattern]


def _segment(segment: str) -> str:
    """The regex of one path segment (no ``/`` inside)."""
    out, i = [], 0
    while i < len(segment):
        ch = segment[i]
        if ch == "*":
            while i + 1 < len(segment) and segment[i + 1] == "*":
                i += 1  # "a**b" inside a segment is just "*"
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "[":
            end = segment.find("]", i + 2 if segment[i + 1:i + 2] in ("!", "^") else i + 1)
            if end == -1:
                out.append(re.escape(ch))
            else:
                body = segment[i + 1:end]
                negate = body[:1] in ("!", "^")
                body = body[1:] if negate else body
                body = body.replace("\\", "\\\\").replace("]", "\\]")
                out.append(f"[{'^/' if negate else ''}{body}]")
                i = end
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out)


def _translate(pattern: str) -> str:
    segments = [s for s in pattern.split("/") if s not in ("", ".")]
    if not segments:
        return ""
    out = ""
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == "**":
            out += ".*" if last else "(?:[^/]+/)*"
        else:
            out += _segment(segment) + ("" if last else "/")
    return out


@lru_cache(maxsize=256)
def compile_glob(pattern: str) -> re.Pattern[str]:
    """The compiled form of a glob (see the module docstring); raises ValueError when empty."""
    text = pattern.strip().replace("\\", "/")
    if not text:
        raise ValueError("an empty glob pattern matches nothing")
    alternatives = [_translate(p) for p in _expand_braces(text)]
    return re.compile("(?:" + "|".join(f"(?:{a})" for a in alternatives) + r")\Z")


def glob_matches(pattern: str, relative: str) -> bool:
    """Does ``relative`` (a path below the pattern's folder, ``/``-separated) match?"""
    return compile_glob(pattern).match(relative.replace(os.sep, "/")) is not None


def _norm(path: Path | str) -> str:
    return os.path.normpath(os.fspath(path))


class PathPatterns:
    """Which files the ``{path, pattern}`` entries of extraPaths let in.

    ``patterned`` maps each globbed extra folder to its patterns; ``plain`` lists the roots
    whose every memory file counts (``memory/``, ``MEMORY.md``, ``USER.md`` and the plain extra
    paths), so
    a file below both kinds is kept.
    """

    def __init__(self, patterned: Iterable[tuple[Path, str]], plain: Iterable[Path] = ()) -> None:
        self.plain = tuple(dict.fromkeys(_norm(p) for p in plain))
        by_root: dict[str, list[str]] = {}
        for root, pattern in patterned:
            key = _norm(root)
            if key not in self.plain:
                compile_glob(pattern)  # refuse a bad pattern now, not per file
                by_root.setdefault(key, []).append(pattern)
        self.patterned = {root: tuple(p) for root, p in by_root.items()}

    @classmethod
    def of(cls, settings: Settings) -> PathPatterns:
        """The patterns of a memory's settings (``extra_path_patterns``)."""
        workspace = settings.workspace
        globbed = {_norm(p) for p, _ in settings.extra_path_patterns}
        extras = [p if p.is_absolute() else workspace / p for p in settings.extra_paths]
        plain = [workspace / "memory", workspace / "MEMORY.md", workspace / "USER.md",
                 *(p for p in extras if _norm(p) not in globbed)]
        return cls(settings.extra_path_patterns, plain)

    def __bool__(self) -> bool:
        return bool(self.patterned)

    @staticmethod
    def _below(path: str, root: str) -> str | None:
        """``path`` relative to ``root`` (``/``-separated), or None when not below it."""
        if path == root:
            return ""
        prefix = root.rstrip(os.sep) + os.sep
        return path[len(prefix):].replace(os.sep, "/") if path.startswith(prefix) else None

    def excludes(self, path: Path | str) -> bool:
        """True when ``path`` lies below a globbed extra folder, matches none of its patterns,
        and lies below no plain root: its patterns keep it out of the memory."""
        if not self.patterned:
            return False
        target = _norm(path)
        if any(self._below(target, root) is not None for root in self.plain):
            return False
        verdicts = [any(glob_matches(p, rel) for p in patterns)
                    for root, patterns in self.patterned.items()
                    if (rel := self._below(target, root))]
        return bool(verdicts) and not any(verdicts)
