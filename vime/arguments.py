"""Command-line flags of `python -m vime.train`: the production framework's names for the subset the
compact runtime implements, plus a few flags for the tiny model and device.

`parse_args(argv)` returns an argparse.Namespace and validates combinations (errors name the flag).
Defaults follow production where that is meaningful (`--seed 1234`, `--rollout-seed 42`,
`--eps-clip 0.2`, `--update-weight-buffer-size` 512 MiB, `--ci-train-rollout-logprob-abs-diff-threshold
0.1`); sizes default to a run that takes seconds on a CPU.
"""

from __future__ import annotations

import argparse
import json

SYNC_MODES = ("native",)

# Production (vime/slime/Megatron/vLLM) flags the compact runtime cannot honour: refused with the
# reason, never accepted and ignored. Flags that do have a meaning here are real arguments below.
REFUSED: dict[str, str] = {
    # data / rollout functions: the runtime trains on its synthetic prompts with the rule reward
    "--prompt-data": "the compact runtime trains on its synthetic prompt set (--num-prompts, --prompt-len)",
    "--input-key": "no dataset files are read (synthetic prompts)",
    "--label-key": "no dataset files are read (synthetic prompts; the label is the last token % 4)",
    "--metadata-key": "no dataset files are read",
    "--tool-key": "no dataset files are read",
    "--apply-chat-template": "prompts are token ids; there is no tokenizer",
    "--rm-type": "the reward is the built-in rule reward (vime.data.rule_reward)",
    "--custom-rm-path": "the reward is the built-in rule reward",
    "--reward-key": "the reward is the built-in rule reward",
    "--rollout-function-path": "the rollout is the engine's generate()",
    "--custom-generate-function-path": "the rollout is the engine's generate()",
    "--dynamic-sampling-filter-path": "no dynamic sampling filters",
    "--over-sampling-batch-size": "no over-sampling / dynamic sampling",
    "--partial-rollout": "no partial rollouts",
    "--balance-data": "one trainer rank: nothing to balance",
    "--rollout-stop": "use --eos-token-id (token ids, no tokenizer)",
    "--rollout-stop-token-ids": "use --eos-token-id (one stop token)",
    "--rollout-skip-special-tokens": "no detokenisation",
    "--eval-prompt-data": "no evaluation loop",
    "--eval-interval": "no evaluation loop",
    "--n-samples-per-eval-prompt": "no evaluation loop",
    "--eval-max-response-len": "no evaluation loop",
    "--eval-top-p": "no evaluation loop",
    # Megatron parallelism and memory features
    "--expert-tensor-parallel-size": "one trainer rank: no expert tensor parallelism",
    "--sequence-parallel": "one trainer rank: no sequence parallelism",
    "--recompute-granularity": "no activation recomputation",
    "--recompute-method": "no activation recomputation",
    "--recompute-num-layers": "no activation recomputation",
    "--micro-batch-size": "one forward per optimizer step (no micro-batch accumulation)",
    "--use-dynamic-batch-size": "one forward per optimizer step (no dynamic batching)",
    "--max-tokens-per-gpu": "one forward per optimizer step (no token budget)",
    "--use-distributed-optimizer": "one trainer rank: nothing to shard",
    "--accumulate-allreduce-grads-in-fp32": "one trainer rank: no gradient all-reduce",
    "--attention-dropout": "dropout is not implemented (RL runs use 0)",
    "--hidden-dropout": "dropout is not implemented (RL runs use 0)",
    "--ref-load": "the reference model is the actor's initial weights",
    "--megatron-to-hf-mode": "the converter is vime.convert (fused <-> HF names)",
    "--critic-num-nodes": "no critic (GRPO only)",
    "--critic-num-gpus-per-node": "no critic (GRPO only)",
    "--offload": "no device memory to offload on the compact runtime; --colocate uses sleep mode",
    "--offload-train": "no trainer offload",
    "--use-tis": "no truncated importance sampling",
    "--kl-coef": "no reward-side KL penalty; use --use-kl-loss --kl-loss-coef",
    "--normalize-advantages": "GRPO group normalisation only (--disable-grpo-std-normalization)",
    # vLLM engine knobs of a real server
    "--vllm-gpu-memory-utilization": "the in-process engine has no KV-cache memory pool to size",
    "--vllm-max-num-seqs": "the in-process engine runs the whole rollout batch at once",
    "--vllm-max-model-len": "the engine's context is prompt + --rollout-max-response-len",
    "--vllm-enable-prefix-caching": "the engine keeps no prefix cache between calls",
    "--vllm-enforce-eager": "the engine has no graph capture",
    "--vllm-tensor-parallel-size": "one device per engine (set by --rollout-num-gpus-per-engine in production)",
    # experiment tracking
    "--use-wandb": "no experiment tracker; metrics are printed (rollout/step/perf lines)",
    "--wandb-project": "no experiment tracker",
    "--wandb-group": "no experiment tracker",
    "--wandb-key": "no experiment tracker",
    "--use-tensorboard": "no experiment tracker",
    "--debug-rollout-only": "use --load-debug-rollout-data / --save-debug-rollout-data",
    "--debug-train-only": "use --load-debug-rollout-data",
}
# accepted only with the value that means "no parallelism" (what the runtime does)
SINGLE_RANK = ("actor_num_nodes", "actor_num_gpus_per_node", "rollout_num_gpus", "rollout_num_gpus_per_engine",
               "tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
               "expert_model_parallel_size")


