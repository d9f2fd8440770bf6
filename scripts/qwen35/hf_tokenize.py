#!/usr/bin/env python3
"""hf_tokenize.py - the Hugging Face tokenizer's ids for llama.cpp's tokenizer
test inputs (texts separated by "\\n__ggml_vocab_test__\\n", as in
models/ggml-vocab-*.gguf.inp), one line of space-separated ids per text, no
special tokens added: the other side of `probe tokenize`.  llama.cpp applies
no NFC normalization, so texts with decomposed accents differ.

Usage: hf_tokenize.py TOKENIZER_DIR INP OUT
"""
import sys

from tokenizers import Tokenizer

tk = Tokenizer.from_file(sys.argv[1] + "/tokenizer.json")
with open(sys.argv[2], encoding="utf-8") as f:
    texts = f.read().split("\n__ggml_vocab_test__\n")
if texts and texts[-1] == "":
    texts.pop()
with open(sys.argv[3], "w") as f:
    for t in texts:
        f.write(" ".join(map(str, tk.encode(t, add_special_tokens=False).ids)) + "\n")
