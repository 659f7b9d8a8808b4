"""Structured signatures: templates with captures, exception types, codes with ranges, frames,
co-occurrence windows; captures fill the fix text."""

from __future__ import annotations

import re

import pytest

from porter.kb.families import FamilyError, code_in_range, code_regex, fill, template_regex
from porter.kb.lint import lint
from porter.kb.matcher import diagnose_text
from porter.kb.regexsafety import check_regex
from porter.kb.render import diagnose_payload

from .conftest import entry

DTYPE_ENTRY = entry(
    "TNPU-001", "torch-npu",
    [{"exception": "RuntimeError", "template": "\"{op}\" not implemented for '{dtype}'", "weight": 0.9}],
    title="{op} has no NPU kernel for {dtype}",
    fix=["Cast the input of {op} away from {dtype}, or upgrade torch_npu."],
    verify="python -c 'import torch, torch_npu; print(\"{op}\")'",
)
SO_ENTRY = entry(
    "CANN-001", "cann",
    [{"template": "{library}: cannot open shared object file: No such file or directory", "weight": 0.8}],
    fix=["Find {library}: `ldconfig -p | grep {library}`; source set_env.sh so its directory is on LD_LIBRARY_PATH."],
    verify="python -c 'import ctypes; ctypes.CDLL(\"{library}\")'",
)


@pytest.fixture
def family_kb(fixture_kb):
    fixture_kb.add(DTYPE_ENTRY, 'RuntimeError: "addmm_impl_cpu_" not implemented for \'Half\'\n')
    fixture_kb.add(SO_ENTRY, "OSError: libhccl.so: cannot open shared object file: No such file or directory\n")
    return fixture_kb


@pytest.mark.parametrize("op, dtype", [("addmm_impl_cpu_", "Half"), ("index_put", "BFloat16"), ("npu_fused_attn", "Float8_e4m3fn")])
def test_one_family_entry_covers_every_op_and_dtype(family_kb, op, dtype):
    trace = f"Traceback (most recent call last):\n  File \"x.py\", line 3, in <module>\ntorch.RuntimeError: \"{op}\" not implemented for '{dtype}'\n"
    diag = diagnose_text(family_kb.compiled(), trace)
    assert diag.top is not None and diag.top.entry.id == "TNPU-001"
    assert diag.top.captures == {"op": op, "dtype": dtype}
    payload = diagnose_payload(diag, "-", {})["matches"][0]
    assert payload["title"] == f"{op} has no NPU kernel for {dtype}"
    assert payload["fix"] == [f"Cast the input of {op} away from {dtype}, or upgrade torch_npu."]
    assert op in payload["verify"]


@pytest.mark.parametrize("lib", ["libhccl.so", "libascendcl.so", "libtorch_npu.so.2.1", "libopapi.so"])
def test_one_family_entry_covers_every_shared_library(family_kb, lib):
    diag = diagnose_text(family_kb.compiled(), f"ImportError: {lib}: cannot open shared object file: No such file or directory\n")
    assert diag.top.entry.id == "CANN-001" and diag.top.captures["library"] == lib
    assert f"grep {lib}" in diagnose_payload(diag, "-", {})["matches"][0]["fix"][0]


def test_template_tolerates_whitespace_changes(family_kb):
    diag = diagnose_text(family_kb.compiled(), "libacl.so:   cannot open\tshared object file: No such file or directory\n")
    assert diag.top is not None and diag.top.captures["library"] == "libacl.so"


def test_exception_type_must_match(family_kb):
    # same message under another exception type is not this entry's failure
    diag = diagnose_text(family_kb.compiled(), "ValueError: \"addmm\" not implemented for 'Half'\n")
    assert "TNPU-001" not in [m.entry.id for m in diag.matches]


def test_code_ranges(fixture_kb):
    fixture_kb.add(entry("CANN-002", "cann", [{"code": "161000-161999", "weight": 0.7}], fix=["aclnn parameter error {code}"]),
                   "EZ1001: aclnnAdd failed, error code is 161002\n")
    kb = fixture_kb.compiled()
    assert diagnose_text(kb, "aclnnAddGetWorkspaceSize failed, error code is 161002\n").top.captures == {"code": "161002"}
    assert diagnose_text(kb, "error code is 361001\n").status == "unknown"
    assert diagnose_text(kb, "took 1610023 ms\n").status == "unknown"  # part of a longer number
    assert code_in_range("EI0001-EI0099", "EI0006") and not code_in_range("EI0001-EI0099", "EI0106")
    assert not re.search(code_regex("EZ9999"), "xEZ9999") and re.search(code_regex("EZ9999"), "(EZ9999)")