class _Refuse(argparse.Action):
    def __init__(self, option_strings, dest, **kwargs):
        kwargs.setdefault("nargs", "?")
        kwargs.setdefault("default", argparse.SUPPRESS)
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        raise ArgumentError(f"{option_string} is not supported by the compact runtime: {REFUSED[option_string]}")


class ArgumentError(ValueError):
    """Flags that cannot work together; the message names them."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m vime.train", description="vime compact RL runtime (GRPO)")
    bool_opt = argparse.BooleanOptionalAction

    g = p.add_argument_group("cluster / placement")
    g.add_argument("--colocate", action="store_true", help="trainer and engine share the device; in-process sync")
    g.add_argument("--actor-num-nodes", type=int, default=1)
    g.add_argument("--actor-num-gpus-per-node", type=int, default=1)
    g.add_argument("--rollout-num-gpus", type=int, default=1)
    g.add_argument("--rollout-num-gpus-per-engine", type=int, default=1)
    g.add_argument("--tensor-model-parallel-size", type=int, default=1, help="1 only (one trainer rank)")
    g.add_argument("--pipeline-model-parallel-size", type=int, default=1, help="1 only")
    g.add_argument("--context-parallel-size", type=int, default=1, help="1 only")
    g.add_argument("--expert-model-parallel-size", type=int, default=1, help="1 only")
    g.add_argument("--bf16", action="store_true", help="Megatron's spelling of --dtype bfloat16")
    g.add_argument("--fp16", action="store_true", help="Megatron's spelling of --dtype float16 (loss scaling on)")
    g.add_argument("--device", default="auto", help="auto | cpu | cuda | npu (auto: vime.platform.detect())")
    g.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    g.add_argument("--cpu-threads", type=int, default=1,
                   help="torch intra-op threads for the CLI run (the tiny model gains nothing from more)")

    g = p.add_argument_group("model / checkpoints")
    g.add_argument("--hf-checkpoint", default=None, help="HF dir (config.json + model.safetensors): initial weights")
    g.add_argument("--num-layers", type=int, default=2)
    g.add_argument("--hidden-size", type=int, default=64)
    g.add_argument("--num-attention-heads", type=int, default=4)
    g.add_argument("--num-query-groups", type=int, default=None, help="KV heads (GQA); default = attention heads")
    g.add_argument("--ffn-hidden-size", type=int, default=128)
    g.add_argument("--vocab-size", type=int, default=256)
    g.add_argument("--num-experts", type=int, default=0, help="0 = dense; >0 = MoE in every layer")
    g.add_argument("--moe-router-topk", type=int, default=2)
    g.add_argument("--untie-embeddings-and-output-weights", action=bool_opt, default=True)
    g.add_argument("--attention-backend", default="sdpa", help="sdpa | eager | npu_fusion")
    g.add_argument("--save", default=None)
    g.add_argument("--save-interval", type=int, default=None)
    g.add_argument("--save-hf", default=None, help="HF export path template, may use {rollout_id}")
    g.add_argument("--no-save-optim", action="store_true")
    g.add_argument("--load", default=None)
    g.add_argument("--ckpt-step", type=int, default=None)
    g.add_argument("--no-load-optim", action="store_true")
    g.add_argument("--no-load-rng", action="store_true")
    g.add_argument("--finetune", action="store_true")
    g.add_argument("--start-rollout-id", type=int, default=None)

    g = p.add_argument_group("rollout / data")
    g.add_argument("--num-rollout", type=int, default=None, help="default 2, or derived from --num-epoch")
    g.add_argument("--num-epoch", type=int, default=None, help="rollouts = ceil(epochs x num-prompts / rollout-batch-size)")
    g.add_argument("--num-steps-per-rollout", type=int, default=None,
                   help="optimizer steps per rollout (sets --global-batch-size = samples / steps)")
    g.add_argument("--rollout-batch-size", type=int, default=4, help="prompts per rollout")
    g.add_argument("--n-samples-per-prompt", type=int, default=4)
    g.add_argument("--global-batch-size", type=int, default=None, help="samples per optimizer step (default: all)")
    g.add_argument("--rollout-max-response-len", type=int, default=16)
    g.add_argument("--rollout-temperature", type=float, default=1.0)
    g.add_argument("--rollout-top-p", type=float, default=1.0)
    g.add_argument("--rollout-top-k", type=int, default=-1, help="-1 = off")
    g.add_argument("--rollout-seed", type=int, default=42)
    g.add_argument("--rollout-shuffle", action="store_true")
    g.add_argument("--seed", type=int, default=1234)
    g.add_argument("--num-prompts", type=int, default=64, help="size of the synthetic prompt set")
    g.add_argument("--prompt-len", type=int, default=8)
    g.add_argument("--eos-token-id", type=int, default=None)

    g = p.add_argument_group("algorithm")
    g.add_argument("--advantage-estimator", default="grpo", choices=("grpo",))
    g.add_argument("--lr", type=float, default=1e-6)
    g.add_argument("--min-lr", type=float, default=0.0)
    g.add_argument("--lr-decay-style", default="constant", choices=("constant", "linear", "cosine"))
    g.add_argument("--lr-warmup-iters", type=int, default=0)
    g.add_argument("--lr-decay-iters", type=int, default=None)
    g.add_argument("--weight-decay", type=float, default=0.0)
    g.add_argument("--adam-beta1", type=float, default=0.9)
    g.add_argument("--adam-beta2", type=float, default=0.999)
    g.add_argument("--adam-eps", type=float, default=1e-8)
    g.add_argument("--optimizer", default="adam", choices=("adam",), help="AdamW (Megatron's 'adam' with decoupled decay)")
    g.add_argument("--clip-grad", type=float, default=1.0)
    g.add_argument("--eps-clip", type=float, default=0.2)
    g.add_argument("--eps-clip-high", type=float, default=None)
    g.add_argument("--use-kl-loss", action="store_true")
    g.add_argument("--kl-loss-coef", type=float, default=0.0)
    g.add_argument("--kl-loss-type", default="low_var_kl", choices=("k1", "k2", "k3", "low_var_kl"))
    g.add_argument("--entropy-coef", type=float, default=0.0)
    g.add_argument("--disable-grpo-std-normalization", action="store_true")
    g.add_argument("--use-rollout-logprobs", action="store_true")
    g.add_argument("--use-rollout-routing-replay", action="store_true")

    g = p.add_argument_group("weight sync / engine")
    g.add_argument("--update-weights-interval", type=int, default=1)
    g.add_argument("--update-weight-buffer-size", type=int, default=512 * 1024 * 1024)
    g.add_argument("--vllm-weight-sync-packed", action=bool_opt, default=True)
    g.add_argument("--vllm-weight-sync-mode", default="native", help="accepted for compatibility: native only")
    g.add_argument("--vllm-enable-sleep-mode", action="store_true")
    g.add_argument("--vllm-quantization", default=None, choices=("ascend",))
    g.add_argument("--vllm-worker-extension-cls", default=None,
                   help="a user worker extension; conflicts with --vllm-quantization ascend (refused)")
    g.add_argument("--vllm-speculative-config", default=None, help="JSON, e.g. '{\"method\":\"ngram\",\"num_speculative_tokens\":3}'")
    g.add_argument("--vllm-enable-deterministic-inference", action="store_true",
                   help="accepted: per-sample seeds are always derived from (rollout seed, rollout id, index)")
    g.add_argument("--draft-save-hf", default=None)
    g.add_argument("--check-weight-update-equal", action="store_true")

    g = p.add_argument_group("ci / debug")
    g.add_argument("--ci-test", action="store_true")
    g.add_argument("--ci-train-rollout-logprob-abs-diff-threshold", type=float, default=0.1)
    g.add_argument("--ci-disable-kl-checker", action="store_true")
    g.add_argument("--save-debug-rollout-data", default=None, help="path template with {rollout_id}")
    g.add_argument("--load-debug-rollout-data", default=None, help="path template with {rollout_id}")

    g = p.add_argument_group("production flags refused with a reason (see docs/vime.md)")
    for flag in REFUSED:
        g.add_argument(flag, action=_Refuse, help=argparse.SUPPRESS)
    return p


def validate(args: argparse.Namespace) -> argparse.Namespace:
    def bad(msg: str) -> None:
        raise ArgumentError(msg)

    if args.vllm_weight_sync_mode not in SYNC_MODES:
        bad(f"--vllm-weight-sync-mode {args.vllm_weight_sync_mode!r}: only 'native' is supported (reload modes were removed)")
    for flag in SINGLE_RANK:
        if getattr(args, flag) != 1:
            bad(f"--{flag.replace('_', '-')} must be 1: the compact runtime runs one trainer rank and one engine")
    if args.bf16 and args.fp16:
        bad("--bf16 and --fp16 are exclusive")
    for flag, dtype in (("bf16", "bfloat16"), ("fp16", "float16")):
        if getattr(args, flag):
            if args.dtype not in ("float32", dtype):
                bad(f"--{flag} conflicts with --dtype {args.dtype}")
            args.dtype = dtype
    if args.num_epoch is not None:
        if args.num_epoch < 1:
            bad("--num-epoch must be >= 1")
        derived = -(-args.num_epoch * args.num_prompts // max(1, args.rollout_batch_size))
        if args.num_rollout is not None and args.num_rollout != derived:
            bad(f"--num-rollout {args.num_rollout} disagrees with --num-epoch {args.num_epoch} ({derived} rollouts)")
        args.num_rollout = derived
    if args.num_rollout is None:
        args.num_rollout = 2
    if args.num_rollout < 1 or args.rollout_batch_size < 1 or args.n_samples_per_prompt < 1:
        bad("--num-rollout, --rollout-batch-size and --n-samples-per-prompt must be >= 1")
    samples = args.rollout_batch_size * args.n_samples_per_prompt
    if args.num_steps_per_rollout is not None:
        if args.num_steps_per_rollout < 1 or samples % args.num_steps_per_rollout:
            bad(f"--num-steps-per-rollout {args.num_steps_per_rollout} must divide the {samples} samples of a rollout")
        per_step = samples // args.num_steps_per_rollout
        if args.global_batch_size is not None and args.global_batch_size != per_step:
            bad(f"--global-batch-size {args.global_batch_size} disagrees with --num-steps-per-rollout "
                f"{args.num_steps_per_rollout} ({per_step} samples per step)")
        args.global_batch_size = per_step
    if args.global_batch_size is None:
        args.global_batch_size = samples
    if samples % args.global_batch_size:
        bad(f"--global-batch-size {args.global_batch_size} must divide rollout-batch-size x n-samples-per-prompt = {samples}")
    if args.save_interval is not None and not args.save:
        bad("--save-interval needs --save")
    if args.update_weights_interval < 1:
        bad("--update-weights-interval must be >= 1")
    if args.update_weight_buffer_size < 1:
        bad("--update-weight-buffer-size must be > 0 bytes")
    if args.use_rollout_routing_replay and args.num_experts == 0 and not args.hf_checkpoint:
        bad("--use-rollout-routing-replay needs a MoE model (--num-experts > 0)")
    for flag in ("save_debug_rollout_data", "load_debug_rollout_data"):  # one file per rollout
        value = getattr(args, flag)
        if value and args.num_rollout > 1 and "{rollout_id}" not in value:
            bad(f"--{flag.replace('_', '-')} {value!r} needs a {{rollout_id}} placeholder")
    if args.vllm_quantization and not args.hf_checkpoint:
        bad("--vllm-quantization ascend needs --hf-checkpoint (a directory holding quant_model_description.json)")
    if args.vllm_speculative_config:
        from vime.spec_decode import parse_speculative_config

        args.speculative = parse_speculative_config(args.vllm_speculative_config)
    else:
        args.speculative = None
    if args.draft_save_hf:
        from vime.spec_decode import validate_draft_save_hf

        validate_draft_save_hf(args.draft_save_hf, spec=args.speculative, save_hf=args.save_hf)
    if args.colocate:
        args.vllm_enable_sleep_mode = True  # production forces sleep mode for colocated engines
    return args


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return validate(build_parser().parse_args(argv))


def args_to_json(args: argparse.Namespace) -> str:
    return json.dumps({k: v for k, v in vars(args).items() if k != "speculative"}, sort_keys=True, default=str)
