#!/usr/bin/env python3
"""Golden fixtures for the engine's reference tests (tests/data), made with Hugging Face transformers.

Builds tiny seeded random-init models of each supported architecture, saves them as HF directories
with fp32 logits of a fixed 40-token input and a 20-token greedy continuation, and trains two small
tokenizers (byte-level BPE Qwen2-style, SentencePiece-style Llama BPE) with `tokenizers`, saving
their encodings of a varied text set. Everything is derived from fixed seeds and computed on the
CPU in fp32 with one thread, so a rerun reproduces the files bit for bit on the same CPU kind.

Run on the GPU machine (it has torch/transformers/tokenizers): python3 make_fixtures.py --out ../tests/data
"""
import argparse
import hashlib
import json
import os
import random
import shutil
import sys

import torch

QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
BPE_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content']"
    " + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}")

# ----------------------------------------------------------------------------------------------
# Models
# ----------------------------------------------------------------------------------------------

# name -> (config class name, kwargs, seed). Sizes kept small so tests/data stays under 4 MiB.
MODEL_SPECS = {
    "llama-gqa": ("LlamaConfig", dict(
        vocab_size=509, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-5,
        rope_theta=10000.0, max_position_embeddings=256, tie_word_embeddings=False,
        attention_bias=False, mlp_bias=False, bos_token_id=1, eos_token_id=2), 101),
    "qwen3-dense": ("Qwen3Config", dict(
        vocab_size=503, hidden_size=64, intermediate_size=80, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-6,
        rope_theta=1000000.0, max_position_embeddings=256, tie_word_embeddings=True,
        attention_bias=False, use_sliding_window=False, bos_token_id=None, eos_token_id=2), 202),
    "qwen3moe-norm": ("Qwen3MoeConfig", dict(
        vocab_size=509, hidden_size=48, intermediate_size=64, moe_intermediate_size=24,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        rms_norm_eps=1e-6, rope_theta=50000.0, max_position_embeddings=256,
        tie_word_embeddings=False, num_experts=8, num_experts_per_tok=2, norm_topk_prob=True,
        decoder_sparse_step=1, mlp_only_layers=[], attention_bias=False,
        use_sliding_window=False, bos_token_id=None, eos_token_id=2), 303),
    "qwen3moe-dense-layer": ("Qwen3MoeConfig", dict(
        vocab_size=521, hidden_size=64, intermediate_size=72, moe_intermediate_size=16,
        num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, head_dim=16,
        rms_norm_eps=1e-5, rope_theta=20000.0, max_position_embeddings=256,
        tie_word_embeddings=False, num_experts=6, num_experts_per_tok=3, norm_topk_prob=False,
        decoder_sparse_step=1, mlp_only_layers=[1], attention_bias=False,
        use_sliding_window=False, bos_token_id=None, eos_token_id=2), 404),
    "mixtral": ("MixtralConfig", dict(
        vocab_size=509, hidden_size=64, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-5,
        rope_theta=1000000.0, max_position_embeddings=256, tie_word_embeddings=False,
        num_local_experts=4, num_experts_per_tok=2, sliding_window=None,
        bos_token_id=1, eos_token_id=2), 505),
    # issue 45: every feature of the architecture switched on with non-zero values. GLM-4.5 style:
    # q/k/v bias, qk norm, partial RoPE (50%) under YaRN (truncated correction range), a leading dense
    # layer, one shared expert, sigmoid routing with a selection-only bias, 2 groups of which 1 is kept,
    # renormalised weights times a routed scaling factor.
    "glm4moe-tiny": ("Glm4MoeConfig", dict(
        vocab_size=521, hidden_size=48, intermediate_size=64, moe_intermediate_size=16,
        num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        partial_rotary_factor=0.5, rms_norm_eps=1e-5, rope_theta=10000.0,
        max_position_embeddings=256, tie_word_embeddings=False, attention_bias=True,
        use_qk_norm=True, n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1,
        n_group=2, topk_group=1, first_k_dense_replace=1, norm_topk_prob=True,
        routed_scaling_factor=2.5, num_nextn_predict_layers=0, bos_token_id=None, eos_token_id=2,
        rope_extra=dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=64,
                        beta_fast=32.0, beta_slow=1.0)), 606),
    # gpt-oss style: q/k/v/o bias, attention sinks, sliding window 8 (< the 40-token input) on layers
    # 0 and 2, YaRN without truncation, router bias, top-k then softmax, biased experts with the gate
    # and up interleaved, a clamped SwiGLU whose limit the activations reach. The limit stays at 7:
    # transformers 5.17's GptOssExperts hard-codes 7 whatever config.swiglu_limit says, so only 7 means
    # the same to every reader; the experts' gate_up weights are scaled up (init_weights) to reach it.
    "gptoss-tiny": ("GptOssConfig", dict(
        vocab_size=509, hidden_size=64, intermediate_size=32, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-5,
        rope_theta=150000.0, max_position_embeddings=256, tie_word_embeddings=False,
        num_local_experts=4, num_experts_per_tok=2, sliding_window=8, swiglu_limit=7.0,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        attention_bias=True, bos_token_id=None, eos_token_id=2,
        rope_extra=dict(rope_type="yarn", factor=8.0, original_max_position_embeddings=32,
                        beta_fast=32.0, beta_slow=1.0, truncate=False)), 707),
}
# YaRN in these fixtures keeps factor = max_position_embeddings / original_max_position_embeddings:
# some transformers versions derive the factor from that ratio, so the two spellings agree.

