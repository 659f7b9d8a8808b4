"""Error-code tables (knowledge/codes/*.yaml): decode every code a trace shows.

A code is decoded by its exact row, else by the narrowest range of the same table that holds
it. Tables are data written from the vendors' public documentation (each names its source);
the decoder is independent of the KB entries, so a code is explained even when no entry matches.
"""

from __future__ import annotations

from pathlib import Path

from porter import rxcache
from porter.kb.schema import Problem
from porter.record import record

_RANGE = rxcache.compile(r"^(?P<lo>-?[A-Z]{0,4}\d{1,8})-(?P<hi>-?[A-Z]{0,4}\d{1,8})$")
_SPLIT = rxcache.compile(r"^(?P<sign>-?)(?P<prefix>[A-Z]{0,4})(?P<digits>\d{1,8})$")


@record(frozen=True)
class CodeInfo:
    code: str
    table: str  # family name of the table
    layer: str
    name: str
    meaning: str
    first_steps: tuple[str, ...]
    exact: bool  # False: decoded by a range

    def to_dict(self) -> dict:
        return {"code": self.code, "table": self.table, "layer": self.layer, "name": self.name, "meaning": self.meaning,
                "first_steps": list(self.first_steps), "exact": self.exact}


@record(frozen=True)
class _Range:
    prefix: str
    lo: int
    hi: int
    meaning: str
    first_steps: tuple[str, ...]


@record
class CodeTable:
    family: str
    layer: str
    source: str
    codes: dict[str, tuple[str, str, tuple[str, ...]]]  # code -> (name, meaning, first steps)
    ranges: list[_Range]

    def lookup(self, code: str) -> CodeInfo | None:
        row = self.codes.get(code)
        if row is not None:
            return CodeInfo(code, self.family, self.layer, row[0], row[1], row[2], True)
        key = _numeric(code)
        if key is None:
            return None
        prefix, value = key
        hits = [r for r in self.ranges if r.prefix == prefix and r.lo <= value <= r.hi]
        if not hits:
            return None
        best = min(hits, key=lambda r: r.hi - r.lo)
        return CodeInfo(code, self.family, self.layer, "", best.meaning, best.first_steps, False)


def _numeric(code: str) -> tuple[str, int] | None:
    m = _SPLIT.match(code)
    if not m:
        return None
    value = int(m.group("digits"))
    return m.group("prefix"), -value if m.group("sign") else value


def _steps(value) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    return tuple(str(v) for v in value or ())


def parse_table(doc, file: str) -> tuple[CodeTable | None, list[Problem]]:
    problems: list[Problem] = []
    if not isinstance(doc, dict) or not isinstance(doc.get("family"), str):
        return None, [Problem(file, "family", "a code table is a mapping with `family:`", "see knowledge/codes/README.md")]
    codes: dict[str, tuple[str, str, tuple[str, ...]]] = {}
    for i, row in enumerate(doc.get("codes") or []):
        if not isinstance(row, dict) or not row.get("code") or not row.get("meaning"):
            problems.append(Problem(file, f"codes[{i}]", "needs `code` and `meaning`", "quote the code: {code: \"507033\", meaning: ...}"))
            continue
        code = str(row["code"]).strip()
        if code in codes:
            problems.append(Problem(file, f"codes[{i}]", f"duplicate code {code}", "keep one row per code"))
        codes[code] = (str(row.get("name") or ""), str(row["meaning"]), _steps(row.get("first_steps")))
    ranges: list[_Range] = []
    for i, row in enumerate(doc.get("ranges") or []):
        m = _RANGE.match(str((row or {}).get("range", "")).strip()) if isinstance(row, dict) else None
        lo = _numeric(m.group("lo")) if m else None
        hi = _numeric(m.group("hi")) if m else None
        if not (lo and hi) or lo[0] != hi[0] or lo[1] > hi[1] or not row.get("meaning"):
            problems.append(Problem(file, f"ranges[{i}]", "needs `range: LO-HI` (same prefix, LO <= HI) and `meaning`", "e.g. {range: \"161000-161999\", meaning: ...}"))
            continue
        ranges.append(_Range(lo[0], lo[1], hi[1], str(row["meaning"]), _steps(row.get("first_steps"))))
    table = CodeTable(doc["family"], str(doc.get("layer") or ""), str(doc.get("source") or ""), codes, ranges)
    if not table.source:
        problems.append(Problem(file, "source", "missing", "name the public document the meanings come from"))
    return table, problems


