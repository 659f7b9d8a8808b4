"""Score knowledge-base entries against a trace.

Order of evidence:
1. exact signatures (literal substring of a clean line, or regex search on the de-prefixed
   line), combined per entry with the all/any rule and a noisy-or of the item weights;
2. small boosts: the entry's layer is hinted by frame packages / error codes; the installed
   versions (from `--env`) fall inside `applies_to` (outside: the entry is demoted);
3. fuzzy similarity (rapidfuzz) of the extracted error texts against `symptoms` and titles,
   only when no signature reaches the threshold, and capped below signature confidence.

`scan` reads the input chunk-wise: lines holding none of the prefilter needles are skipped
unless the extractor is inside a traceback (see porter.kb.index); the rest go through the
token index and the extractor. That is what keeps a 50 MB log fast.
"""

from __future__ import annotations

from itertools import accumulate, repeat
from operator import add

from porter.kb.env import normalise_package  # also re-exported: porter.smoke imports it from here
from bisect import bisect_right

from porter.kb.extract import CODE_LINE, Extractor, Signals, is_errorish
from porter.kb.index import ASCII_TOKEN as _ASCII_TOKEN
from porter.kb.index import TOKEN as _TOKEN
from porter.kb.index import CompiledKB, candidate_lines, distinct_lines, prefilter_needles, presence_keys, present_needles, squeeze  # CompiledKB re-exported too
from porter.kb.normalize import fuzzy_form, iter_batches, strip_prefix
from porter.kb.schema import KBEntry
from porter.lazyre import LazyPattern
from porter.record import field, record

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the diagnose start-up path
if TYPE_CHECKING:
    from typing import BinaryIO, Callable, Iterable, Iterator, Mapping

    from porter.kb.split import Prepared

MATCH_THRESHOLD = 0.5  # signature confidence at which an entry is a diagnosis
SPLIT_MIN_BYTES = 8 << 20  # a file this big is scanned in two processes (porter.kb.split; below, a fork does not pay)
FUZZY_MAX_CONFIDENCE = 0.55  # fuzzy evidence never outranks a firm signature hit
FUZZY_MATCH_SCORE = 93.0  # rapidfuzz score (0-100) at which a fuzzy hit counts as a match
FUZZY_NEAR_SCORE = 60.0  # shown as a near miss for unknown traces
CLOSE_MARGIN = 0.1  # top two within this: show discriminators
LAYER_BOOST = 0.05
VERSION_BOOST = 0.02
VERSION_DEMOTE = 0.4  # multiply confidence when the installed version is outside applies_to
MAX_HITS_PER_SIGNATURE = 3
FUZZY_QUERY_CHARS = 400
FUZZY_MAX_QUERIES = 12
LINE_MEMO_BYTES = 8 << 20  # the recent-line memo's estimated size (line, de-prefixed line, tokens)
FEW_KEYLESS = 16  # at most this many keyless needles in a chunk: test each on the line
TOKEN_MEMO_BYTES = 4 << 20  # the token memo of the keyless needles, bounded in estimated bytes (cleared when full)
TOKEN_MEMO_FRESH_PER_LINE = 24  # a line with more unseen tokens tests the needles directly
# the token memo pays once tokens repeat: before this many distinct lines were matched (a single
# trace, where every token is new), each line tests the keyless needles directly, which is cheaper
TOKEN_MEMO_AFTER_LINES = 512
SEVERITY_RANK_PENALTY = {"warning": 0.15, "info": 0.3}  # ranking only; confidence is unchanged
ADVICE_NOTE = "only warning lines matched and the log shows no failure: advice for a working run, not a diagnosis"
# a line the program labels a warning: "Warning:", "UserWarning:", "[W ...]" / glog "W0428 ...", "CAUTION:"
_WARNING_LINE = LazyPattern(r"(?i:\b\w{0,40}warn(?:ing)?s?\b|\bCAUTION\b)|^\s{0,8}\[?W\d{0,6}[\s\]]")
# the rest of a message wrapped onto the next line: indented text (not a traceback frame or an exception
# line), or a line that starts mid-sentence in lower case (not a `label:` of its own such as pip's "error:")
_CONTINUATION = LazyPattern(r"^(?:[ \t]+(?!File \"|Traceback\b|[\w.]{0,80}(?:Error|Exception|Warning)\b)\S|[a-z(](?![\w.-]{0,30}:(?:\s|$)))")
# a warning level in the log prefix the matcher strips: a level word, or glog's `W0501 ...` / `[W ...` after
# another prefix (`(pid=3) W0501 12:00:01.000 123 x.cc:1] `)
_WARNING_PREFIX = LazyPattern(r"(?i:\bwarn(?:ing)?\b)|(?:^|[\s)\]])\[?W\d{0,6}[\s\]]")
CONTINUATION_LINES = 3
MAX_JOINED_CHARS = 2048  # a wrapped message joined to its first line: longer pairs are not joined
# a line that carries an exception message (`TypeError: ...`, `` `AttributeError: ...``, `raised ValueError: ...`)
_EXCEPTION_HEAD = LazyPattern(r"(?<![\w.])(?:[A-Za-z_]\w{0,60}\.){0,6}[A-Za-z_]\w{0,80}(?:Error|Exception):")
# the start of a wrapped message's rest: lower-case text (not a `label:` of its own such as "hint:" or "error:"),
# an opening parenthesis, or a quoted name (`'weight_loader'`)
_WRAPPED_REST = LazyPattern(r"^(?:[a-z(](?![\w.-]{0,30}:(?:\s|$))|['\"`][\w.<])")
_SENTENCE_END = ".!?`\u3002"  # a first line ending so is complete: the next line is a new sentence
WARNING_LINES_MAX = 1 << 16  # how far back a wrapped message's first (labelled) line may be


