"""vime: a compact RL post-training runtime (rollout, GRPO, weight sync, checkpoints,
MXFP8 rollout, speculative decoding) with acceptance gates. `import vime` needs no torch_npu."""

__version__ = "0.1.0"