N_INPUT = 40
N_GREEDY = 20
MIN_GREEDY_MARGIN = 0.05  # top1 - top2 logit gap every greedy step must keep, so ties can't flip


def make_config(cls_name, kw):
    """Builds a config accepting either transformers spelling of rope theta (rope_parameters in 5.x)."""
    import transformers
    cls = getattr(transformers, cls_name)
    kw = dict(kw)
    theta = kw.pop("rope_theta")
    extra = kw.pop("rope_extra", None)
    rope = {"rope_type": "default", "rope_theta": theta}
    if extra is not None:
        rope = dict(extra, rope_theta=theta)
        if "partial_rotary_factor" in kw:  # transformers 5 reads it from rope_parameters too
            rope["partial_rotary_factor"] = kw["partial_rotary_factor"]
    late = {}
    cfg = None
    for use_params in (True, False):
        for late_head_dim in (False, True):
            try:
                k2 = dict(kw)
                late = {"head_dim": k2.pop("head_dim")} if late_head_dim and "head_dim" in k2 else {}
                if use_params:
                    cfg = cls(**k2, rope_parameters=rope)
                elif extra is not None:
                    cfg = cls(**k2, rope_theta=theta, rope_scaling=dict(extra))
                else:
                    cfg = cls(**k2, rope_theta=theta)
                break
            except TypeError as e:
                print(f"  config attempt (rope_parameters={use_params}, late head_dim={late_head_dim}) "
                      f"for {cls_name}: {e}")
        if cfg is not None:
            break
    assert cfg is not None, cls_name
    for k, v in late.items():
        setattr(cfg, k, v)
    return cfg, theta


def build_model(cfg, **impl):
    from transformers import AutoModelForCausalLM
    try:
        return AutoModelForCausalLM.from_config(cfg, **impl)
    except (TypeError, ValueError) as e:
        impl.pop("experts_implementation", None)
        print(f"  from_config without experts_implementation ({e})")
        return AutoModelForCausalLM.from_config(cfg, **impl)