# -- results --------------------------------------------------------------------------------------
@record(frozen=True)
class MatchedLine:
    line: int
    text: str
    signature: str
    kind: str  # literal | regex | fuzzy
    weight: float

    def to_dict(self) -> dict:
        return {"line": self.line, "text": self.text, "signature": self.signature, "kind": self.kind, "weight": self.weight}


@record
class Match:
    entry: KBEntry
    confidence: float
    method: str  # signature | fuzzy
    lines: list[MatchedLine]
    explain: dict = field(default_factory=dict)
    version_notes: list[str] = field(default_factory=list)
    captures: dict[str, str] = field(default_factory=dict)  # named captures of structured signatures

    @property
    def specificity(self) -> int:
        return sum(len(m.signature) for m in self.lines)


@record
class Diagnosis:
    status: str  # match | unknown
    matches: list[Match]  # top-k above the threshold (empty when unknown)
    near_misses: list[Match]  # best candidates below the threshold
    signals: Signals
    close: bool  # the top two are within CLOSE_MARGIN

    @property
    def top(self) -> Match | None:
        return self.matches[0] if self.matches else None


# -- scanning -------------------------------------------------------------------------------------
_NO_TOKENS: frozenset[str] = frozenset()


def scan(kb: CompiledKB, batches: Iterable[list[str]], prepared: Callable[[list[str]], "Prepared | None"] | None = None,
         emit: Callable[[list[str], "Prepared"], None] | None = None,
         memo_bytes: int | None = None) -> tuple[dict[int, dict[int, list[tuple[int, str]]]], Signals | None]:
    """One pass over batches of clean lines: signature hits per entry/signature, and the signals.

    Per batch, only lines that contain a prefilter needle (signature anchors, error words,
    traceback markers) are looked at, plus every line while the extractor is inside a
    traceback; that is what keeps a 50 MB log of mostly healthy output fast.

    Two-process mode (porter.kb.split): `emit` makes this the helper's pass: no extractor; per
    batch, its wanted lines, their prefix lengths, error-ish flags and signature matches go to
    `emit` (the hits returned are empty, the signals None). `prepared(batch)` gives the main
    pass that work for a batch (or None: the batch is scanned here): it then only feeds the
    extractor, and records the matches in line order, so the result is the one-process result.
    `memo_bytes`: the bound of the recent-line memo (default LINE_MEMO_BYTES).
    """
    if memo_bytes is None:
        memo_bytes = LINE_MEMO_BYTES
    hits: dict[int, dict[int, list[tuple[int, str]]]] = {}
    if emit is None:
        extractor = Extractor()
    else:
        from porter.kb.split import IdleExtractor, Prepared

        extractor = IdleExtractor()
    feed = extractor.feed
    index, sigs = kb.index, kb.sigs
    always_needles = [(needle, pos) for pos in kb.always for needle in sigs[pos].needles]
    always_bare = {pos for pos in kb.always if not sigs[pos].needles}  # regexes with no literal anchor
    keys = index.keys()
    findall = _TOKEN.findall
    ascii_words = _ASCII_TOKEN.findall  # the same tokens for an ASCII line, found faster than with \w
    needles = prefilter_needles(kb)
    keys_of = tuple(presence_keys(group) for group in needles) if needles is not None else ((), ())
    always_keys = presence_keys(needle for needle, _ in always_needles)
    always_now = always_needles  # this chunk's: the needles absent from it are not tested per line
    # A chunk of unique lines defeats that filter, and testing ~150 needles on every line was
    # most of a crafted log's cost. A needle occurs in a line only if its longest word lies
    # inside one of the line's tokens, so a memo of token -> the needles whose word it holds
    # leaves a few `needle in line` tests per line; each still decides, so the result is the same.
    # The memo is keyed by tokens with every digit as 0 (and a needle's word likewise: a word
    # inside a token stays inside it when digits are zeroed, so the held needles are a superset,
    # each still tested on the line): a unique number on every line (a step, a pid) is then one
    # known token, and a line whose tokens are all known costs one C-level superset test.
    # (needle's longest word zeroed, needle, pos), the wordless needles, and the worded ones a
    # digits-only token can hold: built with the widened index (`widen_index`), which comes
    # before the memo's first use; a single trace never needs them (~250 findall calls)
    worded: list[tuple[str, str, int]] = []
    wordless: list[tuple[str, int]] = []
    digit_worded: list[tuple[str, str, int]] = []
    token_needles: dict[str, tuple[tuple[str, int], ...]] = {}  # tokens that hold some needle's word
    known_tokens: set[str] = set()
    token_chars = 0
    literals = [(sig.pattern, sig.collapsed) if sig.kind == "literal" else None for sig in sigs]
    # A keyed literal's key alone sends every line with that word to the checker, and a log of
    # signature words (crafted, or just busy) then costs two substring tests and a squeezed copy
    # per candidate. Every match holds all of the signature's interior tokens (`required_tokens`):
    # the index's vocabulary holds them too, and one subset test of the line's vocabulary
    # tokens drops a candidate that lacks one. The literal and regex tests still decide.
    # (Built once TOKEN_MEMO_AFTER_LINES lines were matched: a single trace does not repay it.)
    vocab: dict[str, list[int]] = index
    widen_at = max(1, TOKEN_MEMO_AFTER_LINES)
    needs: list[frozenset[str]] = [_NO_TOKENS] * len(sigs)  # (empty: no test)

    def widen_index() -> None:
        nonlocal vocab, needs, keys
        worded[:] = [(max(words, key=len).translate(_DIGITS_AS_ZERO), needle, pos) for needle, pos in always_needles if (words := findall(needle))]
        wordless[:] = [(needle, pos) for needle, pos in always_needles if not findall(needle)]
        digit_worded[:] = [item for item in worded if item[0].isdigit()]
        vocab = dict(index)
        needs = []
        for sig in sigs:
            for tok in sig.tokens:
                vocab.setdefault(tok, [])
            needs.append(frozenset(sig.tokens))
        keys = vocab.keys()
    full: set[int] = set()  # signatures with MAX_HITS_PER_SIGNATURE hits: more would be dropped, skip them

    def keyless_by_tokens(clean: str, zeroed: list[str], candidates: set[int]) -> bool:
        """Add the keyless signatures whose needle is in `clean`; `zeroed`: its tokens, with
        digits as 0 in a pretokenized chunk (a token's held needles depend only on its zeroed
        form, so both forms can share the memo). False: too many new tokens (a long line of
        unique words), test the needles directly instead."""
        if not known_tokens.issuperset(zeroed):
            fresh = set(zeroed).difference(known_tokens)
            if len(fresh) > TOKEN_MEMO_FRESH_PER_LINE:
                return False
            nonlocal token_chars
            token_chars += sum(map(len, fresh)) + 60 * len(fresh)  # ~ the memo's bytes: the tokens and their set slots
            if token_chars > TOKEN_MEMO_BYTES:
                known_tokens.clear()
                token_needles.clear()
                token_chars = sum(map(len, fresh)) + 60 * len(fresh)
            for tok in fresh:
                zero = tok.translate(_DIGITS_AS_ZERO)  # (a chunk's tokens come zeroed already; a line's do not)
                held = tuple((needle, pos) for word, needle, pos in (digit_worded if zero.isdigit() else worded) if word in zero)
                if held:
                    token_needles[tok] = held
            known_tokens.update(fresh)
        for tok in token_needles.keys() & zeroed:
            for needle, pos in token_needles[tok]:
                if needle in clean:
                    candidates.add(pos)
        for needle, pos in wordless:
            if needle in clean:
                candidates.add(pos)
        return True

    # Logs repeat lines verbatim (every rank prints the same warning): remember what a line
    # matched, so a repeat costs one dict lookup. Bounded in characters (long unique lines would
    # make a count bound hold hundreds of MB): cleared when full.
    seen_lines: dict[str, tuple[str, list[str], list[int]]] = {}
    memo_chars = 0

    matched_lines = 0

    # the current chunk's lines as word tokens separated by spaces, exact and with digits as 0
    # (`_chunk_words`), when the chunk is ASCII and most of its lines are looked at; else None
    chunk_words: list[str] | None = None
    chunk_zeroed: list[str] = []

    def match_line(clean: str, at: int) -> tuple[str, list[str], list[int]]:
        """`at`: the line's index in the current chunk (-1: `clean` is no line of it, such as a
        wrapped message joined to its first line: tokenized on its own)."""
        nonlocal matched_lines
        matched_lines += 1
        if matched_lines == widen_at:
            widen_index()
        text = strip_prefix(clean)
        if chunk_words is not None and at >= 0:
            tokens = chunk_words[at].split()
        else:
            tokens = ascii_words(clean) if clean.isascii() else findall(clean)
        candidates: set[int] = set(always_bare)
        present = keys & tokens  # the line's vocabulary tokens, intersected in C
        candidates.update(*map(vocab.__getitem__, present))  # one call for all of their signatures
        if len(always_now) <= FEW_KEYLESS or matched_lines <= TOKEN_MEMO_AFTER_LINES or not keyless_by_tokens(
                clean, chunk_zeroed[at].split() if chunk_words is not None and at >= 0 else tokens, candidates):
            for needle, pos in always_now:  # keyless signatures: a substring test first
                if needle in clean:
                    candidates.add(pos)
        if full:
            candidates -= full
        if not candidates:
            return text, tokens, []
        squeezed = None  # built for the first candidate that needs it
        matched = []
        # a candidate that lacks a token every match holds is dropped first (most of a busy line's)
        for pos in [pos for pos in candidates if needs[pos] <= present]:
            literal = literals[pos]
            if literal is None:  # regex or code: its needles, required words, then the regex
                if squeezed is None:
                    squeezed = squeeze(clean)
                if sigs[pos].hits(clean, text, squeezed):
                    matched.append(pos)
            elif literal[0] in clean:
                matched.append(pos)  # `_Sig.hits` for a literal, inlined: most candidates are literals
            elif literal[1] is not None:
                if squeezed is None:
                    squeezed = squeeze(clean)
                if literal[1] in squeezed:
                    matched.append(pos)
        return text, tokens, matched

    def record_hits(matched: Iterable[int], number: int, text: str) -> None:
        for pos in matched:
            sig = sigs[pos]
            slot = hits.setdefault(sig.ei, {}).setdefault(sig.si, [])
            if len(slot) < MAX_HITS_PER_SIGNATURE:
                slot.append((number, text))
                if len(slot) == MAX_HITS_PER_SIGNATURE:
                    full.add(pos)

    def known_line(clean: str, at: int, key: str | None = None) -> tuple[str, list[str], list[int]]:
        """`key`: the memo key when it is not `clean` itself (a joined wrapped message)."""
        nonlocal memo_chars
        if key is None:
            key = clean
        known = seen_lines.get(key)
        if known is None:
            memo_chars += 3 * len(clean) + 100
            if memo_chars > memo_bytes:
                seen_lines.clear()
                memo_chars = 3 * len(clean) + 100
            known = seen_lines[key] = match_line(clean, at)
        return known

    def wrapped_hits(clean: str, text: str, matched: list[int] | None, at: int) -> tuple[list[int], str]:
        """An exception message wrapped onto the next line (a pasted report, a terminal, a
        logger splitting a long message): the signatures that hit the two lines joined and
        neither line alone, with the joined de-prefixed text. Only lines in this chunk: a wrap
        across a chunk boundary is not joined (the same in a two-process scan, whose batches
        are these chunks)."""
        if at + 1 >= len(lines):
            return [], text
        nxt = lines[at + 1].rstrip()
        rest = wrapped_rest(clean, text, nxt)
        if rest is None:
            return [], text
        joined = clean + " " + rest
        if len(joined) > MAX_JOINED_CHARS:
            return [], text
        joined_text, _, both = known_line(joined, -1, "\0" + joined)  # (NUL: no clean line holds one)
        if not both:
            return [], joined_text
        alone = set(matched or ()) | set(known_line(nxt, at + 1)[2])
        return [pos for pos in both if pos not in alone], joined_text

    warning_lines: set[int] = set()  # bounded: past WARNING_LINES_MAX, lines are no longer noted (the gate then errs to a diagnosis)
    tail: list[str] = []  # the previous batch's last lines (a wrapped message may span two batches)

    def prefix_warns(clean: str, text: str) -> bool:
        """Does the log prefix the matcher strips (vllm's `WARNING 05-01 ...`, `[WARNING]`, glog
        `W0501 ...`) label this line a warning?"""
        if len(text) >= len(clean):
            return False
        prefix = clean[: len(clean) - len(text)]
        # every match holds a "w" or "W" (`warn` case-folded, glog's `W0501`): most prefixes (a rank, a
        # timestamp, INFO) have neither and skip the regex, which cost ~1 us a line on a busy log
        return ("W" in prefix or "w" in prefix) and _WARNING_PREFIX.search(prefix) is not None

    def continues_warning(text: str, at: int) -> bool:
        """Is this line the wrapped rest of a warning-labelled line just above it?"""
        if not _CONTINUATION.match(text):
            return False
        for back in range(1, CONTINUATION_LINES + 1):
            j = at - back
            raw = (lines[j] if j >= 0 else (tail[j] if -j <= len(tail) else "")).rstrip()
            prev = strip_prefix(raw)
            if not prev:
                return False
            if _WARNING_LINE.search(raw):  # the label may sit in the previous line's prefix too
                return True
            if not _CONTINUATION.match(prev):
                return False
        return False

    def note_warning(number: int) -> None:
        if len(warning_lines) < WARNING_LINES_MAX:
            warning_lines.add(number)

    def look_at(line: str, number: int, at: int) -> None:
        clean = line.rstrip()
        if not clean:
            feed(number, clean, ())
            return
        if prep is not None:
            slot = prep_slots.get(at)
            if slot is not None:  # the helper process did this line's matching
                cut = prep.cuts[slot]
                text = clean[cut:] if cut else clean
                matched = prep.matches.get(at)
                if matched:
                    record_hits(matched, number, text)
                if ("Error:" in text or "Exception:" in text):  # the helper does not join: its batches end where ours do
                    joined, joined_text = wrapped_hits(clean, text, matched, at)
                    if joined:
                        record_hits(joined, number, joined_text)
                if cut and prefix_warns(clean, text) or matched and continues_warning(text, at):
                    note_warning(number)
                feed(number, text, None, prep.errorish[slot] == 1)
                return
        text, tokens, matched = known_line(clean, at)
        if matched:
            record_hits(matched, number, text)
        if "Error:" in text or "Exception:" in text:  # (one C-level test on most lines: the wrap check is rare)
            joined, joined_text = wrapped_hits(clean, text, matched, at)
            if joined:
                record_hits(joined, number, joined_text)
        if prefix_warns(clean, text) or matched and continues_warning(text, at):
            note_warning(number)
        feed(number, text, tokens)

    # the helper's pass: per wanted line, what the main pass needs (see `Prepared`)
    out_cuts: list[int] = []
    out_errorish = bytearray()
    out_matches: dict[int, list[int]] = {}
    counts: dict[int, int] = {}  # hits per signature in the helper's part: at MAX_HITS_PER_SIGNATURE the main pass drops more too

    def prepare_line(line: str, number: int, at: int) -> None:
        clean = line.rstrip()
        if not clean:
            out_cuts.append(0)
            out_errorish.append(2)  # blank: the main pass feeds it as it is
            return
        text, tokens, matched = known_line(clean, at)
        out_cuts.append(len(clean) - len(text))
        out_errorish.append(1 if is_errorish(text, tokens) else 0)
        if matched:
            out_matches[at] = matched
            for pos in matched:
                if counts.get(pos, 0) + 1 >= MAX_HITS_PER_SIGNATURE:
                    full.add(pos)
                counts[pos] = counts.get(pos, 0) + 1

    base = 0  # line number before this batch
    matched_before = matched_lines
    prep = None  # this batch's Prepared (porter.kb.split), when the helper did its matching
    prep_slots: dict[int, int] = {}
    for lines in batches:
        n = len(lines)
        wanted: Iterable[int] = range(n)
        always_now = always_needles
        prep = prepared(lines) if prepared is not None else None
        if prep is not None:
            wanted = prep.wanted
            prep_slots = dict(zip(wanted, range(len(wanted))))
            chunk_words = None  # a line matched here (inside a traceback) is tokenized on its own
        elif needles is not None:
            ends = list(accumulate(map(add, map(len, lines), repeat(1))))  # offset just past each line's "\n"
            text = "\n".join(lines)
            folded = text.lower()
            if len(folded) == len(text):  # a few Unicode letters change length when lower-cased
                folded_needles, exact_needles = needles
                digest = distinct_lines(lines, text)
                if digest is not None:  # one pass per needle that occurs at all, not per needle
                    folded_needles = present_needles(folded_needles, keys_of[0], digest.lower())
                    exact_needles = present_needles(exact_needles, keys_of[1], digest)
                    always_now = [item for item, key in zip(always_needles, always_keys) if key in digest]
                found = candidate_lines(folded, ends, folded_needles)
                candidate_lines(text, ends, exact_needles, found)
                found.update(bisect_right(ends, m.start()) for m in CODE_LINE.finditer(text))
                wanted = sorted(found)
            # the previous chunk's count of lines matched (not found in the memo) predicts this one's:
            # a busy log that repeats its lines would pay the translate for nothing
            chunk_words = _chunk_words(text, matched_lines - matched_before, n)
            if chunk_words is not None:
                chunk_zeroed = text.translate(_WORD_GAPS_DIGITS_AS_ZERO).split("\n")
        else:
            chunk_words = None
        matched_before = matched_lines
        if emit is not None:  # the helper's pass: every wanted line, no extractor
            wanted = list(wanted)
            for i in wanted:
                prepare_line(lines[i], base + i + 1, i)
            emit(lines, Prepared(wanted, out_cuts, bytes(out_errorish), out_matches))
            out_cuts, out_errorish, out_matches = [], bytearray(), {}
            base += n
            continue
        upcoming = iter(wanted)
        i, last = next(upcoming, n), -1
        while i < n:
            if i - last > 1 and extractor.idle:
                for j in range(max(last + 1, i - 3), i):  # context for a block that may open here
                    extractor.note(lines[j].rstrip())
            look_at(lines[i], base + i + 1, i)
            last = i
            if extractor.idle:  # jump to the next wanted line
                i = next(upcoming, n)
                while i <= last:
                    i = next(upcoming, n)
            else:  # inside a traceback: every line counts
                i += 1
        base += n
        tail = lines[-CONTINUATION_LINES:]
        extractor.seen(base)
    if emit is not None:
        return hits, None
    signals = extractor.signals()
    signals.warning_lines = warning_lines
    return hits, signals


