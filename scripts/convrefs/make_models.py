#!/usr/bin/env python3
"""make_models.py - small random-weight checkpoints (Hugging Face format) of
the MoE and sliding-window architectures, initialized by `transformers` from
a small config, for llama.cpp's own converter (convert_hf_to_gguf.py) to
turn into GGUF.  Run beside the project by make_refs.sh here; never by the
Makefile.

  make_models.py OUT_DIR PROMPTS

reads the tokenizer directories OUT_DIR/tok-qwen3, tok-o200k and tok-gemma4
(make_tokenizers.py) and writes
  OUT_DIR/hf-qwen3moe  Qwen3MoeForCausalLM: 4 layers, n_embd 256, 4 / 2
                       attention heads of 64 with QK norms, 8 experts of 128,
                       2 chosen (softmax, top-k renormalized), untied output;
                       the 151,936-token Qwen3 vocabulary;
  OUT_DIR/hf-gptoss    GptOssForCausalLM: 4 layers (sliding, full, sliding,
                       full; window 32), n_embd 256, 4 / 2 heads of 64 with
                       biases and sinks, YaRN (factor 32 over 4,096, as the
                       published config), 8 experts of 128, 2 chosen (top-k
                       then softmax), the clamped SwiGLU with biases; the
                       201,088-token o200k_harmony vocabulary;
  OUT_DIR/hf-gemma4    Gemma4ForCausalLM in the 31B's layout: 6 layers
                       (sliding, sliding, full, x2; window 64), n_embd 256,
                       sliding layers 4 / 2 heads of 64 (RoPE 10,000),
                       full layers 4 / 1 heads of 128 with V = K
                       (attention_k_eq_v; proportional RoPE 1e6 over a
                       quarter), QK norms and V's plain norm, GELU-tanh
                       gated FFN of 512, layer scalars, embeddings tied
                       and logits soft-capped at 3; the 262,144-token
                       Gemma 4 vocabulary, BOS added;
each with config.json, model.safetensors (F32), generation_config.json and
the tokenizer files, and OUT_DIR/<name>.hf_logits.json: transformers' own
top 10 at the first generated position of each prompt of PROMPTS (eager
attention; a cross-check of the conversion, not the oracle).

What is not plain `transformers` initialization, and why: every parameter
(or Gemma 4's layer_scalar buffer) that initialization leaves constant
(norm gains 1; gpt-oss's attention and expert biases 0) is drawn instead,
1 + N(0, 0.1) or N(0, 0.1), the layer scalars U(0.3, 1), and gpt-oss's
sinks N(0, 1): with every gain 1 and every bias 0 an engine that skipped a
norm or a bias would match llama.cpp.  Gemma 4 scales attention scores by
1 (its QK norms' gains set the scale), so its QK norm gains are
(1 + N(0, 0.1)) x head_dim^-1/4, as gen-model draws them: with gains near
1 the scores of normalized 64- and 128-wide heads have a spread of 8 to 11,
the softmax saturates, and last-bit differences between engines grow
with the prompt to 3e-3 of max |logit| (measured on such a model: polykv,
llama.cpp and transformers with llama.cpp's F16-rounded GELU each about
that far from the other two, llama.cpp 1.4e-3 from itself decoding token
by token).  initializer_range is 0.05 (the
config's own field) rather than 0.02, as scripts/qwen35/make_models.py,
for larger top-1 margins.  Everything is seeded (torch.manual_seed), so the
same versions write the same bytes.
"""
import os
import shutil
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "qwen35"))
from make_models import hf_logits  # noqa: E402

SEED = {"qwen3moe": 301, "gptoss": 302, "gemma4": 303}


def qwen3moe():
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
    cfg = Qwen3MoeConfig(
        vocab_size=151936, hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        head_dim=64, intermediate_size=512, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=128,
        norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[], hidden_act="silu",
        max_position_embeddings=40960, rms_norm_eps=1e-6, tie_word_embeddings=False, attention_bias=False,
        initializer_range=0.05, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        bos_token_id=151643, eos_token_id=151645)
    return cfg, Qwen3MoeForCausalLM, "tok-qwen3"


def gptoss():
    from transformers import GptOssConfig, GptOssForCausalLM
    cfg = GptOssConfig(
        vocab_size=201088, hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        head_dim=64, intermediate_size=128, num_local_experts=8, num_experts_per_tok=2, sliding_window=32,
        layer_types=["sliding_attention", "full_attention"] * 2, max_position_embeddings=131072,
        rms_norm_eps=1e-5, tie_word_embeddings=False, attention_bias=True, initializer_range=0.05,
        swiglu_limit=7.0, rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0,
                                           "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                                           "original_max_position_embeddings": 4096},
        bos_token_id=199998, eos_token_id=200002, pad_token_id=199999)
    return cfg, GptOssForCausalLM, "tok-o200k"


def gemma4():
    from transformers import Gemma4TextConfig, Gemma4ForCausalLM
    cfg = Gemma4TextConfig(
        vocab_size=262144, hidden_size=256, num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2,
        head_dim=64, global_head_dim=128, num_global_key_value_heads=1, attention_k_eq_v=True,
        intermediate_size=512, sliding_window=64,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"] * 2,
        hidden_size_per_layer_input=0, vocab_size_per_layer_input=262144, num_kv_shared_layers=0,
        final_logit_softcapping=3.0, max_position_embeddings=131072, rms_norm_eps=1e-6,
        tie_word_embeddings=True, initializer_range=0.05, pad_token_id=0, eos_token_id=1, bos_token_id=2)
    return cfg, Gemma4ForCausalLM, "tok-gemma4"


def perturb(model, qk_scaled):
    with torch.no_grad():
        for n, p in list(model.named_parameters()) + [(n, b) for n, b in model.named_buffers()
                                                      if n.endswith("layer_scalar")]:
            if n.endswith("layer_scalar"):
                p.copy_(0.3 + 0.7 * torch.rand_like(p))
            elif qk_scaled and n.endswith(("self_attn.q_norm.weight", "self_attn.k_norm.weight")):
                p.copy_((1.0 + 0.1 * torch.randn_like(p)) * p.numel() ** -0.25)
            elif n.endswith("self_attn.sinks"):
                p.normal_(0.0, 1.0)
            elif bool((p == 1).all()):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif bool((p == 0).all()):
                p.normal_(0.0, 0.1)


def make(name, build, out, prompts):
    cfg, LM, tokname = build()
    cfg.architectures = [LM.__name__]
    cfg._attn_implementation = "eager"
    torch.manual_seed(SEED[name])
    model = LM(cfg).to(torch.float32).eval()
    perturb(model, name == "gemma4")
    d = os.path.join(out, "hf-" + name)
    shutil.rmtree(d, ignore_errors=True)
    model.save_pretrained(d, safe_serialization=True)
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(out, tokname, fn), d)
    print(f"make_models: {d}: {sum(1 for _ in model.parameters())} parameters, layer_types "
          f"{getattr(cfg, 'layer_types', None)}", file=sys.stderr)
    hf_logits(model, d, prompts, os.path.join(out, name + ".hf_logits.json"), "hf-" + name)


def main():
    out, prompts = sys.argv[1], sys.argv[2]
    with open(prompts, encoding="utf-8") as f:
        lines = [l.rstrip("\n") for l in f]
    torch.set_num_threads(2)
    only = sys.argv[3:]
    for name, build in (("qwen3moe", qwen3moe), ("gptoss", gptoss), ("gemma4", gemma4)):
        if not only or name in only:
            make(name, build, out, lines)


if __name__ == "__main__":
    main()
