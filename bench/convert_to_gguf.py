#!/usr/bin/env python3
"""A make-model checkpoint as GGUF, for llama.cpp's server (the peer of issue 6, item 4).

Runs llama.cpp's own converter (convert_hf_to_gguf.py, vendored in the llama-cpp-python sdist
that bench/peer_llama_cpp.sh unpacks; it needs torch, numpy, transformers, sentencepiece):

    python3 bench/convert_to_gguf.py --llama-cpp DIR MODEL_DIR OUT.gguf [--outtype f16|bf16]

DIR is the vendored llama.cpp tree (scratch/peer/llama_cpp_python-*/vendor/llama.cpp).

Why a wrapper: the converter names a BPE tokenizer's pre-tokenizer by hashing the token ids of a
test string, and refuses hashes it does not know. The tiny and llama3-8b shapes carry the
default model's tokenizer (SmolLM2), which it knows as "smollm". The llama2 shapes carry
make-model's byte-level fallback (docs/DESIGN.md, "make-model"): SmolLM2's pre-tokenizer
with the vocabulary cut to 32,000 ids, so the ids, and the hash, differ while the
pre-tokenizer rules are SmolLM2's. With --pre NAME (default "smollm") an unknown hash is given
that name; a known one keeps the converter's answer. On a machine without the default model
(the lent GPU), make-model's fallback is the 256 byte tokens and the specials with no merges;
llama.cpp refuses a BPE vocabulary without a merges key, so one inert merge is written.
"""

import argparse
import json
import logging
import os
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-cpp", required=True, help="the vendored llama.cpp tree")
    ap.add_argument("--pre", default="smollm", help="pre-tokenizer name for an unknown hash")
    ap.add_argument("--outtype", default="bf16", choices=["f16", "bf16", "f32"])
    ap.add_argument("model", help="make-model output folder")
    ap.add_argument("out", help="the GGUF file to write")
    args = ap.parse_args()

    conv = os.path.join(args.llama_cpp, "convert_hf_to_gguf.py")
    if not os.path.isfile(conv):
        print(f"convert_to_gguf: no {conv} (run bench/peer_llama_cpp.sh first)", file=sys.stderr)
        return 2
    tok = os.path.join(args.model, "tokenizer.json")
    if not os.path.isfile(tok):
        print(f"convert_to_gguf: {args.model} has no tokenizer.json", file=sys.stderr)
        return 2
    with open(tok) as f:
        pre = json.load(f).get("pre_tokenizer")
    if pre is None:
        print(f"convert_to_gguf: {tok} has no pre_tokenizer", file=sys.stderr)
        return 2

    sys.path[:0] = [args.llama_cpp, os.path.join(args.llama_cpp, "gguf-py")]
    import conversion.base as base  # noqa: E402  (from the vendored tree)

    known = base.TextModel.get_vocab_base_pre

    def pre_or_given(self, tokenizer):
        try:
            return known(self, tokenizer)
        except NotImplementedError:
            logging.getLogger("convert_to_gguf").warning(
                "unknown pre-tokenizer hash: naming it %r (make-model's cut vocabulary)", args.pre)
            return args.pre

    base.TextModel.get_vocab_base_pre = pre_or_given

    # llama.cpp refuses a BPE vocabulary without a merges key, and the converter writes none
    # when the list is empty, as it is for make-model's byte-level tokenizer (--tokenizer
    # byte: 256 byte tokens, no merges). One merge of two multi-character pieces is inert:
    # tokenization starts from single characters, and only listed merges build longer ones.
    import gguf  # noqa: E402

    add_to_gguf = gguf.SpecialVocab.add_to_gguf

    def add_with_merges(self, gw, quiet=False):
        if self.load_merges and not self.merges:
            logging.getLogger("convert_to_gguf").warning("no merges: writing one inert merge")
            self.merges = ["<none> <none>"]
        add_to_gguf(self, gw, quiet)

    gguf.SpecialVocab.add_to_gguf = add_with_merges
    import convert_hf_to_gguf  # noqa: E402

    sys.argv = [conv, args.model, "--outfile", args.out, "--outtype", args.outtype]
    convert_hf_to_gguf.main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
