"""The one slug function: `<upstream>-<target>` lowercased and hyphenated."""

from __future__ import annotations

import re

_UNSAFE = re.compile(r"[^a-z0-9.]+")


def slugify(*parts: str) -> str:
    """`slugify("vllm", "main") == "vllm-main"`; `slugify("torch", "2.12.0rc3") == "torch-2.12.0rc3"`."""
    text = "-".join(p for p in parts if p)
    text = _UNSAFE.sub("-", text.lower()).strip("-.")
    text = re.sub(r"-{2,}", "-", text)
    if not text:
        raise ValueError("cannot build a slug from empty parts")
    return text


def port_branch(slug: str) -> str:
    return f"ascend-port/{slug}"
