"""predicates._may_name_version is False only where the rendered expression cannot match _VERSIONISH
(the test skips rendering assignments that cannot be version predicates)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from porter.upgrade.predicates import _VERSIONISH, _candidate_lines, _may_name_version

EXPRESSIONS = [
    'vllm_version_is("0.10.0")', "f(x)", "a.b.version_tuple >= (0, 9)", "not is_legacy()", "x and VERSION > 2",
    "f(version=1)", "f(ver=1)", "(lambda version: version)(1)", "(lambda v: v)(1)", 'f("ver" "sion")',
    'f(f"{x}version")', 'f(f"ver{x}sion")', "f(b'VERSION')", "f(b'version\\x00')", "f(b'vers ion')",
    "f('\\x76ersion')", "f('Version')", "f('versio')", "g(1e5, 1j, ...)", "h(x.Version)", "k[VERSION]",
    "m(*version)", "n(**kw)", "x if version else y", "[v for version in vs]", "(y := versioned())", "a < b < c",
]


@pytest.mark.parametrize("text", EXPRESSIONS)
def test_agrees_with_the_rendered_text(text):
    expr = ast.parse(text, mode="eval").body
    assert _may_name_version(expr) == bool(_VERSIONISH.search(ast.unparse(expr)))


def test_never_skips_a_match_in_real_sources():
    root = Path(__file__).resolve().parents[2] / "porter"
    seen = 0
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Call, ast.Compare, ast.BoolOp, ast.UnaryOp)):
                seen += 1
                if _VERSIONISH.search(ast.unparse(node)):
                    assert _may_name_version(node), ast.unparse(node)
    assert seen > 1000


def test_candidate_lines_keep_version_tests_only():
    tree = ast.parse("a = f(x)\nb = vllm_version_is('0.9')\nc = not IS_VERSION\nd = x < y\ne, f = version()\n")
    assert _candidate_lines(list(ast.walk(tree))) == [2, 3]
