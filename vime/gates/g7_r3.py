"""G7 R3 routing replay: with replay the training forward routes every token to the experts the
rollout chose; without it, the routing drifts and the gate measures by how much.

On the MoE config (4 experts, top-2, every layer MoE):
  1. the engine samples a rollout with `record_routing=True`; the record covers every MoE layer and
     every token the trainer's forward consumes (prompt + response - 1). Reported alongside: the
     same-weights mismatch of a bf16 engine against the float32 trainer, the production case R3
     exists for;
  2. a real GRPO step with `use_rollout_routing_replay` runs (the trainer asserts each record is
     consumed exactly once) and moves the weights, as a later optimizer step of the same rollout
     would;
  3. on the new weights, the training forward *without* replay picks different experts for some
     tokens: that mismatch is measured and must be > 0 (else this setup could not tell replay apart);
  4. *with* replay, the experts the training forward used equal the rollout's exactly (mismatch 0),
     and the router still receives gradient (probabilities are gathered from the current scores).

  5. the trainer's own path (`Trainer.forward_logprobs`, what its loss uses) gives exactly the
     log-probs of a forward that replays the record, and not those of the model's own routing; its
     real optimizer step (with replay) gave the routers a gradient.

Knobs: `fault="no_replay"` (the training forward ignores the record) and `fault="shuffled"` (the
record of another sample is replayed): both must fail.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch

from vime.gates.common import Check, GateOutcome, outcome

FAULTS = ("no_replay", "shuffled")


def _spy_class():
    from vime.model import RoutingReplay

    class RoutingSpy(RoutingReplay):
        """The model's router hook, also keeping the expert ids it actually handed to the MoE layer."""

        def __init__(self, mode: str, recorded: dict | None = None):
            super().__init__(mode, recorded)
            self.used: dict[int, list[torch.Tensor]] = {}

        def route(self, layer, router_logits, top_k):
            weights, ids = super().route(layer, router_logits, top_k)
            self.used.setdefault(layer, []).append(ids.detach().to("cpu"))
            return weights, ids

        def used_ids(self) -> dict[int, torch.Tensor]:
            return {layer: torch.cat(chunks, dim=1) for layer, chunks in self.used.items()}

    return RoutingSpy


