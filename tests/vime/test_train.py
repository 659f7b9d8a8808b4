"""Driver end to end: the loop, its printed lines, flags, resume through the CLI, HF export."""

from __future__ import annotations

import ast
import re

import pytest
import torch

from vime.arguments import ArgumentError, parse_args
from vime.convert import load_hf
from vime.train import CICheckError, main, run

BASE = ["--colocate", "--num-rollout", "2", "--rollout-batch-size", "2", "--n-samples-per-prompt", "4",
        "--rollout-max-response-len", "6", "--lr", "1e-3"]


def _parse_lines(lines, kind):
    out = {}
    for line in lines:
        m = re.match(rf"{kind} (\d+): (\{{.*\}})$", line)
        if m:
            out[int(m.group(1))] = ast.literal_eval(m.group(2))
    return out


def test_two_rollouts_end_to_end_with_checks(tmp_path):
    lines = []
    result = run(parse_args(BASE + ["--ci-test", "--check-weight-update-equal", "--global-batch-size", "4",
                                    "--save", str(tmp_path / "ck"), "--save-interval", "1",
                                    "--save-hf", str(tmp_path / "hf-{rollout_id}")]), log=lines.append)
    rollouts, steps = _parse_lines(lines, "rollout"), _parse_lines(lines, "step")
    assert sorted(rollouts) == [0, 1] and sorted(steps) == [0, 1, 2, 3]  # 8 samples / gbs 4 = 2 steps each
    assert rollouts[0]["rollout/weight_version"] == 1 and rollouts[1]["rollout/weight_version"] == 2
    assert steps[0]["train/ppo_kl"] == 0.0 and steps[3]["train/grad_norm"] > 0
    assert result.weight_version == 3  # initial sync + one per rollout
    assert (tmp_path / "ck" / "iter_0000001").is_dir() and (tmp_path / "ck" / "latest_checkpointed_iteration.txt").read_text() == "1\n"
    config, weights = load_hf(tmp_path / "hf-1")
    assert config.num_layers == 2 and weights["lm_head.weight"].shape == (256, 64)
    assert len(_parse_lines(lines, "perf")) == 2


def test_resume_from_checkpoint_continues_at_next_rollout(tmp_path):
    first = run(parse_args(BASE + ["--save", str(tmp_path), "--save-interval", "1"]), log=lambda _: None)
    args = parse_args(BASE + ["--num-rollout", "3", "--load", str(tmp_path)])  # last flag wins
    second = run(args, log=lambda _: None)
    assert second.start_rollout_id == 2 and len(second.rollout_metrics) == 1
    assert second.rollout_metrics[0]["rollout/weight_version"] == first.weight_version
    assert second.loaded.loaded_optim and second.loaded.data_restored


def test_hf_checkpoint_start_and_debug_rollout_data_replay(tmp_path):
    run(parse_args(BASE + ["--num-rollout", "1", "--save", str(tmp_path / "s"), "--save-interval", "1",
                           "--save-hf", str(tmp_path / "init")]), log=lambda _: None)
    common = ["--hf-checkpoint", str(tmp_path / "init"), "--num-rollout", "2"]
    live = run(parse_args(BASE + common + ["--save-debug-rollout-data", str(tmp_path / "d{rollout_id}.pt")]), log=lambda _: None)
    replay = run(parse_args(BASE + common + ["--load-debug-rollout-data", str(tmp_path / "d{rollout_id}.pt")]), log=lambda _: None)
    assert live.step_metrics == replay.step_metrics
    assert live.final_params_sha256 == replay.final_params_sha256


def test_decoupled_engine_in_a_second_process():
    args = parse_args([a for a in BASE if a != "--colocate"] + ["--num-rollout", "1", "--no-vllm-weight-sync-packed"])
    colocated = run(parse_args(BASE + ["--num-rollout", "1"]), log=lambda _: None)
    result = run(args, log=lambda _: None)
    assert result.weight_version == 2
    assert torch.equal(result.tokens[0], colocated.tokens[0])
    assert result.final_params_sha256 == colocated.final_params_sha256


def test_ci_threshold_failure_exits_1(capsys):
    # a negative bound fails on any measured gap, including an exact 0
    code = main(BASE + ["--num-rollout", "1", "--ci-test", "--ci-train-rollout-logprob-abs-diff-threshold", "-1"])
    assert code == 1 and "CICheckError" in capsys.readouterr().err
    assert main(BASE + ["--num-rollout", "1", "--ci-test"]) == 0


def test_ci_kl_checker_catches_actor_ref_mismatch():
    from vime.train import _ci_checks

    args = parse_args(BASE + ["--ci-test"])
    with pytest.raises(CICheckError, match="actor must equal ref"):
        _ci_checks(args, 0, 0, {"rollout/log_probs": -5.5, "rollout/ref_log_probs": -5.4}, [], 256)
    with pytest.raises(CICheckError, match="outside"):
        _ci_checks(args, 1, 0, {"rollout/log_probs": -9.0}, [], 256)
    with pytest.raises(CICheckError, match="ppo_kl"):
        _ci_checks(args, 0, 0, {"rollout/log_probs": -5.5}, [{"train/train_rollout_logprob_abs_diff": 0.0,
                                                             "train/ppo_kl": 1e-3, "train/kl_loss": 0.0}], 256)