def wrapped_rest(clean: str, text: str, nxt: str) -> str | None:
    """The rest of an exception message that `nxt`, the line after `clean`, continues (its text,
    stripped), or None. `text`: `clean` without its log prefix. The first line holds an
    exception message and does not end a sentence; the next is not blank, not a new log record
    (a log prefix of its own that `clean` does not share), not a traceback frame, and starts
    the way a wrapped sentence goes on (lower case, a parenthesis, a quoted name)."""
    if not nxt or clean[-1:] in _SENTENCE_END or not _EXCEPTION_HEAD.search(text):
        return None
    rest = strip_prefix(nxt)
    if len(rest) != len(nxt) and nxt[: len(nxt) - len(rest)] != clean[: len(clean) - len(text)]:
        return None  # a record of its own
    rest = rest.strip()
    if not rest or rest.startswith('File "') or not _WRAPPED_REST.match(rest):
        return None
    return rest


# Every ASCII character that is not a word character (`[A-Za-z0-9_]`, what `\w` is on ASCII)
# becomes a space, "\n" excepted: one C-level translate of the chunk, then `str.split()` per
# line gives the line's tokens (`ASCII_TOKEN.findall`) at a third of the regex's cost.
_WORD_GAPS = str.maketrans({c: " " for c in map(chr, range(128)) if not (c.isalnum() or c in "_\n")})
_WORD_GAPS_DIGITS_AS_ZERO = str.maketrans({**{c: " " for c in map(chr, range(128)) if not (c.isalnum() or c in "_\n")},
                                           **{d: "0" for d in "123456789"}})