def init_weights(model, seed):
    """Large random weights (in sorted name order, own generator) so every layer changes the logits."""
    g = torch.Generator().manual_seed(seed)
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda x: x[0]):
            if name.endswith("e_score_correction_bias"):
                # Positive: transformers masks the unselected groups with 0, llama.cpp with -inf; with
                # every biased score above 0 the two agree.
                p.copy_(0.3 * torch.rand(p.shape, generator=g))
            elif name.endswith("sinks"):
                p.copy_(torch.randn(p.shape, generator=g))  # attention sinks: a logit per head
            elif name.endswith("experts.gate_up_proj"):
                # gpt-oss: gate/up values of std ~8 over hidden 64, so the SwiGLU clamp at 7 engages.
                p.copy_(torch.randn(p.shape, generator=g))
            elif name.endswith("router.weight") or name.endswith("router.bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))  # gpt-oss router: decisive, varied
            elif name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_((0.5 if tied else 1.0) * torch.randn(p.shape, generator=g))
            elif name.endswith("gate.weight") and "experts" not in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=g))  # router: decisive, varied routing
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
        # The GLM/DeepSeek selection bias is a buffer in some transformers versions.
        for name, b in sorted(model.named_buffers(), key=lambda x: x[0]):
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.3 * torch.rand(b.shape, generator=g))


