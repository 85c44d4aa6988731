#!/usr/bin/env python3
"""Writes the seed corpus in fuzz/corpus/ (checked in; rerun only to change it).

Why a separate Python writer: the seeds are then produced by code independent of the C++
reader and of tests/gguf_writer.h, so a shared misunderstanding of the format would show.
Seeds: a tiny valid Llama GGUF (every metadata type), a GGUF with a tensor of each block
type, a truncated GGUF, a valid safetensors file, a config.json, and garbage.
"""
import json
import os
import random
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, typ, payload):
    return gstr(key) + struct.pack("<I", typ) + payload


def gguf(kvs, tensors, version=3, align=32):
    """tensors: list of (name, ggml_type, ne (fastest first), data bytes)."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs)) + b"".join(kvs)
    data = b""
    for name, typ, ne, blob in tensors:
        data += b"\0" * (-len(data) % align)
        out += gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        out += struct.pack("<IQ", typ, len(data))
        data += blob
    out += b"\0" * (-len(out) % align)
    return out + data


def f32(n, seed):
    return b"".join(struct.pack("<f", seed + 0.01 * i) for i in range(n))


def tiny_llama():
    d, heads, kvh, ff, vocab = 8, 2, 1, 16, 8
    hd = d // heads
    kvs = [
        kv("general.architecture", 8, gstr("llama")),
        kv("general.name", 8, gstr("tiny")),
        kv("general.alignment", 4, struct.pack("<I", 32)),
        kv("llama.block_count", 4, struct.pack("<I", 1)),
        kv("llama.embedding_length", 4, struct.pack("<I", d)),
        kv("llama.feed_forward_length", 4, struct.pack("<I", ff)),
        kv("llama.attention.head_count", 4, struct.pack("<I", heads)),
        kv("llama.attention.head_count_kv", 4, struct.pack("<I", kvh)),
        kv("llama.context_length", 10, struct.pack("<Q", 64)),
        kv("llama.attention.layer_norm_rms_epsilon", 6, struct.pack("<f", 1e-5)),
        kv("llama.rope.freq_base", 12, struct.pack("<d", 10000.0)),
        kv("t.u8", 0, struct.pack("<B", 1)),
        kv("t.i8", 1, struct.pack("<b", -1)),
        kv("t.u16", 2, struct.pack("<H", 2)),
        kv("t.i16", 3, struct.pack("<h", -2)),
        kv("t.i32", 5, struct.pack("<i", -3)),
        kv("t.i64", 11, struct.pack("<q", -4)),
        kv("t.bool", 7, b"\x01"),
        kv("t.f32s", 9, struct.pack("<IQ", 6, 2) + struct.pack("<ff", 0.5, 1.5)),
        kv("tokenizer.ggml.tokens", 9,
           struct.pack("<IQ", 8, vocab) + b"".join(gstr("t%d" % i) for i in range(vocab))),
        kv("tokenizer.ggml.token_type", 9,
           struct.pack("<IQ", 5, vocab) + b"".join(struct.pack("<i", 1) for _ in range(vocab))),
    ]
    t = []
    seed = [0.0]

    def add(name, ne):
        n = 1
        for x in ne:
            n *= x
        seed[0] += 1
        t.append((name, 0, ne, f32(n, seed[0])))

    add("token_embd.weight", [d, vocab])
    add("output_norm.weight", [d])
    add("blk.0.attn_norm.weight", [d])
    add("blk.0.attn_q.weight", [d, heads * hd])
    add("blk.0.attn_k.weight", [d, kvh * hd])
    add("blk.0.attn_v.weight", [d, kvh * hd])
    add("blk.0.attn_output.weight", [heads * hd, d])
    add("blk.0.ffn_norm.weight", [d])
    add("blk.0.ffn_gate.weight", [d, ff])
    add("blk.0.ffn_up.weight", [d, ff])
    add("blk.0.ffn_down.weight", [ff, d])
    return gguf(kvs, t)


def block_types():
    rnd = random.Random(1)

    def blob(n):
        return bytes(rnd.randrange(256) for _ in range(n))

    tensors = [
        ("f16", 1, [4], blob(8)),
        ("bf16", 30, [4], blob(8)),
        ("i32", 26, [2], blob(8)),
        ("q4_0", 2, [32], blob(18)),
        ("q4_1", 3, [32], blob(20)),
        ("q8_0", 8, [32], blob(34)),
        ("q8_1", 9, [32], blob(36)),
        ("q4_k", 12, [256], blob(144)),
        ("q6_k", 14, [256], blob(210)),
    ]
    return gguf([kv("general.architecture", 8, gstr("llama"))], tensors, version=2)


def safetensors():
    header = {
        "__metadata__": {"format": "pt"},
        "model.norm.weight": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
        "model.embed_tokens.weight": {"dtype": "BF16", "shape": [2, 4], "data_offsets": [16, 32]},
        "lm_head.weight": {"dtype": "F16", "shape": [2, 4], "data_offsets": [32, 48]},
    }
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + bytes(range(48))


def config():
    return json.dumps({
        "architectures": ["LlamaForCausalLM"], "hidden_size": 8, "intermediate_size": 16,
        "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
        "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "max_position_embeddings": 64,
        "vocab_size": 8, "tie_word_embeddings": True,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
    }).encode()


def main():
    os.makedirs(OUT, exist_ok=True)
    tiny = tiny_llama()
    files = {
        "gguf_tiny_llama.gguf": tiny,
        "gguf_block_types.gguf": block_types(),
        "gguf_truncated.gguf": tiny[: len(tiny) // 2],
        "st_tiny.safetensors": safetensors(),
        "hf_config.json": config(),
        "garbage.bin": bytes(random.Random(2).randrange(256) for _ in range(64)),
    }
    for name, data in files.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
        print(name, len(data))


if __name__ == "__main__":
    main()