_DIGITS_AS_ZERO = str.maketrans("123456789", "000000000")


def _chunk_words(text: str, matched: int, lines: int) -> list[str] | None:
    """The chunk's lines with non-word characters as spaces (`_WORD_GAPS`), when the chunk is
    ASCII (str.translate's fast path) and at least a quarter of its lines are expected to be
    matched (`matched`: the previous chunk's count; else translating the whole chunk costs
    more than the regex on the few lines)."""
    if matched * 4 < lines or not text.isascii():
        return None
    return text.translate(_WORD_GAPS).split("\n")


def _version_check(entry: KBEntry, env: Mapping[str, str]) -> tuple[float, list[str]]:
    """(multiplier, notes) from comparing installed versions with the entry's applies_to."""
    if not env or not entry.applies_to:
        return 1.0, []
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version

    factor, notes = 1.0, []
    for rng in entry.applies_to:
        installed = env.get(normalise_package(rng.package))
        if not installed:
            continue
        try:
            inside = SpecifierSet(rng.versions).contains(Version(installed), prereleases=True)
        except (InvalidSpecifier, InvalidVersion):
            continue
        if inside:
            notes.append(f"{rng.package} {installed} is within {rng.versions}")
        else:
            factor = min(factor, VERSION_DEMOTE)
            notes.append(f"{rng.package} {installed} is outside {rng.versions}: demoted")
    return factor, notes