def greedy_with_cache(model, ids, n):
    out = model(input_ids=ids[None], use_cache=True)
    past = out.past_key_values
    logits = out.logits[0, -1]
    toks, margins = [], []
    for _ in range(n):
        top2 = torch.topk(logits, 2)
        margins.append(float(top2.values[0] - top2.values[1]))
        nxt = int(top2.indices[0])
        toks.append(nxt)
        out = model(input_ids=torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
        past = out.past_key_values
        logits = out.logits[0, -1]
    return toks, margins


def greedy_no_cache(model, ids, n):
    seq = ids.tolist()
    for _ in range(n):
        seq.append(int(model(input_ids=torch.tensor([seq])).logits[0, -1].argmax()))
    return seq[len(ids):]


def v4_config(cfg):
    """The same config as transformers 4.x spelled it (rope_theta top level, num_experts)."""
    d = dict(cfg)
    rope = d.pop("rope_parameters", None) or {}
    if "rope_theta" not in d:
        d["rope_theta"] = rope.get("rope_theta")
    scaling = {k: v for k, v in rope.items() if k not in ("rope_theta", "partial_rotary_factor")}
    d["rope_scaling"] = None if scaling.get("rope_type", "default") == "default" else scaling
    if "partial_rotary_factor" in rope and "partial_rotary_factor" not in d:
        d["partial_rotary_factor"] = rope["partial_rotary_factor"]
    if "num_local_experts" in d and d.get("model_type") == "qwen3_moe":
        d["num_experts"] = d.pop("num_local_experts")
    if "dtype" in d:
        d["torch_dtype"] = d.pop("dtype")
    d["transformers_version"] = "4.51.0"
    return d


def yarn_attention_factor(factor):
    return 0.1 * __import__("math").log(factor) + 1.0 if factor > 1 else 1.0


def check_issue45_model(name, model, kw):
    """Config keys a transformers version ignores are silently dropped: check each feature took."""
    cfg = model.config
    layers = model.model.layers
    attn = layers[0].self_attn
    rot = model.model.rotary_emb
    hd = kw["head_dim"]
    rot_dim = int(hd * kw.get("partial_rotary_factor", 1.0))
    assert tuple(rot.inv_freq.shape) == (rot_dim // 2,), (tuple(rot.inv_freq.shape), rot_dim)
    want_scale = yarn_attention_factor(kw["rope_extra"]["factor"])
    got_scale = float(getattr(rot, "attention_scaling", 1.0))
    assert abs(got_scale - want_scale) < 1e-6, (got_scale, want_scale)
    assert attn.q_proj.bias is not None and attn.k_proj.bias is not None and attn.v_proj.bias is not None
    if name.startswith("glm4moe"):
        assert attn.o_proj.bias is None
        assert getattr(attn, "q_norm", None) is not None and getattr(attn, "k_norm", None) is not None
        assert not hasattr(layers[0].mlp, "experts"), "layer 0 must be dense (first_k_dense_replace)"
        for layer in layers[1:]:
            mlp = layer.mlp
            assert hasattr(mlp, "shared_experts") and hasattr(mlp, "experts"), type(mlp)
            bias = mlp.gate.e_score_correction_bias
            assert tuple(bias.shape) == (kw["n_routed_experts"],) and float(bias.abs().min()) > 0
        for k in ("n_group", "topk_group", "routed_scaling_factor", "n_routed_experts", "n_shared_experts",
                  "first_k_dense_replace", "norm_topk_prob"):
            assert getattr(cfg, k) == kw[k], (k, getattr(cfg, k), kw[k])
    else:
        assert attn.o_proj.bias is not None
        assert tuple(attn.sinks.shape) == (kw["num_attention_heads"],)
        assert list(cfg.layer_types) == kw["layer_types"], cfg.layer_types
        assert cfg.sliding_window == kw["sliding_window"] and cfg.swiglu_limit == kw["swiglu_limit"]
        mlp = layers[0].mlp
        assert mlp.router.bias is not None
        E, D, F = kw["num_local_experts"], kw["hidden_size"], kw["intermediate_size"]
        assert tuple(mlp.experts.gate_up_proj.shape) == (E, D, 2 * F), mlp.experts.gate_up_proj.shape
        assert tuple(mlp.experts.gate_up_proj_bias.shape) == (E, 2 * F)
        assert tuple(mlp.experts.down_proj_bias.shape) == (E, D)
    print(f"  {name}: rotary pairs {rot_dim // 2}, attention scaling {got_scale:.6f}: features took")


def report_gptoss_clamp(model, ids):
    """The share of expert gate/up values the SwiGLU clamp changes (it must be well above zero)."""
    seen = []
    hooks = [layer.mlp.experts.register_forward_pre_hook(lambda m, args, kw: seen.append((m, args[0])), with_kwargs=True)
             for layer in model.model.layers]
    with torch.no_grad():
        model(input_ids=ids[None])
    for h in hooks:
        h.remove()
    limit = 7.0
    clamped = total = 0
    for m, x in seen:
        x = x.reshape(-1, x.shape[-1])
        gate_up = torch.einsum("td,edf->etf", x, m.gate_up_proj) + m.gate_up_proj_bias[:, None, :]
        gate, up = gate_up[..., ::2], gate_up[..., 1::2]
        clamped += int((gate > limit).sum() + (up.abs() > limit).sum())
        total += gate.numel() + up.numel()
    print(f"  swiglu clamp changes {clamped}/{total} gate/up values")
    assert clamped > total // 50, "the clamp must engage"


def make_model(name, out_dir):
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM
    cls_name, kw, seed = MODEL_SPECS[name]
    print(f"== {name}")
    torch.manual_seed(seed)
    cfg, theta = make_config(cls_name, kw)
    impl = dict(attn_implementation="eager", experts_implementation="eager")
    model = build_model(cfg, **impl).float().eval()
    init_weights(model, seed)
    # Check the config took: head_dim via q_proj shape, theta via the rotary frequencies.
    attn = model.model.layers[0].self_attn
    hd = kw.get("head_dim", kw["hidden_size"] // kw["num_attention_heads"])
    assert attn.q_proj.weight.shape[0] == kw["num_attention_heads"] * hd, attn.q_proj.weight.shape
    rot = getattr(model.model, "rotary_emb", None) or getattr(attn, "rotary_emb", None)
    if "rope_extra" in kw:
        check_issue45_model(name, model, kw)
    elif rot is not None:
        want = theta ** (-2.0 / hd)
        got = float(rot.inv_freq[1])
        assert abs(got - want) <= 1e-6 * want + 1e-9, (got, want)
    vocab = kw["vocab_size"]

    d = os.path.join(out_dir, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    with torch.no_grad():
        # Pick the first input seed whose greedy continuation has no near-ties.
        for tries in range(50):
            g = torch.Generator().manual_seed(seed * 1000 + tries)
            ids = torch.randint(0, vocab, (N_INPUT,), generator=g)
            greedy, margins = greedy_with_cache(model, ids, N_GREEDY)
            if min(margins) >= MIN_GREEDY_MARGIN:
                break
        assert greedy == greedy_no_cache(model, ids, N_GREEDY), "cached/uncached greedy differ"
        if name.startswith("gptoss"):
            try:
                report_gptoss_clamp(model, ids)
            except AssertionError:
                raise
            except Exception as e:  # noqa: BLE001 - a transformers version without these internals
                print(f"  swiglu clamp report unavailable: {type(e).__name__}: {e}")
        logits = model(input_ids=ids[None]).logits[0].float().contiguous()
        # Every layer must matter: dropping the last layer must change the logits a lot.
        full_layers = model.model.layers
        model.model.layers = full_layers[:-1]
        try:
            trunc = model(input_ids=ids[None], use_cache=False).logits[0]
            layer_effect = float((trunc - logits).abs().max())
        except Exception as e:  # noqa: BLE001 - diagnostic only
            layer_effect = f"n/a ({type(e).__name__})"
        model.model.layers = full_layers

    model.save_pretrained(d)
    for extra in ("generation_config.json",):
        p = os.path.join(d, extra)
        if os.path.exists(p):
            os.remove(p)
    st = os.path.join(d, "model.safetensors")
    assert os.path.exists(st), os.listdir(d)
    with safe_open(st, "pt") as f:
        keys = sorted(f.keys())
        dtypes = {str(f.get_tensor(k).dtype) for k in keys}
    print(f"  tensors ({len(keys)}), dtypes {dtypes}:")
    for k in keys:
        if ".layers.0." in k or ".layers.1." in k or ".layers." not in k:
            with safe_open(st, "pt") as f:
                print(f"    {k} {tuple(f.get_slice(k).get_shape())}")
    assert dtypes == {"torch.float32"}, dtypes

    # Round trip: the saved directory reloads to the same logits (checks the on-disk expert layout).
    re = None
    try:
        re = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, **impl)
    except TypeError:
        re = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    with torch.no_grad():
        re_logits = re.eval()(input_ids=ids[None]).logits[0]
    reload_diff = float((re_logits - logits).abs().max())
    print(f"  reload max|diff| {reload_diff:.3g}; greedy min margin {min(margins):.3f}; "
          f"drop-last-layer max|diff| {layer_effect}; logits absmax {float(logits.abs().max()):.2f}")
    assert reload_diff <= 1e-5 * float(logits.abs().max()), reload_diff

    with open(os.path.join(d, "logits.f32"), "wb") as f:
        f.write(logits.numpy().astype("<f4").tobytes())
    golden = {"input_ids": ids.tolist(), "greedy": greedy, "vocab_size": vocab,
              "logits_file": "logits.f32", "logits_shape": [N_INPUT, vocab],
              "greedy_min_margin": round(min(margins), 4),
              "attn_implementation": "eager", "dtype": "float32"}
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    with open(os.path.join(d, "config.json")) as f:
        cfg_json = json.load(f)
    print("  config.json:", json.dumps(cfg_json, sort_keys=True))
    if name == "qwen3moe-norm" or "rope_extra" in kw:
        with open(os.path.join(d, "config.v4.json"), "w") as f:
            json.dump(v4_config(cfg_json), f, indent=2, sort_keys=True)
            f.write("\n")


# ----------------------------------------------------------------------------------------------
# Tokenizers
# ----------------------------------------------------------------------------------------------

ENCODING_TEXTS = [
    "Hello, world!",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n\n    def __repr__(self):\n        return f\"Point({self.x!r}, {self.y!r})\"\n",
    "    indented    with   many     spaces    ",
    "\ttabs\tand\t\ttabs\n",
    "line one\nline two\n\n\nline five",
    "windows\r\nline\r\nendings\r\n",
    "Mixed\r\n\r\nblank\r\n\r\n",
    "1234567890 98765432109876543210 3.14159 1e-10 0x1F -42",
    "3141592653589793238462643383279502884197169399375105820974944",
    "I don't think they'll go; she's here, we've been, I'm sure it'd be fine.",
    "I'M LOUD, YOU'RE TOO, THEY'VE SAID IT'S 'QUOTED' AND DON'T",
    "'s 't 're 've 'm 'll 'd",
    "Café naïve résumé façade Ångström Straße señor",
    "αβγδε ΑΒΓΔΕ λόγος Привет мир",
    "中文分词测试：你好，世界！",
    "日本語のテキストとカタカナ、ひらがな。",
    "한국어 텍스트입니다",
    "नमस्ते दुनिया",
    "مرحبا بالعالم",
    "Emoji: 😀🎉👍🏽 👨‍👩‍👧 🇫🇷",
    "🙂 smiley and 🐍 snake",
    "Mixed: hello世界123abc über-cool",
    "<|im_start|>user\nHi there!<|im_end|>\n<|im_start|>assistant\n",
    "text<|endoftext|>more text",
    "<|im_end|><|im_end|>",
    "",
    " ",
    "\n",
    "a",
    "   leading and trailing   ",
    "   \n   \n\t\n",
    "trailing spaces before newline   \nnext",
    "x = {'key': [1, 2, 3], \"other\": None}  # comment",
    "if (a && b || !c) { return a->b[i] >= 0 ? x : y; }",
    "https://example.com/path?query=1&other=two#frag",
    "email@example.org, @handle #hashtag $100 50% ^_^",
    "....!!!???,,,;;;:::",
    "snake_case_identifier camelCaseIdentifier PascalCase SCREAMING_CASE",
    "for i in range(10):\n\tprint(i ** 2)\n",
    "Zero\u200bwidth and non\u00a0breaking space",
]

_WORDS = {
    "en": "the of and to in is that for it with as was on be by this are from at or have an not "
          "but all were when we there can which their said if do will each about how up out them "
          "then she many some so these would other into has more her two like him see time could "
          "no make than first been its who now people my made over did down only way find use may "
          "water long little very after words called just where most know get through back much "
          "before go good new write our used me man too any day same right look think also around "
          "another came come work three word must because does part even place well such here take "
          "why things help put years different away again off went old number great tell men say",
    "code": "def class return import from self None True False if elif else for while in range len "
            "print yield lambda with as try except finally raise assert global pass break continue "
            "int str list dict set tuple open read write append extend items keys values format "
            "value result index count name path data args kwargs config model token tensor buffer",
    "fr": "le la les des une est dans pour pas que qui sur avec être été très déjà où même après "
          "français élève à côté garçon forêt hôpital noël",
    "de": "der die das und ist nicht mit auf für über schön größe straße mädchen grüße können",
    "es": "el los las una está niño año señor canción corazón mañana también",
    "el": "και το της είναι στο από λόγος αλφάβητο",
    "ru": "и в не на я что он с как это быть привет мир",
    "zh": "的 一 是 不 了 人 我 在 有 他 这 中 大 来 上 国 个 到 说 们 为 子 和 你 地 出 道 也 时 年 "
          "你好 世界 中文 测试 分词 数据 模型",
    "ja": "の に は を た が で て と し れ さ ある いる も する から な こと として い や れる など "
          "なっ ない この ため その あっ よう また もの という あり まで られ なる へ か だ これ "
          "日本語 テキスト カタカナ ひらがな",
}


def fixture_corpus():
    """A deterministic, varied training text (prose in several scripts, code, numbers, whitespace)."""
    rng = random.Random(1234)
    lines = []
    langs = sorted(_WORDS)
    vocab = {k: v.split() for k, v in _WORDS.items()}
    for i in range(6000):
        lang = langs[i % len(langs)] if i % 3 else "en"
        ws = [rng.choice(vocab[lang]) for _ in range(rng.randint(3, 14))]
        kind = rng.randint(0, 9)
        if kind == 0:
            line = "    " * rng.randint(0, 3) + f"{ws[0]}_{ws[-1]} = {ws[1]}({ws[2]}, {rng.randint(0, 999)})"
        elif kind == 1:
            line = " ".join(ws).capitalize() + rng.choice([".", "!", "?", "...", ":"])
        elif kind == 2:
            line = " ".join(ws).upper() + " " + str(rng.randint(0, 10 ** rng.randint(1, 12)))
        elif kind == 3:
            line = "\t".join(ws) + rng.choice(["\n", "\r\n", "  \n"])
        elif kind == 4:
            line = f"if {ws[0]} != {ws[1]}:\n{'    '}return [{', '.join(ws[2:])}]"
        else:
            line = " ".join(ws)
        if rng.random() < 0.1:
            line += " " + rng.choice(["😀", "🎉", "🐍", "👍", "❤️", "✓", "→", "€", "£", "°C"])
        if rng.random() < 0.1:
            line = line.replace("t ", "t's ").replace("n ", "n't ")
        lines.append(line)
    return lines


def train_bpe_tokenizer(lines, vocab_size, specials=BPE_SPECIALS):
    """Byte-level BPE with the exact Qwen2 pre-tokenizer (Split regex + ByteLevel without regex)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, show_progress=False,
        special_tokens=[AddedToken(s, special=True, normalized=False) for s in specials],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(lines, trainer=trainer, length=len(lines))
    return tok


def bpe_tokenizer_config(tok, model_max_length=32768):
    added = {}
    for s in BPE_SPECIALS:
        added[str(tok.token_to_id(s))] = {"content": s, "lstrip": False, "normalized": False,
                                          "rstrip": False, "single_word": False, "special": True}
    return {"add_bos_token": False, "add_prefix_space": False, "added_tokens_decoder": added,
            "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
            "unk_token": None, "chat_template": CHATML_TEMPLATE, "clean_up_tokenization_spaces": False,
            "errors": "replace", "model_max_length": model_max_length, "split_special_tokens": False,
            "tokenizer_class": "Qwen2Tokenizer"}


def train_spm_tokenizer(lines, vocab_size):
    """SentencePiece-style (Llama-2/Mistral tokenizer.json) BPE: ▁ metaspace, <0xNN> byte fallback."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from tokenizers import processors, trainers
    # Train on ▁-prefixed words (as SentencePiece does) with a small alphabet, so rare characters
    # (CJK, emoji) are left to byte fallback.
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    n_bytes = 256
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - 3 - n_bytes, min_frequency=2,
                                  show_progress=False, limit_alphabet=120)
    t.train_from_iterator(lines, trainer=trainer, length=len(lines))
    trained = json.loads(t.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in trained["merges"]]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for piece, _ in sorted(trained["vocab"].items(), key=lambda kv: kv[1]):
        if piece not in vocab:
            vocab[piece] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True,
                               fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"),
                                           normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False)
                            for s in ("<unk>", "<s>", "</s>")])
    tok.post_processor = processors.TemplateProcessing(
        single="<s>:0 $A:0", pair="<s>:0 $A:0 <s>:1 $B:1", special_tokens=[("<s>", 1)])
    return tok


