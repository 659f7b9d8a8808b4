"""An override that no longer fits its base is reported as a break only where an upstream call reaches
it (synthetic `myplug` on upkg 1.0 -> 2.0, no network).

The MoE quant-method pattern: `MethodBase.apply` drops its required `top_k` at 2.0; the plugin's
`MyMethod.apply` still requires it. Upstream calls `.apply(...)` in several places: `Layer.forward_impl`
through `self.quant_method` (annotated `MethodBase`), a linear layer through `self.quant_method`
annotated with the common root `QuantBase` (its call never fitted `MethodBase.apply` at 1.0 either, so
its receiver holds another class), and a helper whose parameter is annotated with an unrelated class.
When the plugin's `MyLayer` overrides `forward_impl`, no call reaches `MyMethod.apply`: a note. Without
that override the `Layer` call reaches it and the finding stays breaking; an untyped receiver new at the
target may hold the plugin's object and keeps it breaking too."""

from __future__ import annotations

import ast
import textwrap

from porter.config import load_config
from porter.upgrade.analyze import AnalysisRequest, run_analysis
from porter.upgrade.callers import _receiver
from tests.upgrade.upgrade_fixtures import write_tree

QUANT = """
    class QuantBase:
        def apply(self, layer, *weights, **kwargs):
            raise NotImplementedError


    class LinearMethod(QuantBase):
        def apply(self, layer, x, bias=None):
            return x


    class Weights:
        def apply(self, layer, x, logits):
            return x
"""
METHOD_OLD = """
    from upkg.quant import QuantBase


    class MethodBase(QuantBase):
        def apply(self, layer, x, router_logits, top_k):
            raise NotImplementedError
"""
METHOD_NEW = METHOD_OLD.replace(", router_logits, top_k):", ", router_logits):")
LAYER = """
    from upkg.method import MethodBase
    from upkg.quant import QuantBase, Weights


    class Layer:
        def __init__(self, method):
            self.quant_method: MethodBase = method

        def forward(self, x):
            return self.forward_impl(x)

        def forward_impl(self, x):
            return self.quant_method.apply(self, x, None{top_k})


    class Linear:
        def __init__(self, method):
            self.quant_method: QuantBase = method

        def forward(self, x, bias):
            return self.quant_method.apply(self, x, bias)


    def helper(w: Weights, layer, x):
        return w.apply(layer, x, None)
"""
UNTYPED = """
    def run(thing, layer, x):
        return thing.apply(layer, x, None)
"""
OLD = {"upkg/__init__.py": '__version__ = "1.0"\n', "upkg/quant.py": QUANT, "upkg/method.py": METHOD_OLD,
       "upkg/layer.py": LAYER.format(top_k=", 2")}
NEW = {"upkg/__init__.py": '__version__ = "2.0"\n', "upkg/quant.py": QUANT, "upkg/method.py": METHOD_NEW,
       "upkg/layer.py": LAYER.format(top_k="")}
PLUGIN_METHOD = """
    from upkg.method import MethodBase


    class MyMethod(MethodBase):
        def apply(self, layer, x, router_logits, top_k):
            return x
"""
PLUGIN_LAYER = """
    from upkg.layer import Layer


    class MyLayer(Layer):
        def forward_impl(self, x):
            return x  # the plugin's own MoE path: upstream's forward_impl, and its apply call, never run
"""


def _apply(project, tmp_path, plugin_files, new=NEW):
    old, new = write_tree(tmp_path / "old", OLD), write_tree(tmp_path / "new", new)
    plugin = write_tree(tmp_path / "plugin", {"myplug/__init__.py": "", **plugin_files})
    report = run_analysis(AnalysisRequest(plugin="myplug", target="2.0", baseline="1.0", plugin_path=plugin,
                                          upstream_paths={"1.0": old, "2.0": new}, config=load_config()))
    pick = lambda records: [r for r in records if r.symbol == "upkg.method.MethodBase.apply"
                            and r.detail.get("change") == "override_mismatch"]
    return pick(report.records), pick(report.notes)


def test_an_override_no_upstream_call_reaches_is_a_note(project, tmp_path):
    records, notes = _apply(project, tmp_path, {"myplug/method.py": PLUGIN_METHOD, "myplug/layer.py": PLUGIN_LAYER})
    assert records == []
    assert len(notes) == 1 and notes[0].detail["unreached_by_calls"] == 3
    assert "no upstream call reaches the override" in notes[0].message


