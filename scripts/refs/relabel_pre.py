"""Copies a GGUF's metadata (no tensors) with tokenizer.ggml.pre replaced:
a vocabulary the reference engine then splits with another pre-tokenizer.
Needs llama.cpp's gguf-py (GGUF_PY, default /work/peers/llama.cpp/gguf-py)
and numpy.  Usage: python relabel_pre.py SRC.gguf DST.gguf PRE"""
import os
import sys

sys.path.insert(0, os.environ.get("GGUF_PY", "/work/peers/llama.cpp/gguf-py"))
import gguf  # noqa: E402

src, dst, pre = sys.argv[1:4]
r = gguf.GGUFReader(src)
w = gguf.GGUFWriter(dst, r.fields["general.architecture"].contents())
for name, f in r.fields.items():
    if name.startswith("GGUF.") or name == "general.architecture":
        continue
    value = pre if name == "tokenizer.ggml.pre" else f.contents()
    if f.types[0] == gguf.GGUFValueType.ARRAY:
        w.add_key_value(name, value, f.types[0], sub_type=f.types[-1])
    else:
        w.add_key_value(name, value, f.types[0])
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
