"""A report that pastes the line it blames in a fenced code block (```python ... ```), without a
traceback: a commit that rewrote that very line changed the code the report points at, as one that
rewrote a backticked statement did. Tracebacks, logs and short or prose lines in fences are not read.
A word joined by a hyphen (`LLaMA-Factory`) is a product's name, no code name to look for in the
messages. A small git history is built here."""

from __future__ import annotations

import textwrap

from porter.kb.history import mine
from porter.kb.history.candidates import distinctive_names
from porter.kb.history.lookup import HistorySource, analyse, reported_lines
from porter.kb.history.snippets import fenced_code_lines

from .test_history import History

LOOP = textwrap.dedent(
    """\
    class PartialLoop:
        def run(self, kwargs):
            image_data = (kwargs.get("multi_modal_data") or {}).get("image", None)
            return self.generate(kwargs["prompt"], image_data)

        def generate(self, prompt, image_data):
            return [prompt, image_data]
    """
)
FIXED = LOOP.replace('image_data = (kwargs.get("multi_modal_data") or {}).get("image", None)',
                     'image_data = self.images_of(kwargs.get("raw_prompt") or [])')
RENAMED = LOOP.replace("return [prompt, image_data]", "return [prompt, image_data, None]")
REPORT = textwrap.dedent(
    """\
    Fully async rollout drops the pictures of multi-modal prompts

    ### Steps to reproduce
    ```
    plug/agent/partial_loop.py
    ```
    The following code is executed:
    ```python
    image_data = (kwargs.get("multi_modal_data") or {}).get("image", None)
    ```
    However, `image_data` is `None`, even though the prompt holds the picture.
    """
)


def test_the_lines_a_report_pastes_in_fenced_blocks():
    text = textwrap.dedent(
        """\
        ```text
        plug version: 0.7.0
        ### a lost closing fence, then a tagged block
        ```python
        image_data = (kwargs.get("multi_modal_data") or {}).get("image", None)
        x = 0
        # rollout.n = 8 stays a comment
        ```
        ```
        Traceback (most recent call last):
          File "/x/plug/loop.py", line 3, in run
            image_data = (kwargs.get("multi_modal_data") or {}).get("video", None)
        ```
        ```
        (Worker pid=12) result = scheduler.schedule_requests(batch)
        ```
        ```bash
        python -m plug.main data.train_batch_size=1024
        ```
        Then the prose says image_data = nothing at all, which is no code.
        """
    )
    assert fenced_code_lines(text) == ('image_data = (kwargs.get("multi_modal_data") or {}).get("image", None)',)
    # backticked statements first, then the fenced lines, each once
    both = "`sorted_mask[i] = grammar_mask[j]` fails\n```python\nsorted_mask[i] = grammar_mask[j]\nresult = compute_the_mask(batch, size)\n```"
    assert reported_lines(both) == ("sorted_mask[i] = grammar_mask[j]", "result = compute_the_mask(batch, size)")


def test_a_product_name_joined_by_a_hyphen_is_no_code_name():
    text = "安装完 LLaMA-Factory 之后 pip install torch-npu, DeepSeek-V3 fails in decode_hs_or_q_c with GatherV3 --enable-prompt-tokens-details"
    assert distinctive_names(text) == ["--enable-prompt-tokens-details", "decode_hs_or_q_c", "GatherV3"]
    assert distinctive_names("LLaMAFactory breaks") == ["LLaMAFactory"]


def _history(tmp_path):
    h = History(tmp_path / "plug")
    h.commit("[Core] add the partial loop", {"plug/__init__.py": "", "plug/agent/__init__.py": "", "plug/agent/partial_loop.py": LOOP})
    h.tag("v0.1.0")
    for i, what in enumerate(("rollout", "reward", "trainer", "dataset", "tokenizer")):
        h.commit(f"[Feature] support a new {what} option", {f"plug/{what}.py": f"def run_{what}():\n    return {i}\n"})
    other = h.commit("[BugFix] fix partial loop outputs for async rollout", {"plug/agent/partial_loop.py": RENAMED})
    fix = h.commit("[BugFix] read images from the raw prompt (#21)",
                   {"plug/agent/partial_loop.py": FIXED.replace("return [prompt, image_data]", "return [prompt, image_data, None]")})
    return h, other, fix


def test_the_commit_that_rewrote_the_pasted_line_is_proposed(tmp_path):
    h, other, fix = _history(tmp_path)
    index = mine.build_index(h.root, tmp_path / "cache", "HEAD")[0]
    src = HistorySource("plug", h.root, packages=("plug",))
    title = REPORT.splitlines()[0]
    found = analyse(src, [], REPORT, {"plug": "0.1.0"}, tmp_path / "cache", index=index, title_line=title,
                    quoted=reported_lines(REPORT))
    assert [c.sha for c in found.candidates][:1] == [fix]
    assert any("the report quotes" in e for e in found.candidates[0].evidence)
    # the other fix of the same file changed another line: no quote of the report's
    assert not any("the report quotes" in e for c in found.candidates if c.sha == other for e in c.evidence)
    # without the pasted line nothing ties the report to the fix
    plain = analyse(src, [], REPORT, {"plug": "0.1.0"}, tmp_path / "cache", index=index, title_line=title)
    assert fix not in [c.sha for c in plain.candidates]