def _score_signatures(
    kb: CompiledKB, hits: Mapping[int, Mapping[int, list[tuple[int, str]]]], signals: Signals, env: Mapping[str, str]
) -> list[Match]:
    out: list[Match] = []
    hinted = set(signals.layer_hints[:3])
    for ei, sig_hits in hits.items():
        entry = kb.entries[ei]
        sigs = entry.signatures
        explain: dict = {"hit": sorted(sig_hits), "of": len(sigs), "match": entry.match}
        if entry.match == "all":
            missing = [i for i, s in enumerate(sigs) if s.required and i not in sig_hits]
            if not missing and entry.within and not _within(entry, sig_hits):
                missing = [i for i, s in enumerate(sigs) if s.required]
                explain["outside_window"] = entry.within
            if missing:
                explain["missing_required"] = missing
                partial = 1.0
                for i in sig_hits:
                    partial *= 1.0 - sigs[i].weight
                # a partial all-match is only ever a near miss
                confidence = min(MATCH_THRESHOLD - 0.05, (1.0 - partial) * 0.5)
                explain["partial"] = True
                out.append(Match(entry, round(confidence, 4), "signature", _lines(entry, sig_hits), explain))
                continue
        miss = 1.0
        for i in sig_hits:
            miss *= 1.0 - sigs[i].weight
        base = 1.0 - miss
        explain["noisy_or"] = round(base, 4)
        confidence = base
        if entry.layer in hinted:
            confidence += LAYER_BOOST * (1.0 - confidence) + 0.001
            explain["layer_boost"] = entry.layer
        factor, notes = _version_check(entry, env)
        if factor < 1.0:
            confidence *= factor
        elif notes:
            confidence += VERSION_BOOST * (1.0 - confidence)
        if notes:
            explain["versions"] = notes
        out.append(Match(entry, round(min(confidence, 0.99), 4), "signature", _lines(entry, sig_hits), explain, notes,
                         _captures(kb, ei, sig_hits)))
    return out