def run(device: str, dtype: str, *, fault: str | None = None) -> GateOutcome:
    from vime import routing_replay as r3
    from vime.gates import world as w
    from vime.model import response_logprobs
    from vime.rollout.engine import RolloutEngine
    from vime.weight_sync import ColocatedSync

    if fault is not None and fault not in FAULTS:
        raise ValueError(f"unknown G7 fault {fault!r}; use one of {FAULTS}")
    values: dict[str, Any] = {"fault": fault}
    checks: list[Check] = []
    with tempfile.TemporaryDirectory(prefix="vime-g7-") as tmp:
        world = w.make_world(Path(tmp), device, dtype, moe=True, lr=2e-3)
        cfg = world.config
        engine = RolloutEngine.from_hf(world.hf_dir, device=world.device, dtype=world.dtype)
        ColocatedSync(engine, buffer_size=w.SYNC_BUFFER).push(w.iter_weights(world))
        batch, out = w.rollout(world, engine.generate, rollout_id=0, record_routing=True)
        tokens = torch.cat([batch.prompt_tokens, batch.response_tokens], dim=1)[:, :-1]
        try:
            r3.validate(batch.routing or {}, tokens, cfg.num_layers, cfg.num_experts_per_tok)
            checks.append(Check("record.complete", True))
        except r3.RoutingReplayError as exc:
            return outcome([Check("record.complete", False, detail=str(exc))], values)
        recorded = batch.routing
        values["record.shape"] = list(next(iter(recorded.values())).shape)

        # Same weights: the trainer's own routing vs the rollout's (different code path: KV-cache decode
        # vs one full forward). Reported; usually 0 in float32.
        same = r3.mismatch(recorded, r3.capture(world.model, tokens.to(world.device)))
        values["mismatch.same_weights"] = same.to_dict()
        if world.dtype != torch.bfloat16:
            # The production case: a lower-precision engine already routes some tokens differently.
            bf16 = RolloutEngine.from_hf(world.hf_dir, device=world.device, dtype=torch.bfloat16)
            low = bf16.generate(batch.prompt_tokens, max_new_tokens=w.NEW_TOKENS, temperature=1.0, record_routing=True)
            low_tokens = torch.cat([low.prompt_tokens, low.response_tokens], dim=1)[:, :-1]
            values["mismatch.bf16_engine_vs_trainer"] = r3.mismatch(
                low.routing, r3.capture(world.model, low_tokens.to(world.device))
            ).to_dict()

        _, steps = world.trainer.train_rollout(batch)  # replays and asserts every record was consumed
        values["train.grad_norm"] = steps[-1]["train/grad_norm"]

        drift = r3.mismatch(recorded, r3.capture(world.model, tokens.to(world.device)))
        values["mismatch.without_replay"] = drift.to_dict()
        checks.append(Check("without_replay.mismatch_measured", drift.mismatch_frac > 0, drift.mismatch_frac, "> 0",
                            detail="the updated model routes exactly like the rollout; the setup cannot show replay"))

        spy_cls = _spy_class()
        if fault == "no_replay":
            spy = spy_cls("record")
        else:
            replayed = recorded if fault != "shuffled" else {k: v.roll(1, dims=0) for k, v in recorded.items()}
            spy = spy_cls("replay", replayed)
        world.model.train()
        world.model.zero_grad(set_to_none=True)
        prompt_len = batch.prompt_tokens.shape[1]
        logits = world.model(tokens.to(world.device), routing=spy)[:, prompt_len - 1 :]
        logp, _ = response_logprobs(logits, batch.response_tokens.to(world.device))
        (logp * batch.loss_mask.to(world.device)).sum().backward()
        router_grad = sum(
            float(p.grad.abs().sum()) for n, p in world.model.named_parameters() if n.endswith("mlp.router.weight") and p.grad is not None
        )
        used = r3.mismatch(recorded, spy.used_ids())
        values["mismatch.with_replay"] = used.to_dict()
        values["router_grad_abs_sum"] = router_grad
        checks.append(Check("with_replay.routing_equal", used.mismatch_frac == 0.0, used.mismatch_frac, 0.0))
        checks.append(Check("with_replay.router_gradient", router_grad > 0, router_grad, "> 0"))
        if fault is None:
            spy.assert_all_consumed()

        # 5. the trainer's real path, not a spy of the gate's own
        from vime.model import RoutingReplay

        with torch.no_grad():
            world.model.eval()
            lp_trainer, _ = world.trainer.forward_logprobs(world.model, batch)
            resp = batch.response_tokens.to(world.device)
            full = tokens.to(world.device)
            lp_replay, _ = response_logprobs(world.model(full, routing=RoutingReplay("replay", recorded))[:, prompt_len - 1 :], resp)
            lp_own, _ = response_logprobs(world.model(full)[:, prompt_len - 1 :], resp)
        live = batch.loss_mask.to(world.device).bool()
        vs_replay = float((lp_trainer - lp_replay)[live].abs().max())
        vs_own = float((lp_replay - lp_own)[live].abs().max())
        values["trainer_path"] = {"max_diff_vs_replayed_forward": vs_replay, "replayed_vs_own_routing": vs_own}
        trainer_router_grad = sum(float(g.abs().sum()) for n, g in world.trainer.last_grads.items() if n.endswith("mlp.router.weight"))
        values["trainer_router_grad_abs_sum"] = trainer_router_grad
        checks += [
            Check("trainer_path.replays_record", vs_replay <= 1e-6, vs_replay, 1e-6,
                  "the trainer's forward does not use the recorded routing"),
            Check("trainer_path.replay_matters", vs_own > 0, vs_own, "> 0",
                  "replayed and own routing give the same log-probs: the check above cannot tell them apart"),
            Check("trainer_path.router_gradient", trainer_router_grad > 0, trainer_router_grad, "> 0"),
        ]
    return outcome(checks, values, {"with_replay.mismatch": 0.0, "without_replay.mismatch": "> 0"})
