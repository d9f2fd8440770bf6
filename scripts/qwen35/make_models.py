#!/usr/bin/env python3
"""make_models.py - small random-weight Qwen3.5 checkpoints (Hugging Face
format) that `transformers` initializes from a small config, for llama.cpp's
own converter (convert_hf_to_gguf.py) to turn into GGUF.  Run beside the
project by make_refs.sh here; never by the Makefile.

  make_models.py OUT_DIR TOKENIZER_DIR

writes OUT_DIR/hf-qwen35 (Qwen3_5ForCausalLM, 8 layers: linear x3, full,
linear x3, full) and OUT_DIR/hf-qwen35moe (Qwen3_5MoeForCausalLM, 4 layers:
linear x3, full; 8 experts, 2 chosen, a shared expert), each with
config.json, model.safetensors (F32), generation_config.json and the
tokenizer files of TOKENIZER_DIR (make_tokenizer.py), and
OUT_DIR/<name>.hf_logits.json: transformers' own top 10 at the first
generated position of each prompt of PROMPTS (a cross-check of the
conversion, not the oracle).

What is not plain `transformers` initialization, and why:
  - The MTP block (mtp.*: fc, pre_fc_norm_embedding, pre_fc_norm_hidden,
    norm, and layers.0, one full-attention decoder layer with the model's
    own FFN kind) is in every published Qwen3.5 checkpoint, and
    config.json says mtp_num_hidden_layers 1, but transformers has no
    module for it (it ignores mtp.* on load).  It is built here from
    transformers' own classes (the decoder layer, its RMSNorm, nn.Linear),
    initialized by the model's _init_weights, and written under the
    checkpoint's names.
  - Zero-centered RMSNorm weights (initialized 0, i.e. a gain of 1) are
    drawn N(0, 0.1), the gated norm of the DeltaNet layers (initialized 1)
    1 + N(0, 0.1), and dt_bias (initialized 1 for every head) 1 + N(0, 0.5):
    with every gain 1 and every head's dt_bias equal, an engine that skipped
    a norm or mixed up the order of the value heads would match llama.cpp.
  - initializer_range 0.05 (the config's own field) rather than 0.02, so that
    the logits are less flat (larger top-1 margins in greedy runs).
Everything is seeded (torch.manual_seed), so the same versions write the
same bytes.
"""
import json
import os
import shutil
import sys

import torch

SEED = {"qwen35": 35, "qwen35moe": 36}

COMMON = dict(
    vocab_size=248320,
    hidden_size=256,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=64,
    linear_value_head_dim=64,
    linear_conv_kernel_dim=4,
    hidden_act="silu",
    max_position_embeddings=262144,
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,
    attention_bias=False,
    initializer_range=0.05,
    # rotary over head_dim * 0.25 = 16 dims (8 frequencies), interleaved
    # MRoPE sections scaled from the published [11, 11, 10] of 32
    rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                     "mrope_section": [3, 3, 2], "mrope_interleaved": True},
    bos_token_id=None,
    eos_token_id=248046,
    pad_token_id=248044,
)

# Fields of the published text_config that transformers' class does not
# declare; written into config.json as the checkpoints carry them.
EXTRA = dict(attn_output_gate=True, mtp_num_hidden_layers=1, mtp_use_dedicated_embeddings=False,
             full_attention_interval=4)


def perturb(model, mods):
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, mods.RMSNorm):
                m.weight.normal_(0.0, 0.1)
            elif isinstance(m, mods.RMSNormGated):
                m.weight.copy_(1.0 + 0.1 * torch.randn_like(m.weight))
            elif isinstance(m, mods.GatedDeltaNet):
                m.dt_bias.copy_(1.0 + 0.5 * torch.randn_like(m.dt_bias))


class Mods:
    def __init__(self, moe):
        if moe:
            from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as M
            from transformers import Qwen3_5MoeTextConfig as C, Qwen3_5MoeForCausalLM as LM
            p = "Qwen3_5Moe"
        else:
            from transformers.models.qwen3_5 import modeling_qwen3_5 as M
            from transformers import Qwen3_5TextConfig as C, Qwen3_5ForCausalLM as LM
            p = "Qwen3_5"
        self.Config, self.LM = C, LM
        self.RMSNorm = getattr(M, p + "RMSNorm")
        self.RMSNormGated = getattr(M, p + "RMSNormGated")
        self.GatedDeltaNet = getattr(M, p + "GatedDeltaNet")
        self.DecoderLayer = getattr(M, p + "DecoderLayer")