def _within(entry: KBEntry, sig_hits: Mapping[int, list[tuple[int, str]]]) -> bool:
    """Some hit of every required item lies within `entry.within` lines of one anchor hit."""
    required = [i for i, s in enumerate(entry.signatures) if s.required]
    first, rest = required[0], required[1:]
    for anchor, _ in sig_hits[first]:
        if all(any(abs(n - anchor) <= entry.within for n, _ in sig_hits[i]) for i in rest):
            return True
    return False


def _captures(kb: CompiledKB, ei: int, sig_hits: Mapping[int, list[tuple[int, str]]]) -> dict[str, str]:
    """Named captures from the hit lines, earliest line first (the causal occurrence wins)."""
    sigs = kb.signature_map()
    out: dict[str, str] = {}
    for si in sorted(sig_hits):
        sig = sigs.get((ei, si))
        if sig is None or sig.kind == "literal":
            continue
        for _, text in sorted(sig_hits[si]):
            for k, v in sig.captures(text).items():
                out.setdefault(k, v)
    return out


def _lines(entry: KBEntry, sig_hits: Mapping[int, list[tuple[int, str]]]) -> list[MatchedLine]:
    lines = []
    for si in sorted(sig_hits):
        sig = entry.signatures[si]
        for number, text in sig_hits[si]:
            lines.append(MatchedLine(number, text, sig.pattern, sig.kind, sig.weight))
    lines.sort(key=lambda m: m.line)
    return lines


