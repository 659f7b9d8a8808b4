"""libcst edits of plugin code: import lines split and redirected, members appended, comments kept."""

from __future__ import annotations

from porter.shims.apply import add_members, rewrite_imports
from porter.shims.model import MemberAdd

MOVES = {("up.a", "X"): "pkg.compat.a"}


def test_mixed_line_is_split_and_comment_kept():
    src = "import os\n# leading comment\nfrom up.a import X, Y  # trailing\n"
    out, count, done = rewrite_imports(src, MOVES)
    assert out == "import os\n# leading comment\nfrom up.a import Y  # trailing\nfrom pkg.compat.a import X\n"
    assert count == 1 and done == {("up.a", "X")}


def test_only_moved_name_keeps_the_line_comments():
    src = "# why we need X\nfrom up.a import X  # keep me\n"
    out, _, _ = rewrite_imports(src, MOVES)
    assert out == "# why we need X\nfrom pkg.compat.a import X  # keep me\n"


def test_parenthesized_alias_and_nested_block():
    src = "try:\n    from up.a import (\n        X as XX,\n        Z,\n    )\nexcept ImportError:\n    pass\n"
    out, count, _ = rewrite_imports(src, MOVES)
    assert "from up.a import (\n        Z,\n    )" in out
    assert "    from pkg.compat.a import X as XX\n" in out
    assert count == 1
    compile(out, "t", "exec")


def test_reexport_path_of_the_same_package_is_rewritten():
    out, _, done = rewrite_imports("from up import X\n", MOVES)
    assert out == "from pkg.compat.a import X\n"
    assert done == {("up.a", "X")}


def test_other_packages_and_names_untouched():
    src = "from other.a import X\nfrom up.a import Y\nimport up.a\n"
    out, count, done = rewrite_imports(src, MOVES)
    assert out == src and count == 0 and not done


def test_star_import_gets_explicit_shim_import():
    out, _, _ = rewrite_imports("from up.a import *\n", MOVES)
    assert out == "from up.a import *\nfrom pkg.compat.a import X\n"


def test_member_added_with_comments_and_idempotent():
    src = 'class Foo(Base):\n    """doc"""\n\n    def f(self):\n        return 1\n'
    add = MemberAdd("x.py", "Foo", "y", "# porter: why\ny = 0\n")
    out, applied = add_members(src, [add])
    assert out.endswith("        return 1\n\n    # porter: why\n    y = 0\n")
    assert applied == {("Foo", "y")}
    again, _ = add_members(out, [add])
    assert again == out  # already there: not added twice


def test_member_on_one_line_class():
    out, applied = add_members("class Bar: pass\n", [MemberAdd("x.py", "Bar", "m", "def m(self):\n    return 1\n")])
    compile(out, "t", "exec")
    namespace: dict = {}
    exec(out, namespace)
    assert namespace["Bar"]().m() == 1
    assert applied == {("Bar", "m")}


def _params_of(source: str, cls: str, method: str):
    import inspect

    namespace: dict = {}
    exec(source, namespace)
    return inspect.signature(getattr(namespace[cls], method))


def test_keyword_only_parameter_added_to_an_override_without_star():
    """The base gained `*, c=None`: the override gets a `*` and the keyword-only parameter (this crashed libcst)."""
    from porter.shims.apply import add_params
    from porter.shims.model import ParamAdd

    src = "class A:\n    def f(self, a, b=1):\n        return a, b\n"
    out, applied = add_params(src, [ParamAdd("x.py", "A", "f", (("c", "None", "keyword_only"), ("d", "2", "positional")))])
    assert applied == {("A", "f")}
    sig = _params_of(out, "A", "f")
    assert [(p.name, p.kind.name) for p in sig.parameters.values()] == [
        ("self", "POSITIONAL_OR_KEYWORD"), ("a", "POSITIONAL_OR_KEYWORD"), ("b", "POSITIONAL_OR_KEYWORD"),
        ("d", "POSITIONAL_OR_KEYWORD"), ("c", "KEYWORD_ONLY")]
    namespace: dict = {}
    exec(out, namespace)
    assert namespace["A"]().f(1, 2, 3, c=4) == (1, 2)  # the new upstream call shape is accepted


def test_parameters_added_after_positional_only_ones():
    from porter.shims.apply import add_params
    from porter.shims.model import ParamAdd

    src = "class A:\n    def g(self, a, /, b):\n        return a + b\n"
    out, _ = add_params(src, [ParamAdd("x.py", "A", "g", (("a", "None", "positional"), ("c", "None", "keyword_only")))])
    sig = _params_of(out, "A", "g")
    # `a` is already there (positional-only): not added twice, which would be a SyntaxError.
    assert [p.name for p in sig.parameters.values()] == ["self", "a", "b", "c"]
    assert sig.parameters["a"].kind.name == "POSITIONAL_ONLY"


def test_crlf_file_keeps_its_line_endings(tmp_path):
    """Only the rewritten import line changes in a CRLF file (it used to come back LF: every line changed)."""
    from porter.shims.apply import apply_group
    from porter.shims.model import ImportMove, ShimGroup
    from porter.upgrade.models import DriftFamily

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_bytes(b"import os\r\nfrom up.a import X\r\n\r\nprint(os, X)\r\n")
    group = ShimGroup("g", DriftFamily.MOVED, "lazy_import_fallback", (), "s", (),
                      import_moves=(ImportMove("pkg/m.py", "up.a", "X", "pkg.compat.a"),))
    apply_group(tmp_path, group)
    assert (tmp_path / "pkg" / "m.py").read_bytes() == b"import os\r\nfrom pkg.compat.a import X\r\n\r\nprint(os, X)\r\n"


def test_long_redirected_import_is_wrapped():
    moves = {("up.a", n): "pkg.compat.a_long_module_name" for n in ("first_name", "second_name", "third_name_here")}
    out, _, _ = rewrite_imports("from up.a import first_name, second_name, third_name_here\n", moves)
    assert out == "from pkg.compat.a_long_module_name import (\n    first_name,\n    second_name,\n    third_name_here,\n)\n"
    compile(out, "t", "exec")
