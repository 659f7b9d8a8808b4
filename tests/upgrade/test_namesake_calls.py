"""A call on an object an upstream factory builds whose class the factory's annotation does not name
(`self.model = get_model(); self.model.compute_logits(h, None)`, vllm-ascend's eagle proposer, vllm
0.10.2 -> 0.11.0): when every upstream method of that name took the call at the baseline and none
does at the target, the interface changed under every class the object could be, and the call
breaks. On a synthetic plugin (`myplug` on upkg 1.0 -> 2.0), no network:
  * four model classes drop `meta` from `logits` at 2.0: `model.logits(h, None)` breaks;
  * `model.logits(h)` fits both: nothing;
  * `embed` changes in one class of four only: no interface change, nothing;
"""

from __future__ import annotations

import pytest

from porter.upgrade.index import Param, Signature
from porter.upgrade.models import Severity
from porter.upgrade.namesakes import interface_break, method_signatures
from tests.upgrade.upgrade_fixtures import analyze_two_lane


def _models(logits: str, odd_embed: str) -> str:
    classes = []
    for i in range(4):
        embed = odd_embed if i == 0 else "(self, ids)"
        classes.append(f"""
        class Model{i}:
            def logits{logits}:
                return h

            def embed{embed}:
                return ids
        """)
    return "\n".join(classes)


OLD = {
    "upkg/__init__.py": '__version__ = "1.0"\n',
    "upkg/models.py": _models("(self, h, meta)", "(self, ids)"),
    "upkg/loader.py": """
        import torch.nn as nn


        def get_model(config) -> nn.Module:
            return None
    """,
}
NEW = {
    "upkg/__init__.py": '__version__ = "2.0"\n',
    "upkg/models.py": _models("(\n                self,\n                h,  # (tokens, hidden)\n            )", "(self, ids, scale)"),
    "upkg/loader.py": OLD["upkg/loader.py"],
}
PLUGIN = {
    "myplug/__init__.py": "",
    "myplug/proposer.py": """
        from upkg.loader import get_model


        class Proposer:
            def load(self, config):
                self.model = get_model(config)

            def propose(self, h, ids):
                logits = self.model.logits(h, None)
                again = self.model.logits(h)
                emb = self.model.embed(ids)
                return logits, again, emb
    """,
}


@pytest.fixture
def report(project, tmp_path):
    return analyze_two_lane(tmp_path, OLD, NEW, PLUGIN)


def _interface(report):
    return [f for f in list(report.records) + list(report.notes) if f.detail.get("change") == "interface_changed"]


def test_a_call_every_namesake_dropped_breaks(report):
    found = _interface(report)
    assert [(f.detail["method"], f.severity) for f in found] == [("logits", Severity.BREAKING)]
    assert [s.line for s in found[0].sites] == [9]  # `logits(h, None)`; `logits(h)` still fits
    assert found[0].detail["definitions"] == {"baseline": 4, "target": 4}
    assert "upkg.loader.get_model" in found[0].symbol


def test_method_signatures_reads_multiline_headers(tmp_path):
    from tests.upgrade.upgrade_fixtures import write_tree
    from porter.upgrade.index import TreeIndex

    root = write_tree(tmp_path / "t", NEW)
    sigs = method_signatures(TreeIndex(root, ["upkg"]), {"logits", "embed", "get_model"})
    assert [s.names for s in sigs["logits"]] == [("self", "h")] * 4
    assert sorted(len(s.names) for s in sigs["embed"]) == [2, 2, 2, 3]
    assert sigs["get_model"] == []  # a module-level function is no method


def test_interface_break_needs_agreement_on_both_sides():
    def sig(*names: str) -> Signature:
        return Signature(tuple(Param(n, "pos", False) for n in names))

    old, new = [sig("self", "h", "m")] * 4, [sig("self", "h")] * 4
    assert interface_break(old, new, 2, ())
    assert interface_break(old, new, 1, ("m",))
    assert not interface_break(old, new, 1, ())  # fits both
    assert not interface_break(old[:2], new[:2], 2, ())  # two namesakes say nothing
    assert not interface_break(old, new[:2] + [sig("self", "h", "m")] * 2, 2, ())  # half still fit



def test_method_signatures_do_not_depend_on_the_names_asked_with(tmp_path):
    """A header spelt `def logits (self, h)` is found whether or not another name asked with it has a
    `def name(` in the same file (the file filter is the header pattern's own core, per name)."""
    from tests.upgrade.upgrade_fixtures import write_tree
    from porter.upgrade.index import TreeIndex

    root = write_tree(tmp_path / "t", {"upkg/__init__.py": "", "upkg/m.py": """
        class A:
            def logits (self, h):
                return h

            def embed(self, ids):
                return ids
    """})
    index = TreeIndex(root, ["upkg"])
    alone, together = method_signatures(index, {"logits"}), method_signatures(index, {"logits", "embed"})
    assert [s.names for s in alone["logits"]] == [("self", "h")]
    assert together["logits"] == alone["logits"]


def test_started_search_in_a_pool_answers_as_in_process(tmp_path):
    """start_method_signatures() splits a large tree into pool jobs submitted at once; collected in file
    order, the answer equals the in-process one."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.upgrade.upgrade_fixtures import write_tree
    from porter.upgrade.index import TreeIndex
    from porter.upgrade.namesakes import start_method_signatures

    files = {"upkg/__init__.py": ""}
    for i in range(240):
        files[f"upkg/m{i:03d}.py"] = f"class C{i}:\n    def logits(self, h{', extra' * (i % 3 == 0)}):\n        return h\n"
    root = write_tree(tmp_path / "t", files)
    serial = method_signatures(TreeIndex(root, ["upkg"]), {"logits", "embed"})
    with ThreadPoolExecutor(2) as pool:
        submitted = []
        real_submit = pool.submit
        pool.submit = lambda fn, *a, **k: submitted.append(fn) or real_submit(fn, *a, **k)  # type: ignore[method-assign]
        collect = start_method_signatures(TreeIndex(root, ["upkg"], pool=pool), {"logits", "embed"})
        assert len(submitted) > 1  # submitted when started, in chunks
        assert collect() == serial
    assert len(serial["logits"]) == 240 and serial["embed"] == []


def test_the_analysis_uses_the_search_started_before_the_checks(project, tmp_path, monkeypatch):
    """drift starts the namesake search once the parse is done (the workers are idle during the checks);
    _namesake_calls then collects it instead of reading both trees itself."""
    from porter.upgrade import drift

    def not_again(*_args, **_kwargs):
        raise AssertionError("the trees were searched again after the checks")

    monkeypatch.setattr(drift, "method_signatures", not_again)
    assert [f.detail["method"] for f in _interface(analyze_two_lane(tmp_path, OLD, NEW, PLUGIN))] == ["logits"]