@pytest.mark.parametrize("argv, message", [
    (["--global-batch-size", "3"], "must divide"),
    (["--vllm-weight-sync-mode", "reload"], "only 'native'"),
    (["--actor-num-gpus-per-node", "2"], "must be 1"),
    (["--save-interval", "2"], "needs --save"),
    (["--use-rollout-routing-replay"], "MoE"),
    (["--num-rollout", "3", "--save-debug-rollout-data", "/tmp/x.pt"], "rollout_id"),
    (["--vllm-speculative-config", "{not json"], "not valid JSON"),
    (["--vllm-quantization", "ascend"], "needs --hf-checkpoint"),
])
def test_bad_flag_combinations(argv, message, capsys):
    with pytest.raises(ValueError, match=message):
        parse_args(argv)
    assert main(argv) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_input_and_device_errors_map_to_exit_codes(tmp_path, capsys):
    assert main(BASE + ["--hf-checkpoint", str(tmp_path)]) == 2
    assert "config.json is missing" in capsys.readouterr().err
    assert main(BASE + ["--device", "tpu"]) == 3
    assert "unknown device" in capsys.readouterr().err


def test_colocate_forces_sleep_mode():
    assert parse_args(["--colocate"]).vllm_enable_sleep_mode
    assert not parse_args([]).vllm_enable_sleep_mode
    assert isinstance(ArgumentError("x"), ValueError)


def test_check_weight_update_equal_catches_a_broken_conversion(tmp_path, monkeypatch, capsys):
    import vime.train as train_mod
    from vime.convert import save_train_model_hf
    from vime.model import TrainLM, tiny_config

    save_train_model_hf(tmp_path / "hf", TrainLM(tiny_config()))
    args = BASE + ["--num-rollout", "1", "--check-weight-update-equal", "--hf-checkpoint", str(tmp_path / "hf")]
    assert main(args) == 0  # HF checkpoint -> train layout -> HF names round-trips bit-exactly
    real = train_mod.iter_hf_weights

    def off_by_one_ulp(model):
        for name, t in real(model):
            if name == "model.norm.weight":
                t = torch.nextafter(t, torch.full_like(t, 2.0))
            yield name, t

    monkeypatch.setattr(train_mod, "iter_hf_weights", off_by_one_ulp)
    assert main(args) == 1
    assert "'changed': 1" in capsys.readouterr().err


def test_dspark_draft_is_used_and_exported_per_save(tmp_path):
    from vime.convert import save_train_model_hf
    from vime.model import TrainLM, tiny_config

    save_train_model_hf(tmp_path / "draft", TrainLM(tiny_config(num_layers=1, seed=5)))
    spec = '{"method": "dspark", "model": "%s", "num_speculative_tokens": 2}' % (tmp_path / "draft")
    result = run(parse_args(BASE + ["--vllm-speculative-config", spec, "--save", str(tmp_path / "ck"),
                                    "--save-interval", "1", "--draft-save-hf", str(tmp_path / "out-{rollout_id}")]),
                 log=lambda _: None)
    assert result.rollout_metrics[0]["spec/k"] == 2
    config, weights = load_hf(tmp_path / "out-1")
    assert config.num_layers == 1 and set(weights) == set(load_hf(tmp_path / "draft")[1])
    with pytest.raises(ValueError, match="rollout_id"):
        parse_args(BASE + ["--vllm-speculative-config", spec, "--draft-save-hf", str(tmp_path / "fixed")])


@pytest.mark.parametrize("argv, message", [
    (["--prompt-data", "/data/train.jsonl"], "--prompt-data is not supported"),
    (["--vllm-gpu-memory-utilization", "0.8"], "no KV-cache memory pool"),
    (["--micro-batch-size", "1"], "no micro-batch accumulation"),
    (["--use-wandb"], "no experiment tracker"),
    (["--rollout-num-gpus", "8"], "--rollout-num-gpus must be 1"),
    (["--tensor-model-parallel-size", "2"], "--tensor-model-parallel-size must be 1"),
    (["--num-steps-per-rollout", "3"], "must divide"),
    (["--bf16", "--dtype", "float16"], "conflicts"),
])
def test_production_flags_without_meaning_are_refused_with_the_reason(argv, message):
    from vime.arguments import parse_args

    with pytest.raises(ValueError, match=message):
        parse_args(argv)


def test_production_flags_with_meaning_are_honoured():
    from vime.arguments import parse_args

    args = parse_args(["--num-epoch", "2", "--num-prompts", "8", "--rollout-batch-size", "4",
                       "--num-steps-per-rollout", "2", "--bf16", "--tensor-model-parallel-size", "1", "--adam-eps", "1e-6"])
    assert (args.num_rollout, args.global_batch_size, args.dtype, args.adam_eps) == (4, 8, "bfloat16", 1e-6)
