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
