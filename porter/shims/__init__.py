"""Shim generation: DriftRecords -> ShimGroups (strategies, pure) -> files and edits in a fork
tree (apply). Templates live in porter/shims/templates; see docs/port.md."""