def spm_tokenizer_config():
    added = {str(i): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                      "single_word": False, "special": True}
             for i, s in enumerate(("<unk>", "<s>", "</s>"))}
    return {"add_bos_token": True, "add_eos_token": False, "added_tokens_decoder": added,
            "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": None,
            "clean_up_tokenization_spaces": False, "legacy": True, "model_max_length": 4096,
            "sp_model_kwargs": {},
            # The generic class loads tokenizer.json as it is; transformers 5's LlamaTokenizer rebuilds
            # its own pipeline and then differs on whitespace runs and on text around <s>/</s>.
            "tokenizer_class": "PreTrainedTokenizerFast"}


def write_tokenizer_dir(d, tok, config, texts):
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    tok.save(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2, ensure_ascii=False)
        f.write("\n")
    encs = []
    for t in texts:
        e = tok.encode(t, add_special_tokens=True)
        encs.append({"text": t, "ids": e.ids})
        assert tok.decode(e.ids, skip_special_tokens=False) is not None
    with open(os.path.join(d, "encodings.json"), "w") as f:
        json.dump(encs, f, indent=1, ensure_ascii=False)
        f.write("\n")
    # Cross-check against transformers' own loading of the directory (report only).
    try:
        from transformers import AutoTokenizer
        hf = AutoTokenizer.from_pretrained(d)
        bad = [e["text"] for e in encs if hf(e["text"], add_special_tokens=True)["input_ids"] != e["ids"]]
        print(f"  {os.path.basename(d)}: AutoTokenizer ({type(hf).__name__}) agrees on "
              f"{len(encs) - len(bad)}/{len(encs)}; differs on {bad[:5]!r}")
    except Exception as e:  # noqa: BLE001 - diagnostic only
        print(f"  {os.path.basename(d)}: AutoTokenizer cross-check failed: {type(e).__name__}: {e}")
    rt = sum(tok.decode(e["ids"], skip_special_tokens=False) == e["text"]
             or tok.decode(e["ids"], skip_special_tokens=True) == e["text"] for e in encs)
    print(f"  {os.path.basename(d)}: vocab {tok.get_vocab_size()}, decode round-trips {rt}/{len(encs)}")


