"""porter.redact runs a rule only when the text holds a literal every match of it contains: the
result must equal running every rule (the gates save regex compiles and scans, nothing else)."""

from __future__ import annotations

import random

from porter import redact


def every_rule(line: str) -> str:
    for _, pat in redact._TOKEN_PATTERNS:
        line = pat.sub(redact.MASK, line)
    line = redact._HEADER.sub(lambda m: f"{m.group('name')}{m.group('sep')}{redact.MASK}", line)
    line = redact._BEARER.sub(lambda m: m.group("scheme") + redact.MASK, line)
    line = redact._URL_USERINFO.sub(redact._userinfo, line)
    line = redact._ASSIGNMENT.sub(redact._assignment, line)
    return redact._FLAG.sub(redact._flag, line)


PIECES = ["password=hunter2", "API_KEY: abc", "--token x", "Authorization: Bearer abcdefghij", "https://u:p@host/x",
          "hf_" + "a" * 25, "ghp_" + "b" * 30, "sk-" + "c" * 25, "AKIA" + "A" * 16, "eyJ" + "a" * 12 + "." + "b" * 12 + "." + "c" * 12,
          "cookie: a=b", "x-auth-token: q", "ak=1", "obs_sk: zz", " ", "=", ":", "-", "Ⅽookie", "paſsword=1", "ſecret: v", "K",
          "BEARER ", "X-API-KEY:", "glpat-" + "d" * 22, "sk_live_" + "e" * 20, "xoxb-" + "f" * 12, "npm_" + "g" * 36, "abc", "'", '"']


def test_gated_rules_equal_every_rule():
    rng = random.Random(11)
    changed = 0
    for _ in range(4000):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randrange(1, 7)))
        expected = every_rule(text)
        assert redact._redact_fragments(text) == expected, text
        changed += expected != text
    assert changed > 2000  # the pieces hold secrets often enough to exercise every rule


def test_secret_key_gate_equals_the_regexes():
    rng = random.Random(12)
    names = ["password", "db_password", "HF_TOKEN", "max_tokens", "tokenizer", "task", "OBS_AK", "ak", "sk", "mask",
             "pad_token", "ſecret", "accessKeySecret", "x", "auth", "use_auth", "SESSION_ID", "Kak", "desk"]
    names += ["".join(rng.choice(names) for _ in range(2)) for _ in range(500)]
    for name in names:
        plain = bool(redact._KEY.match(name)) and not redact._NOT_SECRET_KEY.search(name)
        assert redact.is_secret_key(name) == plain, name


def _unmemoized(value):
    """redact_data as it was before its per-call memos: every string and key judged afresh."""
    if isinstance(value, str):
        return redact.redact_text(value)
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if isinstance(key, str) and redact.is_secret_key(key) and isinstance(item, (str, int, float)) \
                    and not isinstance(item, bool) and item not in ("", redact.MASK):
                out[key] = redact.MASK
            else:
                out[redact.redact_text(key) if isinstance(key, str) else key] = _unmemoized(item)
        return out
    if isinstance(value, (list, tuple)):
        return [_unmemoized(v) for v in value]
    return value


def test_memoized_redact_data_equals_judging_every_string():
    """A payload that repeats keys and values (as a report does) redacts as if each were judged alone."""
    rng = random.Random(13)
    keys = ["symbol", "password", "HF_TOKEN", "max_tokens", "detail", "ak", "", "url", 3]
    values = PIECES + ["", 7, True, None, 2.5, "[REDACTED]"]
    rows = [{rng.choice(keys): rng.choice(values) for _ in range(4)} for _ in range(300)]
    payload = {"rows": rows, "again": rows[:50], "texts": [rng.choice(PIECES) for _ in range(200)]}
    got = redact.redact_data(payload)
    assert got == _unmemoized(payload)
    assert any(v == redact.MASK for row in got["rows"] for v in row.values())