def test_a_call_from_a_method_the_plugin_does_not_replace_keeps_it_breaking(project, tmp_path):
    records, notes = _apply(project, tmp_path, {"myplug/method.py": PLUGIN_METHOD})
    assert notes == [] and len(records) == 1
    assert records[0].severity.value == "breaking"
    assert records[0].detail["reaching_calls"] == ["upkg/layer.py:13"]  # Layer.forward_impl only


def test_an_untyped_receiver_may_hold_the_plugins_object(project, tmp_path):
    new = {**NEW, "upkg/runner.py": UNTYPED}
    records, _ = _apply(project, tmp_path, {"myplug/method.py": PLUGIN_METHOD, "myplug/layer.py": PLUGIN_LAYER}, new)
    assert len(records) == 1 and records[0].detail["reaching_calls"] == ["upkg/runner.py:2"]


def _receivers(source: str) -> dict[int, str]:
    tree = ast.parse(textwrap.dedent(source))
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "m":
            around = sorted((f for f in functions if f.lineno <= node.lineno <= f.end_lineno), key=lambda f: f.lineno)
            out[node.lineno] = _receiver(node.func.value, around)
    return out


def test_receivers_are_described_from_the_calling_function():
    found = _receivers("""
        import re
        class C:
            def f(self, p: "pkg.T", q, r: Optional[U] = None):
                self.m()
                self.a.m()
                p.m()
                q.m()
                r.m()
                re.m()
                loc: V = make()
                loc.m()
                other = q
                other.m()
                self.a.b.m()

                def inner(z):
                    self.m()
                    z.m()
                    p.m()
    """)
    assert found == {5: "self", 6: "self.a", 7: "ann:pkg.T", 8: "", 9: "ann:U", 10: "name:re", 12: "ann:V",
                     14: "", 15: "expr:self.a.b", 18: "self", 19: "", 20: "ann:pkg.T"}


def test_receivers_with_a_shared_memo_match_one_walk_per_site():
    """_receiver's per-function memo (one walk of each function for all its call sites) gives what a
    fresh walk per site gives, on locals annotated twice, rebound, bound in loops/withs and closures."""
    source = textwrap.dedent("""
        class C:
            def f(self, p: "pkg.T", *args, **kw):
                a: A = make()
                a: B = other()
                for b in args:
                    b.m()
                with open(p) as c:
                    c.m()
                a.m()
                kw.m()
                args.m()
                p.m()

                def inner(q: Q):
                    r: R = q
                    a.m()
                    q.m()
                    r.m()
                    p.m()
                    self.x.m()
                return inner
    """)
    tree = ast.parse(source)
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    memo: dict = {}
    sites = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "m":
            around = sorted((f for f in functions if f.lineno <= node.lineno <= f.end_lineno), key=lambda f: f.lineno)
            assert _receiver(node.func.value, around, memo) == _receiver(node.func.value, around), node.lineno
            sites += 1
    assert sites == 11 and len(memo) == 2


HOLDERS = """
    from typing import Optional

    from upkg.quant import LinearMethod


    class Holder:
        quant_method = None  # a class-body default: the instance's class comes from __init__

        def __init__(self):
            self.quant_method = LinearMethod()

        def run(self, layer, x):
            return self.quant_method.apply(layer, x, None)


    class Annotated:
        quant_method: Optional["LinearMethod"] = None  # quoted inside Optional

        def run(self, layer, x):
            return self.quant_method.apply(layer, x, None)
"""


def test_a_class_body_default_does_not_hide_the_class_init_assigns(project, tmp_path):
    # Holder.quant_method is an unannotated class-body field: the receiver's class is what __init__ assigns
    # (LinearMethod, no MethodBase), not unknown; Annotated's field is typed through Optional["..."].
    new = {**NEW, "upkg/holders.py": HOLDERS}
    records, notes = _apply(project, tmp_path, {"myplug/method.py": PLUGIN_METHOD, "myplug/layer.py": PLUGIN_LAYER}, new)
    assert records == []
    assert len(notes) == 1 and notes[0].detail["unreached_by_calls"] == 5