def _old_code_regex(spec: str) -> str:
    """code_regex before it put the literal head first: the lookbehind guard, then the code."""
    from porter.kb.families import code_needle, parse_code

    prefix, digits, lo, hi = parse_code(spec)
    head = code_needle(spec)
    rest = digits - (len(head) - len(prefix))
    body = re.escape(prefix) + head[len(prefix):] + (rf"\d{{{rest}}}" if rest else "")
    return rf"(?<![A-Za-z0-9])(?P<code>{body})(?![\w])" if prefix else rf"(?<!\d)(?P<code>{body})(?!\d)"


def test_code_regex_finds_what_the_guard_first_form_found():
    import random

    rng = random.Random(5)
    specs = ["EZ9999", "EI0019-EI0020", "EI0001-EI9999", "161000-161999", "507899", "500001-599999", "ERR00100-ERR00199",
             "EE1001", "E40020", "100000-999999", "A_1-A_9"]
    pieces = ["E", "Z", "I", "EZ", "EI", "ERR", "00", "0", "1", "9", "99", "9999", "161", "507", "899", "5", "x", "_", " ", "(",
              "a", "é", "٣", ".", "-", "A_", "EI00", "EZ9999", "161002", "1610023"]
    pieces += [spec.split("-")[0] for spec in specs]  # each code itself, so that every pattern is reached
    lines = ["".join(rng.choice(pieces) for _ in range(rng.randrange(1, 12))) for _ in range(6000)]
    for spec in specs:
        new, old = re.compile(code_regex(spec)), re.compile(_old_code_regex(spec))
        hits = 0
        for line in lines:
            got = [(m.span(), m.group("code")) for m in new.finditer(line)]
            assert got == [(m.span(), m.group("code")) for m in old.finditer(line)], (spec, line)
            hits += bool(got)
        assert hits, spec  # the fuzz reaches every pattern


def test_frame_and_within_window(fixture_kb):
    fixture_kb.add(entry("VASC-001", "vllm-ascend",
                         [{"frame": "vllm_ascend", "weight": 0.3},
                          {"exception": "ImportError", "template": "cannot import name '{symbol}' from '{module}'", "weight": 0.5}],
                         match="all", signatures_within=None), "x\n")
    path = fixture_kb.patterns / "vllm-ascend" / "VASC-001.yaml"
    text = path.read_text().replace("match: all", "match: all\n  within: 5")
    path.write_text(text)
    kb = fixture_kb.compiled()
    near = ('Traceback (most recent call last):\n  File "/x/site-packages/vllm_ascend/platform.py", line 1, in <module>\n'
            "    from vllm.foo import Bar\nImportError: cannot import name 'Bar' from 'vllm.foo'\n")
    assert diagnose_text(kb, near).top.entry.id == "VASC-001"
    far = near.replace("    from vllm.foo import Bar\n", "    from vllm.foo import Bar\n" + "INFO filler\n" * 20)
    assert diagnose_text(kb, far).status == "unknown"


def test_lint_reports_bad_structured_items(fixture_kb):
    fixture_kb.add(entry("VLLM-001", "vllm", [{"code": "161999-161000"}]), "x\n")
    fixture_kb.add(entry("VLLM-002", "vllm", [{"template": "{op} {dtype}"}]), "x\n")
    fixture_kb.add(entry("VLLM-003", "vllm", [{"template": "needs a {op} here", "captures": {"dtype": "x"}}]), "x\n")
    fixture_kb.add(entry("VLLM-004", "vllm", [{"literal": "a long literal text"}], fix=["upgrade {op}"]), "a long literal text\n")
    report = lint(fixture_kb.patterns, check_examples=False)
    errors = {p.file.rsplit("/", 1)[-1]: p.problem for p in report.errors}
    assert "empty" in errors["VLLM-001.yaml"]
    assert "literal text" in errors["VLLM-002.yaml"]
    assert "not placeholders" in errors["VLLM-003.yaml"]
    assert any(w.field == "fix" and "{op}" in w.problem for w in report.warnings)


def test_generated_regexes_pass_the_safety_check():
    for t in ["{library}: cannot open shared object file", "cannot import name '{symbol}' from '{module}'", "{*} failed for {op} with {dtype}"]:
        assert check_regex(template_regex(t)).ok, t
    with pytest.raises(FamilyError):
        template_regex("{a}{b}")
    assert fill("run {op} then {x} and awk '{print $1}'", {"op": "add"}, {"op", "x"}) == "run add then <x> and awk '{print $1}'"