def mtp_block(model, cfg, mods):
    """The MTP block as the published checkpoints name it: mtp.* tensors."""
    full = cfg.layer_types.index("full_attention")
    blk = torch.nn.Module()
    blk.fc = torch.nn.Linear(2 * cfg.hidden_size, cfg.hidden_size, bias=False)
    blk.pre_fc_norm_embedding = mods.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
    blk.pre_fc_norm_hidden = mods.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
    blk.norm = mods.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
    blk.layers = torch.nn.ModuleList([mods.DecoderLayer(cfg, full)])
    for m in blk.modules():
        model._init_weights(m)
    perturb(blk, mods)
    sd = {}
    for k, v in blk.state_dict().items():
        # transformers holds the experts fused (experts.gate_up_proj [E, 2I, H],
        # experts.down_proj [E, H, I]); save_pretrained writes the model's own
        # layers back in the checkpoints' per-expert form, so the MTP layer too.
        if k.endswith("mlp.experts.gate_up_proj"):
            base = k[: -len("gate_up_proj")]
            gate, up = v.chunk(2, dim=1)
            for e in range(v.shape[0]):
                sd[f"mtp.{base}{e}.gate_proj.weight"] = gate[e].detach().contiguous()
                sd[f"mtp.{base}{e}.up_proj.weight"] = up[e].detach().contiguous()
        elif k.endswith("mlp.experts.down_proj"):
            base = k[: -len("down_proj")]
            for e in range(v.shape[0]):
                sd[f"mtp.{base}{e}.down_proj.weight"] = v[e].detach().contiguous()
        else:
            sd["mtp." + k] = v.detach().contiguous()
    return sd


def make(name, moe, out, tokdir, prompts):
    from safetensors.torch import load_file, save_file
    mods = Mods(moe)
    kw = dict(COMMON)
    if moe:
        kw.update(num_hidden_layers=4, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=128,
                  shared_expert_intermediate_size=256)
    else:
        kw.update(num_hidden_layers=8, intermediate_size=512)
    cfg = mods.Config(**kw)
    cfg.architectures = [mods.LM.__name__]
    torch.manual_seed(SEED[name])
    model = mods.LM(cfg).to(torch.float32).eval()
    perturb(model, mods)
    mtp = mtp_block(model, cfg, mods)

    d = os.path.join(out, "hf-" + name)
    shutil.rmtree(d, ignore_errors=True)
    model.save_pretrained(d, safe_serialization=True)
    st = os.path.join(d, "model.safetensors")
    sd = load_file(st)
    sd.update(mtp)
    save_file(sd, st, metadata={"format": "pt"})
    with open(os.path.join(d, "config.json")) as f:
        c = json.load(f)
    c.update(EXTRA)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tokdir, fn), d)
    print(f"make_models: {d}: {len(sd)} tensors ({len(mtp)} mtp.*), layer_types {cfg.layer_types}",
          file=sys.stderr)

    hf_logits(model, d, prompts, os.path.join(out, name + ".hf_logits.json"), "hf-" + name)


def hf_logits(model, d, prompts, path, label):
    """The tokenizer of directory d as the converter loads it, and
    transformers' own top 10 at the first generated position of each prompt,
    to path."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(d)
    res = []
    with torch.no_grad():
        for p, line in enumerate(prompts):
            ids = tok.encode(line)
            logits = model(torch.tensor([ids])).logits[0, -1].float()
            top = torch.topk(logits, 10)
            res.append({"prompt_index": p, "n_prompt_tokens": len(ids), "prompt_tokens": ids,
                        "first_position_top10": [{"id": int(i), "logit": float(v)}
                                                 for v, i in zip(top.values, top.indices)]})
    with open(path, "w") as f:
        json.dump({"model": label, "dtype": "float32", "results": res}, f, indent=1)


def main():
    out, tokdir, prompts = sys.argv[1], sys.argv[2], sys.argv[3]
    with open(prompts, encoding="utf-8") as f:
        lines = [l.rstrip("\n") for l in f]
    torch.set_num_threads(2)
    for name, moe in (("qwen35", False), ("qwen35moe", True)):
        make(name, moe, out, tokdir, lines)


if __name__ == "__main__":
    main()