def load_tables(codes_dir: Path, cache_dir: Path | None = None) -> tuple[list[CodeTable], list[Problem]]:
    """The tables under `codes_dir`. With `cache_dir`, the parsed YAML documents are memoised
    there, keyed by every file's name and content: parsing the ~70 kB of tables (and importing
    yaml) was more than half of a warm `porter diagnose` on a trace that shows a code."""
    tables, problems = [], []
    if not codes_dir.is_dir():
        return [], []
    paths = sorted(codes_dir.glob("*.yaml"))
    docs = _parsed_documents(paths, cache_dir)
    for path, doc in zip(paths, docs):
        if isinstance(doc, Exception):
            problems.append(Problem(str(path), "", f"cannot read: {doc}", "fix the YAML"))
            continue
        table, table_problems = parse_table(doc, str(path))
        problems.extend(table_problems)
        if table is not None:
            tables.append(table)
    return tables, problems


def _parsed_documents(paths: list[Path], cache_dir: Path | None) -> list:
    """The YAML document of each file, or the exception that reading it raised."""
    import zlib

    from porter import marshalmemo

    texts: list = []
    crc, adler = zlib.crc32(b"codes-1"), zlib.adler32(b"codes-1")
    for path in paths:
        try:
            data = path.read_bytes()
            texts.append(data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n"))  # as read_text reads it
        except (OSError, UnicodeDecodeError) as exc:
            texts.append(exc)
            data = b"\0unreadable"
        name = path.name.encode("utf-8", "surrogateescape") + b"\0"
        crc, adler = zlib.crc32(data, zlib.crc32(name, crc)), zlib.adler32(data, zlib.adler32(name, adler))
    memo = Path(cache_dir) / "kb" / f"codes-{crc:08x}{adler:08x}{len(paths):04x}.marshal" if cache_dir is not None else None
    if memo is not None:
        found = marshalmemo.load(memo)
        if type(found) is list and len(found) == len(paths):
            return found
    from porter.kb.loader import _yaml_load

    docs: list = []
    for path, text in zip(paths, texts):
        if isinstance(text, Exception):
            docs.append(text)
            continue
        try:
            docs.append(_yaml_load(text, str(path)))
        except Exception as exc:  # noqa: BLE001 - reported, not raised
            docs.append(exc)
    if memo is not None and not any(isinstance(d, Exception) for d in docs):
        marshalmemo.store(memo, docs)  # not when marshal cannot write a value (a YAML date) or the cache is read-only
    return docs


def decode(tables: list[CodeTable], code: str) -> CodeInfo | None:
    """Exact rows of any table first, then the narrowest range over all tables."""
    for table in tables:
        info = table.lookup(code) if code in table.codes else None
        if info is not None:
            return info
    found = [info for table in tables if (info := table.lookup(code)) is not None]
    return found[0] if found else None


def decode_signals(tables: list[CodeTable], codes: list[tuple[str, str, int]]) -> list[dict]:
    """[{code, family, line, decoded...}] for the (code, family, line) triples the extractor saw."""
    out = []
    for code, family, line in codes:
        info = decode(tables, code)
        row = {"code": code, "family": family, "line": line}
        if info is not None:
            row.update({k: v for k, v in info.to_dict().items() if k != "code"})
        out.append(row)
    return out


def codes_dir_for(patterns_dir: Path) -> Path:
    """knowledge/codes next to knowledge/patterns; the bundled tables when a KB has none."""
    mine = Path(patterns_dir).parent / "codes"
    if mine.is_dir():
        return mine
    from porter.config import bundled_root

    return bundled_root() / "knowledge" / "codes"