def make_tokenizers(out_dir):
    lines = fixture_corpus()
    bpe = train_bpe_tokenizer(lines, 1000)
    again = train_bpe_tokenizer(lines, 1000)
    assert bpe.to_str() == again.to_str(), "BPE training is not deterministic"
    write_tokenizer_dir(os.path.join(out_dir, "bpe"), bpe, bpe_tokenizer_config(bpe), ENCODING_TEXTS)
    spm = train_spm_tokenizer(lines, 1000)
    texts = ENCODING_TEXTS + ["text with <s> and </s> inside", "  two leading spaces"]
    write_tokenizer_dir(os.path.join(out_dir, "spm"), spm, spm_tokenizer_config(), texts)


def tree_digest(root):
    h = hashlib.sha256()
    for dp, _, fs in sorted(os.walk(root)):
        for fn in sorted(fs):
            p = os.path.join(dp, fn)
            h.update(os.path.relpath(p, root).encode())
            with open(p, "rb") as f:
                h.update(f.read())
    return h.hexdigest()[:16]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data"))
    ap.add_argument("--only", nargs="*",
                    help="names to build, space or comma separated (models, or 'tokenizers'); default all")
    args = ap.parse_args()
    only = [n for item in (args.only or []) for n in item.split(",") if n]
    unknown = [n for n in only if n not in MODEL_SPECS and n != "tokenizers"]
    if unknown:
        ap.error(f"--only: unknown names {unknown}; known: {sorted(MODEL_SPECS)} and 'tokenizers'")
    torch.set_num_threads(1)
    import transformers
    import tokenizers
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"tokenizers {tokenizers.__version__}")
    models_dir = os.path.join(args.out, "models")
    os.makedirs(models_dir, exist_ok=True)
    failures = []
    for name in [n for n in only if n != "tokenizers"] if only else MODEL_SPECS:
        try:
            make_model(name, models_dir)
        except Exception as e:  # keep going so one bad architecture doesn't lose the others
            import traceback
            traceback.print_exc()
            failures.append(name)
    if not only or "tokenizers" in only:
        tok_dir = os.path.join(args.out, "tokenizers")
        os.makedirs(tok_dir, exist_ok=True)
        try:
            make_tokenizers(tok_dir)
        except Exception:
            import traceback
            traceback.print_exc()
            failures.append("tokenizers")
    total = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(args.out) for f in fs)
    print(f"tests/data total {total / 2**20:.2f} MiB, digest {tree_digest(args.out)}")
    if failures:
        print("FAILED:", failures)
        sys.exit(1)


if __name__ == "__main__":
    main()
