"""``onnx-ep generate FOLDER``: stream tokens from a genai_config.json model folder.

Registered by ``onnx_ep/cli.py``'s parser (:func:`add_parser`); errors follow that module's
rules (``error: ...`` and status 2; a JSON document with ``--json``).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def _ids(text: str) -> list[int]:
    try:
        ids = [int(t) for t in text.replace(" ", "").split(",") if t]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated token ids such as "
                                         f"1,2,3, got {text!r}") from None
    if not ids or min(ids) < 0:
        raise argparse.ArgumentTypeError(f"expected non-negative token ids, got {text!r}")
    return ids


def _number(kind: type) -> Any:
    def parse(text: str) -> Any:
        try:
            return kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a {kind.__name__}, got "
                                             f"{text!r}") from None
    return parse


def add_parser(sub: Any, positive: Any) -> None:
    """Add the ``generate`` subcommand to ``onnx-ep``'s subparsers."""
    gen = sub.add_parser(
        "generate", help="generate tokens from an onnxruntime-genai model folder",
        description="Load FOLDER (genai_config.json and its ONNX model, as onnxruntime-genai's "
                    "builder writes them), run the prompt (prefill), then generate up to "
                    "--max-new-tokens tokens (greedy unless --do-sample), stopping at an EOS "
                    "token. Tokens are printed as they come (as text when the folder has "
                    "tokenizer.json, else as ids), then the prefill and decode tokens/s. The "
                    "KV cache is reserved before the first step; one that cannot fit the "
                    "memory budget is refused then (error, status 2). See docs/GENAI.md.")
    gen.add_argument("folder", metavar="FOLDER", help="a model folder with genai_config.json")
    prompt = gen.add_mutually_exclusive_group(required=True)
    prompt.add_argument("--prompt", metavar="TEXT",
                        help="prompt text (needs tokenizer.json in FOLDER and the "
                             "'tokenizers' package)")
    prompt.add_argument("--prompt-ids", type=_ids, metavar="1,2,3",
                        help="prompt as comma-separated token ids")
    gen.add_argument("--max-new-tokens", type=positive, default=128, metavar="N",
                     help="tokens to generate at most (default: 128)")
    gen.add_argument("--provider", action="append", default=[], metavar="P",
                     help="provider, in priority order (repeatable; default: the config's "
                          "provider_options, cuda -> cuda, none -> cpu_reference)")
    gen.add_argument("--do-sample", action="store_true",
                     help="sample instead of greedy search (default: the config's do_sample)")
    gen.add_argument("--temperature", type=_number(float), default=None, metavar="T",
                     help="sampling temperature (default: the config's)")
    gen.add_argument("--top-k", type=_number(int), default=None, metavar="K",
                     help="sample among the K most likely tokens (0: all)")
    gen.add_argument("--top-p", type=_number(float), default=None, metavar="P",
                     help="sample among the most likely tokens whose probability reaches P")
    gen.add_argument("--seed", type=_number(int), default=None, metavar="S",
                     help="random seed: the same seed gives the same tokens")
    gen.add_argument("--capture", choices=("auto", "off", "require"), default="auto",
                     help="CUDA-graph capture of each step's plan on a device (default: "
                          "auto; docs/CAPTURE.md): every decode step replays one recording")
    gen.add_argument("--memory-limit", type=positive, default=None, metavar="BYTES",
                     help="memory budget in bytes (weights, activations and KV cache)")
    gen.add_argument("--json", action="store_true",
                     help="print one JSON document (tokens, text, per-step stats) and no "
                          "streaming")
    gen.set_defaults(func=cmd_generate)


def cmd_generate(args: argparse.Namespace) -> int:
    from onnx_ep import SessionOptions
    from onnx_ep.genai.api import stream
    from onnx_ep.genai.model import Model

    if not args.json:
        print("loading the model...", file=sys.stderr, flush=True)
    options = SessionOptions(memory_limit=args.memory_limit, capture=args.capture)
    model = Model(args.folder, providers=args.provider or None, options=options)
    prompt: Any = args.prompt if args.prompt is not None else args.prompt_ids
    ts = stream(model, prompt, args.max_new_tokens,
                do_sample=True if args.do_sample else None, temperature=args.temperature,
                top_k=args.top_k, top_p=args.top_p, random_seed=args.seed)
    text = model.has_tokenizer
    decoder = model.tokenizer.create_stream() if text else None
    tokens: list[int] = []
    try:
        for tok in ts:
            tokens.append(tok)
            if args.json:
                continue
            piece = decoder.decode(tok) if decoder is not None else f"{tok} "
            print(piece, end="", flush=True)
        prompt_ids = ts.generator.get_sequence(0)[:ts.prompt_length].tolist()
    finally:
        ts.close()
    stats = ts.stats.as_dict()
    if args.json:
        res = {"folder": args.folder, "providers": model.session.get_providers(),
               "prompt_ids": prompt_ids, "tokens": tokens,
               "text": model.tokenizer.decode(tokens) if text else None, "stats": stats}
        print(json.dumps(res, indent=2))
        return 0
    p, d = stats["prefill"], stats["decode"]
    captures = ", ".join(f"{k} {v}" for k, v in d["capture"].items()) or "none"
    print()
    print(f"prefill: {p['tokens']} tokens, {p['tokens_per_s']:.1f} tokens/s; decode: "
          f"{d['tokens']} tokens, {d['tokens_per_s']:.1f} tokens/s ({d['ms_per_step']:.2f} "
          f"ms/step; steps by capture: {captures})")
    return 0
