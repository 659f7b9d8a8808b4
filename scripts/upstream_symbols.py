"""Write knowledge/symbols/<upstream>.txt: the distinctive top-level class and function names an
upstream defines in any of the given source trees (one name a line, sorted).

`porter diagnose` uses the table as evidence that an error is about that upstream's API: a
capture declared `defined_in` a table (see docs/kb-schema.md, "Structured signatures") hits only
when the captured name is in it. Model classes (vllm/model_executor/models) are left out: they
share their names with transformers' classes, and so do vllm/transformers_utils' mirrored model
configs and processors. Names must be distinctive to count: classes in CamelCase with two
capitals and 8+ characters, functions with an underscore and 12+ characters. `--not-in DIR`
(repeatable) drops the names another framework's tree also defines (megatron-core's
VocabParallelEmbedding is not evidence of vllm).

    git -C /work/.mirror/NVIDIA+Megatron-LM/repo archive HEAD megatron | tar -x -C /tmp/megatron
    python scripts/upstream_symbols.py vllm /work/cache/vllm-*/vllm --not-in /tmp/megatron > knowledge/symbols/vllm.txt
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

SKIP_PARTS = ("model_executor/models/", "transformers_utils/", "/tests/", "/test/")
CLASS = re.compile(r"^[A-Z][A-Za-z0-9]*[A-Z][A-Za-z0-9]*$")
FUNC = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)+$")


def distinctive(name: str, is_class: bool) -> bool:
    if is_class:
        return len(name) >= 8 and CLASS.match(name) is not None
    return len(name) >= 12 and FUNC.match(name) is not None


def names_in(tree_root: Path) -> set[str]:
    out: set[str] = set()
    for path in tree_root.rglob("*.py"):
        rel = path.as_posix()
        if any(part in rel for part in SKIP_PARTS):
            continue
        try:
            module = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError):
            continue
        for node in module.body:
            if isinstance(node, ast.ClassDef) and distinctive(node.name, True):
                out.add(node.name)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and distinctive(node.name, False):
                out.add(node.name)
    return out


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    upstream, rest = argv[0], argv[1:]
    roots, others = [], []
    while rest:
        arg = rest.pop(0)
        if arg == "--not-in":
            if not rest:
                print("--not-in needs a directory", file=sys.stderr)
                return 2
            others.append(Path(rest.pop(0)))
        else:
            roots.append(Path(arg))
    names: set[str] = set()
    for root in roots + others:
        if not root.is_dir():
            print(f"{root}: not a directory", file=sys.stderr)
            return 2
    for root in roots:
        names |= names_in(root)
    shared: set[str] = set()
    for root in others:
        shared |= names & names_in(root)
    names -= shared
    print(f"# {upstream}: {len(names)} names from {len(roots)} trees, {len(shared)} shared with "
          f"{', '.join(p.name for p in others) or 'no other tree'} left out (scripts/upstream_symbols.py)")
    for name in sorted(names):
        print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