def _fuzzy(kb: CompiledKB, signals: Signals, env: Mapping[str, str]) -> list[Match]:
    """Best fuzzy score per entry from the error texts against symptoms and titles."""
    texts = signals.error_texts(limit=FUZZY_MAX_QUERIES)
    if not texts or not kb.fuzzy_targets:
        return []
    from rapidfuzz import fuzz, process

    choices = [form for _, form in kb.fuzzy_targets]
    best: dict[int, tuple[float, str]] = {}

    def keep(idx: int, score: float, text: str) -> None:
        ei = kb.fuzzy_targets[idx][0]
        if score > best.get(ei, (0.0, ""))[0]:
            best[ei] = (score, text)

    for text in texts:
        query = fuzzy_form(text[:FUZZY_QUERY_CHARS])  # a 12 k-char log line would make matching crawl
        if len(query) < 20:
            continue
        for _, score, idx in process.extract(query, choices, scorer=fuzz.token_sort_ratio, score_cutoff=FUZZY_NEAR_SCORE, limit=5):
            keep(idx, score, text)
        if len(query) >= 30:
            # partial_ratio costs ~40 us per pair: only on the few choices that share the most words
            for _, _, idx in process.extract(query, choices, scorer=fuzz.token_set_ratio, limit=8):
                score = fuzz.partial_ratio(query, choices[idx])
                # partial alignment of a long query inside a symptom: worth a little less
                score = score * 0.97 if len(choices[idx]) >= len(query) else score * 0.9
                if score >= FUZZY_NEAR_SCORE:
                    keep(idx, score, text)
    out = []
    for ei, (score, text) in best.items():
        entry = kb.entries[ei]
        confidence = FUZZY_MAX_CONFIDENCE * score / 100.0
        if score < FUZZY_MATCH_SCORE:
            confidence = min(confidence, MATCH_THRESHOLD - 0.05)
        factor, notes = _version_check(entry, env)
        confidence *= factor
        line = next((e.line for e in signals.exceptions if e.text == text), 0)
        out.append(
            Match(
                entry,
                round(confidence, 4),
                "fuzzy",
                [MatchedLine(line, text, "symptoms", "fuzzy", 0.0)],
                {"fuzzy_score": round(score, 1)},
                notes,
            )
        )
    return out


def _effective(m: Match) -> float:
    # a warning-class finding (an op falling back to CPU, a slow mirror) explains a failure less
    # than an error entry that also matched: rank it as if it were this much less confident
    return m.confidence - SEVERITY_RANK_PENALTY.get(m.entry.severity, 0.0)


def _rank_key(m: Match) -> tuple:
    return (-_effective(m), -len(m.lines), -m.specificity, m.entry.id)


def failure_shown(m: Match, signals: Signals) -> bool:
    """Does the log show a failure, beyond the warning lines an entry matched? An
    exception, an error code, or an error-ish line (matched or elsewhere) that is not itself
    warning-labelled (torch_npu's `[W ...] Warning: ... check ... failed` notes print on
    working runs)."""
    # lines the program labelled a warning outside their text (a stripped `WARNING ...` prefix, a wrapped warning):
    # vllm's "WARNING ... Failed to import from vllm._C with ModuleNotFoundError(...)" prints on every working
    # vllm-ascend start; an exception or a code quoted in such a line is not the run failing
    warned = signals.warning_lines
    if signals.exceptions or signals.codes:
        # ... nor is a code in a line the program labels a warning in its text (`[W ...] Warning: ... EZ9999 ...`)
        texts = {block.start + i: text for block in signals.blocks for i, text in enumerate(block.lines)}
        if any(e.line not in warned for e in signals.exceptions):
            return True
        if any(line not in warned and not _WARNING_LINE.search(texts.get(line, "")) for _, _, line in signals.codes):
            return True
    # a matched line counts only when the program did not label it a warning itself: torchvision's "UserWarning:
    # Failed to load image Python extension: ... undefined symbol ... you can ignore this warning" is error-ish
    # words in a warning of a working run
    if any(_unlabelled_error(ml.text) and ml.line not in warned for ml in m.lines):
        return True
    own = {ml.line for ml in m.lines}
    return any(_unlabelled_error(text)
               for block in signals.blocks for i, text in enumerate(block.lines) if block.start + i not in own and block.start + i not in warned)


def _unlabelled_error(text: str) -> bool:
    """An error-ish line the program did not itself label a warning."""
    return is_errorish(text) and not _WARNING_LINE.search(text)


def _advice_only(firm: list[Match], signals: Signals) -> tuple[list[Match], list[Match]]:
    """An entry that matched only lines the program itself labels as warnings (an op falling
    back to CPU, a CANN function torch_npu could not find and works around) describes a working
    run unless the log also fails: without a failure it is advice, kept as a near miss. An entry
    for a hang or a bad setting matches other lines and stays a diagnosis."""
    kept, advice = [], []
    for m in firm:
        warned = m.lines and all(_WARNING_LINE.search(ml.text) or ml.line in signals.warning_lines for ml in m.lines)
        if warned and not failure_shown(m, signals):
            m.explain["advice"] = ADVICE_NOTE
            advice.append(m)
        else:
            kept.append(m)
    return kept, advice


def decide(kb: CompiledKB, hits, signals: Signals, env: Mapping[str, str] | None = None, top: int = 3) -> Diagnosis:
    env = dict(env or {})
    candidates = sorted(_score_signatures(kb, hits, signals, env), key=_rank_key)
    firm = [m for m in candidates if m.confidence >= MATCH_THRESHOLD]
    near = [m for m in candidates if m.confidence < MATCH_THRESHOLD]
    firm, advice = _advice_only(firm, signals)
    near = sorted(near + advice, key=_rank_key)
    if not firm:
        fuzzy = sorted(_fuzzy(kb, signals, env), key=_rank_key)
        firm = [m for m in fuzzy if m.confidence >= MATCH_THRESHOLD]
        near = sorted(near + [m for m in fuzzy if m.confidence < MATCH_THRESHOLD], key=_rank_key)
    from porter.kb.causal import causal_order

    firm = causal_order(firm, _effective)
    if kb.calibration is not None and firm:
        firm, abstained = _calibrated(kb.calibration, firm)
        near = sorted(near + abstained, key=_rank_key)
    matches = firm[: max(1, top)]
    close = len(firm) >= 2 and abs(firm[0].confidence - firm[1].confidence) <= CLOSE_MARGIN
    return Diagnosis(
        status="match" if matches else "unknown",
        matches=matches,
        near_misses=near[: max(3, top)],
        signals=signals,
        close=close,
    )


def _calibrated(calibration, firm: list[Match]) -> tuple[list[Match], list[Match]]:
    """Replace the weight-based score by the calibrated probability of being right; answers
    below ABSTAIN_BELOW become near misses (the evidence is too generic to assert a cause)."""
    from porter.kb.calibrate import ABSTAIN_BELOW, MIN_SAMPLES_TO_ABSTAIN, features

    floor = ABSTAIN_BELOW if calibration.samples >= MIN_SAMPLES_TO_ABSTAIN else 0.0

    kept, dropped = [], []
    probabilities = [calibration.probability(features(m, firm)) for m in firm]  # before any score changes
    for m, p in zip(firm, probabilities):
        p = round(min(p, 0.99), 4)
        m.explain["score"] = m.confidence
        m.explain["calibrated"] = p
        m.confidence = p
        (kept if p >= floor else dropped).append(m)
    return kept, dropped


def _without_private_keys(batches: Iterable[list[str]]) -> Iterator[list[str]]:
    """Mask PEM private-key bodies before any line is kept: kept lines are redacted one by one
    later, and a lone base64 line of a key does not look like a secret on its own."""
    from porter.redact import mask_private_key_lines

    inside = False
    for lines in batches:
        inside = mask_private_key_lines(lines, inside)
        yield lines


def diagnose_stream(kb: CompiledKB, stream: BinaryIO, env: Mapping[str, str] | None = None, top: int = 3,
                    fd: int | None = None) -> Diagnosis:
    """`fd`: the descriptor of the file `stream` reads from its start, when it is one: a big
    file is then scanned in two processes (porter.kb.split; same result)."""
    if fd is None or not _big_file(fd):
        hits, signals = scan(kb, _without_private_keys(iter_batches(stream)))
    else:
        from porter.kb.split import scan_file

        hits, signals = scan_file(kb, stream, fd)
    return decide(kb, hits, signals, env, top)


def _big_file(fd: int) -> bool:
    """A regular file of SPLIT_MIN_BYTES or more, read from its start (checked before
    porter.kb.split is imported: most calls get a small trace)."""
    import os
    import stat

    try:
        st = os.fstat(fd)
        return stat.S_ISREG(st.st_mode) and st.st_size >= SPLIT_MIN_BYTES and os.lseek(fd, 0, os.SEEK_CUR) == 0
    except OSError:
        return False


def diagnose_text(kb: CompiledKB, text: str, env: Mapping[str, str] | None = None, top: int = 3) -> Diagnosis:
    import io

    return diagnose_stream(kb, io.BytesIO(text.encode("utf-8", "surrogatepass")), env, top)
