#!/usr/bin/env python3
"""Trains the bundled tiny draft/target pair (models/) on the Python standard library's sources.

A byte-level BPE tokenizer (Qwen2-style, shared), a Qwen3-MoE target and a several-times-smaller
dense Qwen3 draft, each trained for a fixed wall-clock budget on the GPU machine. Then it measures,
in PyTorch, what the C++ engine must reproduce: held-out loss, greedy and sampled (T=0.8)
speculative acceptance rates of the draft against the target for draft lengths 1..8 on fixed
held-out prompts, and the target's expert-routing statistics. Writes models/tiny-target,
models/tiny-draft, models/pair_stats.json and models/pair_prompts.json.

Run on the GPU machine: python3 train_tiny_pair.py --out ../models   (about 6-7 minutes)
"""
import argparse
import glob
import hashlib
import json
import math
import os
import shutil
import sys
import sysconfig
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import CHATML_TEMPLATE, bpe_tokenizer_config, train_bpe_tokenizer  # noqa: E402

SEQ = 256


def log(*a):
    print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


# ----------------------------------------------------------------------------------------------
# Corpus and tokenizer
# ----------------------------------------------------------------------------------------------

def load_corpus(heldout_mod):
    root = sysconfig.get_paths()["stdlib"]
    skip = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}
    train, val, held = [], [], []
    for p in sorted(glob.glob(os.path.join(root, "**", "*.py"), recursive=True)):
        rel = os.path.relpath(p, root)
        if skip & set(rel.split(os.sep)[:-1]):
            continue
        try:
            with open(p, encoding="utf-8") as f:
                text = f.read()
        except (UnicodeDecodeError, OSError):
            continue
        if not text.strip():
            continue
        bucket = hashlib.sha1(rel.encode()).digest()[0] % heldout_mod
        (held if bucket == 0 else val if bucket == 1 else train).append((rel, text))
    return root, train, val, held


def encode_stream(tok, docs, eos):
    ids = []
    for enc in tok.encode_batch([t for _, t in docs], add_special_tokens=False):
        ids.extend(enc.ids)
        ids.append(eos)
    return torch.tensor(ids, dtype=torch.int64)


# ----------------------------------------------------------------------------------------------
# Models
# ----------------------------------------------------------------------------------------------

def make_cfg(cls_name, theta, **kw):
    import transformers
    cls = getattr(transformers, cls_name)
    try:
        return cls(**kw, rope_parameters={"rope_type": "default", "rope_theta": theta})
    except TypeError as e:
        log(f"config {cls_name}: rope_parameters refused ({e}); using rope_theta")
        head_dim = kw.pop("head_dim", None)
        cfg = cls(**kw, rope_theta=theta)
        if head_dim is not None:
            cfg.head_dim = head_dim
        return cfg


def target_cfg(vocab, eos):
    return make_cfg("Qwen3MoeConfig", 1000000.0,
                    vocab_size=vocab, hidden_size=256, intermediate_size=768, moe_intermediate_size=48,
                    num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                    num_experts=32, num_experts_per_tok=4, norm_topk_prob=True, decoder_sparse_step=1,
                    mlp_only_layers=[], rms_norm_eps=1e-6, max_position_embeddings=4096,
                    tie_word_embeddings=True, attention_bias=False, use_sliding_window=False,
                    router_aux_loss_coef=0.01, output_router_logits=False,
                    bos_token_id=None, eos_token_id=eos, pad_token_id=eos)


def draft_cfg(vocab, eos):
    return make_cfg("Qwen3Config", 1000000.0,
                    vocab_size=vocab, hidden_size=128, intermediate_size=384, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-6,
                    max_position_embeddings=4096, tie_word_embeddings=True, attention_bias=False,
                    use_sliding_window=False, bos_token_id=None, eos_token_id=eos, pad_token_id=eos)


def from_config(cfg, **impl):
    from transformers import AutoModelForCausalLM
    try:
        return AutoModelForCausalLM.from_config(cfg, **impl)
    except (TypeError, ValueError) as e:
        impl.pop("experts_implementation", None)
        log(f"from_config without experts_implementation ({e})")
        return AutoModelForCausalLM.from_config(cfg, **impl)


def from_pretrained(d, **impl):
    from transformers import AutoModelForCausalLM
    try:
        return AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, **impl)
    except (TypeError, ValueError) as e:
        impl.pop("experts_implementation", None)
        log(f"from_pretrained without experts_implementation ({e})")
        return AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, **impl)


def count_params(model):
    return sum(p.numel() for p in model.parameters())


def lm_loss(model, x, is_moe, aux_coef):
    out = model(input_ids=x[:, :-1], output_router_logits=True) if is_moe else model(input_ids=x[:, :-1])
    loss = F.cross_entropy(out.logits.float().reshape(-1, out.logits.shape[-1]), x[:, 1:].reshape(-1))
    aux = getattr(out, "aux_loss", None) if is_moe else None
    total = loss + aux_coef * aux if aux is not None else loss
    return total, loss


def build_trainable(cfg, is_moe, batch, stream, dev):
    """Picks the fastest experts implementation that trains here (grouped_mm, else eager)."""
    impls = ["grouped_mm", "eager"] if is_moe else [None]
    for impl in impls:
        kw = {"attn_implementation": "sdpa"}
        if impl:
            kw["experts_implementation"] = impl
        try:
            torch.manual_seed(0)
            model = from_config(cfg, **kw).to(dev).float().train()
            x = stream[:2 * (SEQ + 1)].view(2, SEQ + 1).to(dev)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                total, _ = lm_loss(model, x, is_moe, 0.01)
            total.backward()
            assert torch.isfinite(total), total
            model.zero_grad(set_to_none=True)
            torch.manual_seed(0)
            model = from_config(cfg, **kw).to(dev).float().train()
            log(f"training with experts_implementation={impl}")
            return model, impl
        except Exception as e:  # noqa: BLE001 - fall back to the next implementation
            log(f"experts_implementation={impl} failed: {type(e).__name__}: {str(e)[:300]}")
    raise RuntimeError("no experts implementation trains")


def windows(stream, n):
    """n evenly spaced [n, SEQ+1] windows over a token stream (so no single file dominates)."""
    n = min(n, (len(stream) - 1) // (SEQ + 1))
    starts = torch.linspace(0, len(stream) - SEQ - 1, n).long()
    return stream[starts[:, None] + torch.arange(SEQ + 1)]


def lm_objective(is_moe, aux_coef=0.01):
    """Next-token cross entropy (+ the router's aux loss while training a MoE): (objective, CE)."""
    def fn(model, x, training):
        total, loss = lm_loss(model, x, is_moe and training, aux_coef if training else 0)
        return (total if training else loss), loss
    fn.name = "cross entropy"
    return fn


def distill_objective(teacher):
    """Forward KL(teacher || student) over every position, with the teacher's soft next-token
    distribution at T = 1: what speculative acceptance rewards (1 - TV(p, q) per token, and TV is
    bounded by KL through Pinsker) rather than the corpus's one-hot next token, which the small
    corpus lets a model overfit. Returns (KL, CE of the student against the corpus)."""
    def fn(model, x, training):
        with torch.no_grad():
            logp = F.log_softmax(teacher(input_ids=x[:, :-1]).logits.float(), -1)
        logits = model(input_ids=x[:, :-1]).logits.float()
        logq = F.log_softmax(logits, -1)
        kl = (logp.exp() * (logp - logq)).sum(-1).mean()
        ce = F.nll_loss(logq.reshape(-1, logq.shape[-1]), x[:, 1:].reshape(-1))
        return kl, ce
    fn.name = "KL(target || draft)"
    return fn


def load_teacher(d, stream, dev):
    """The saved target for distillation: grouped_mm experts where they run here, else eager."""
    for impl in ("grouped_mm", "eager"):
        try:
            t = from_pretrained(d, attn_implementation="sdpa", experts_implementation=impl).to(dev).eval()
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
                t(input_ids=stream[:2 * SEQ].view(2, SEQ).to(dev))
            log(f"teacher: experts_implementation={impl}")
            return t
        except Exception as e:  # noqa: BLE001 - fall back to eager
            log(f"teacher with experts_implementation={impl} failed: {type(e).__name__}: {str(e)[:300]}")
    raise RuntimeError("the target does not run as a teacher")


def train(model, objective, stream, val_stream, seconds, batch, lr, dev, seed, eval_every=15.0):
    """Time-boxed AdamW on objective(model, x, training) -> (objective, CE); keeps the weights with
    the best validation objective (the corpus is small)."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    nodecay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": nodecay, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.95),
                            fused=True)
    stream_dev = stream.to(dev)
    ar = torch.arange(SEQ + 1, device=dev)
    warmup = 50
    t0 = time.time()
    step, tokens, ema = 0, 0, None
    val_x = windows(val_stream, 64).to(dev)
    best = (float("inf"), 0, None)
    curve = []
    next_eval = eval_every
    while True:
        elapsed = time.time() - t0
        if elapsed >= next_eval or elapsed >= seconds:
            next_eval += eval_every
            model.eval()
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
                vl = float(sum(objective(model, val_x[i:i + 32], False)[0] for i in range(0, len(val_x), 32))
                           / len(range(0, len(val_x), 32)))
            model.train()
            curve.append([step, round(vl, 4)])
            log(f"  step {step} validation {objective.name} {vl:.4f}")
            if vl < best[0]:
                best = (vl, step, {k: v.detach().clone() for k, v in model.state_dict().items()})
        if elapsed >= seconds:
            break
        frac = elapsed / seconds
        cur = lr * min(1.0, (step + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for group in opt.param_groups:
            group["lr"] = cur
        idx = torch.randint(0, len(stream) - SEQ - 1, (batch,), generator=g).to(dev)
        x = stream_dev[idx[:, None] + ar]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            total, loss = objective(model, x, True)
        opt.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tokens += batch * SEQ
        if step % 50 == 0:
            lv = loss.item()
            ema = lv if ema is None else 0.7 * ema + 0.3 * lv
            log(f"  step {step} loss {lv:.3f} lr {cur:.2e} {tokens / (time.time() - t0) / 1e3:.0f}k tok/s")
    torch.cuda.synchronize()
    model.load_state_dict(best[2])
    return {"objective": objective.name,
            "best_validation_loss": round(best[0], 4), "best_step": best[1], "validation_curve": curve,
            "steps": step, "tokens": tokens, "seconds": round(time.time() - t0, 1),
            "batch": batch, "seq_len": SEQ, "peak_lr": lr, "final_train_loss_ema": ema}


@torch.no_grad()
def heldout_loss(model, held_stream, dev, n_windows=128):
    x = windows(held_stream, n_windows).to(dev)
    n = len(x)
    total, count = 0.0, 0
    for i in range(0, n, 32):
        xb = x[i:i + 32]
        logits = model(input_ids=xb[:, :-1]).logits.float()
        total += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), xb[:, 1:].reshape(-1),
                                       reduction="sum"))
        count += xb[:, 1:].numel()
    return total / count, n


# ----------------------------------------------------------------------------------------------
# Speculative decoding measurement (batched over prompts; full recompute, right padding is exact
# under the causal mask since padding only ever follows the real tokens)
# ----------------------------------------------------------------------------------------------

@torch.no_grad()
def logits_at(model, seqs, wants, dev):
    """seqs: list of token lists; wants: list of position lists. Returns [B, len(want), V] fp32."""
    L = max(len(s) for s in seqs)
    x = torch.zeros((len(seqs), L), dtype=torch.int64)
    for b, s in enumerate(seqs):
        x[b, :len(s)] = torch.tensor(s)
    logits = model(input_ids=x.to(dev)).logits.float()
    pos = torch.tensor(wants, device=dev)
    return logits[torch.arange(len(seqs), device=dev)[:, None], pos]


@torch.no_grad()
def speculative_rates(target, draft, prompts, k, new_tokens, temperature, greedy, dev, seed):
    gen = torch.Generator(device=dev).manual_seed(seed)
    seqs = [list(p) for p in prompts]
    made = [0] * len(seqs)
    drafted = accepted = passes = 0
    while True:
        active = [b for b in range(len(seqs)) if made[b] < new_tokens]
        if not active:
            break
        cur = [list(seqs[b]) for b in active]
        drafts = [[] for _ in active]
        qs = []
        for i in range(k):
            lg = logits_at(draft, cur, [[len(c) - 1] for c in cur], dev)[:, 0]
            if greedy:
                tok = lg.argmax(-1)
            else:
                q = torch.softmax(lg / temperature, -1)
                qs.append(q)
                tok = torch.multinomial(q, 1, generator=gen)[:, 0]
            for j, t in enumerate(tok.tolist()):
                cur[j].append(t)
                drafts[j].append(t)
        base = [len(seqs[b]) - 1 for b in active]
        tl = logits_at(target, cur, [[p + i for i in range(k + 1)] for p in base], dev)
        if greedy:
            tt = tl.argmax(-1).tolist()
        else:
            p_all = torch.softmax(tl / temperature, -1)
            u = torch.rand((len(active), k), generator=gen, device=dev).tolist()
        for j, b in enumerate(active):
            new = []
            if greedy:
                n = 0
                while n < k and drafts[j][n] == tt[j][n]:
                    n += 1
                new = drafts[j][:n] + [tt[j][n]]
            else:
                n = 0
                rejected = False
                while n < k:
                    x = drafts[j][n]
                    px = float(p_all[j, n, x])
                    qx = float(qs[n][j, x])
                    if u[j][n] < min(1.0, px / qx):
                        n += 1
                        continue
                    resid = torch.clamp(p_all[j, n] - qs[n][j], min=0)
                    if float(resid.sum()) <= 0:
                        resid = p_all[j, n]
                    corr = int(torch.multinomial(resid / resid.sum(), 1, generator=gen))
                    rejected = True
                    break
                if not rejected:
                    corr = int(torch.multinomial(p_all[j, k], 1, generator=gen))
                new = drafts[j][:n] + [corr]
            drafted += k
            accepted += n
            passes += 1
            seqs[b].extend(new)
            made[b] += len(new)
    return {"acceptance_rate": accepted / drafted, "accepted": accepted, "drafted": drafted,
            "target_passes": passes, "tokens_per_target_pass": (accepted + passes) / passes}


@torch.no_grad()
def plain_greedy(model, prompt, n, dev):
    seq = list(prompt)
    for _ in range(n):
        seq.append(int(logits_at(model, [seq], [[len(seq) - 1]], dev)[0, 0].argmax()))
    return seq[len(prompt):]


# ----------------------------------------------------------------------------------------------
# Routing statistics
# ----------------------------------------------------------------------------------------------

@torch.no_grad()
def routing_stats(model, held_stream, n_experts, top_k, dev, n_windows=64):
    x = windows(held_stream, n_windows)[:, :SEQ].contiguous().to(dev)
    n = len(x)
    captured = []
    hooks = []
    try:
        out = model(input_ids=x, output_router_logits=True)
        rl = getattr(out, "router_logits", None)
        if rl:
            captured = [r.float().reshape(n, SEQ, -1) for r in rl]
    except TypeError:
        pass
    if not captured:  # fall back to hooks on the router modules
        for layer in model.model.layers:
            gate = getattr(layer.mlp, "gate", None)
            if gate is None:
                continue
            hooks.append(gate.register_forward_hook(
                lambda m, i, o: captured.append((o[0] if isinstance(o, tuple) else o).float().reshape(n, SEQ, -1))))
        model(input_ids=x)
        for h in hooks:
            h.remove()
    per_layer = []
    for li, r in enumerate(captured):
        assert r.shape[-1] == n_experts, r.shape
        idx = r.topk(top_k, dim=-1).indices  # softmax is monotone: same top-k as the probabilities
        oh = torch.zeros((n, SEQ, n_experts), dtype=torch.bool, device=dev)
        oh.scatter_(-1, idx, True)
        load = oh.sum((0, 1)).float()
        share = load / load.sum()
        entropy = float(-(share * torch.log(share.clamp_min(1e-12))).sum() / math.log(n_experts))
        overlap = float((oh[:, 1:] & oh[:, :-1]).sum(-1).float().mean() / top_k)
        distinct = []
        for w in range(1, 9):
            u = oh[:, :SEQ - w + 1].clone()
            for j in range(1, w):
                u |= oh[:, j:SEQ - w + 1 + j]
            distinct.append(round(float(u.sum(-1).float().mean()), 3))
        per_layer.append({
            "layer": li,
            "load_histogram": [int(v) for v in load.tolist()],
            "max_over_mean_load": round(float(load.max() / load.mean()), 3),
            "min_over_mean_load": round(float(load.min() / load.mean()), 3),
            "normalized_entropy": round(entropy, 4),
            "consecutive_overlap": round(overlap, 4),
            "mean_distinct_experts_window_1_to_8": distinct,
        })
    uniform = {
        "consecutive_overlap": round(top_k / n_experts, 4),
        "mean_distinct_experts_window_1_to_8": [
            round(n_experts * (1 - (1 - top_k / n_experts) ** w), 3) for w in range(1, 9)],
    }
    return {"tokens": n * SEQ, "num_experts": n_experts, "top_k": top_k, "per_layer": per_layer,
            "uniform_independent_baseline": uniform,
            "definitions": {
                "consecutive_overlap": "mean |experts(t) ∩ experts(t+1)| / top_k",
                "mean_distinct_experts_window_1_to_8": "mean number of distinct experts used by n "
                                                       "consecutive tokens, n = 1..8",
                "normalized_entropy": "entropy of the expert-load share / log(num_experts)"}}


# ----------------------------------------------------------------------------------------------

def write_model_dir(model, d, tok, tok_config, eos_ids, pad_id):
    from safetensors import safe_open
    shutil.rmtree(d, ignore_errors=True)
    model = model.to(torch.bfloat16)
    model.config.output_router_logits = False
    model.save_pretrained(d)
    tok.save(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(tok_config, f, indent=2, ensure_ascii=False)
        f.write("\n")
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": None, "eos_token_id": eos_ids, "pad_token_id": pad_id,
                   "do_sample": False}, f, indent=2)
        f.write("\n")
    st = os.path.join(d, "model.safetensors")
    with safe_open(st, "pt") as f:
        dtypes = {str(f.get_slice(k).get_dtype()) for k in f.keys()}
        names = sorted(f.keys())
    log(f"{d}: {len(names)} tensors, dtypes {dtypes}, {os.path.getsize(st) / 2**20:.2f} MiB; "
        f"e.g. {[n for n in names if '.layers.0.' in n][:6]}")
    assert dtypes <= {"BF16", "bfloat16", "torch.bfloat16"}, dtypes


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "models"))
    ap.add_argument("--target-seconds", type=float, default=200)
    ap.add_argument("--draft-seconds", type=float, default=150)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--prompt-len", type=int, default=48)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--max-k", type=int, default=8)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--draft-loss", choices=("distill", "ce"), default="distill",
                    help="distill: KL to the trained target's next-token distribution; ce: the corpus")
    ap.add_argument("--draft-only", action="store_true",
                    help="keep --out's tiny-target (and its tokenizer and pair_stats.json entries); "
                         "retrain and re-measure the draft")
    args = ap.parse_args()
    import tokenizers
    import transformers
    dev = "cuda"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    t_start = time.time()
    versions = {"python": sys.version.split()[0], "torch": torch.__version__,
                "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
                "gpu": torch.cuda.get_device_name(0)}
    log(versions)

    root, train_docs, val_docs, held_docs = load_corpus(heldout_mod=16)
    train_bytes = sum(len(t.encode()) for _, t in train_docs)
    held_bytes = sum(len(t.encode()) for _, t in held_docs)
    log(f"corpus {root}: {len(train_docs)} train files ({train_bytes / 2**20:.1f} MiB), "
        f"{len(held_docs)} held-out files ({held_bytes / 2**20:.1f} MiB)")
    if args.draft_only:
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(os.path.join(args.out, "tiny-target", "tokenizer.json"))
        log("draft only: the tokenizer and target of " + os.path.join(args.out, "tiny-target"))
    else:
        tok = train_bpe_tokenizer([t for _, t in train_docs], args.vocab)
    V = tok.get_vocab_size()
    eot, im_end = tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|im_end|>")
    train_stream = encode_stream(tok, train_docs, eot)
    held_stream = encode_stream(tok, held_docs, eot)
    val_stream = encode_stream(tok, val_docs, eot)
    log(f"tokenizer vocab {V}; train {len(train_stream) / 1e6:.2f}M tokens, "
        f"held-out {len(held_stream) / 1e6:.2f}M tokens ({train_bytes / len(train_stream):.2f} bytes/token)")

    # Held-out prompts: the first prompt-len tokens of the first line-start chunks of held-out files.
    prompts, prompt_src = [], []
    for rel, text in held_docs:
        if len(prompts) >= args.prompts:
            break
        lines = text.splitlines(keepends=True)
        start = min(len(lines) // 3, 40)
        ids = tok.encode("".join(lines[start:start + 60]), add_special_tokens=False).ids
        if len(ids) >= args.prompt_len:
            prompts.append(ids[:args.prompt_len])
            prompt_src.append(f"{rel} (from line {start + 1})")

    stats = {"versions": versions}
    models = {}
    if args.draft_only:
        with open(os.path.join(args.out, "pair_stats.json")) as f:
            stats["target"] = json.load(f)["target"]
        models["target"] = from_pretrained(os.path.join(args.out, "tiny-target"), attn_implementation="sdpa",
                                           experts_implementation="eager").to(dev).eval()
    for role, cfg_fn, is_moe, seconds, lr in (
            ("target", target_cfg, True, args.target_seconds, 2e-3),
            ("draft", draft_cfg, False, args.draft_seconds, 3e-3)):
        if role in models:
            continue
        cfg = cfg_fn(V, eot)
        model, impl = build_trainable(cfg, is_moe, args.batch, train_stream, dev)
        distill = role == "draft" and args.draft_loss == "distill"
        log(f"{role}: {count_params(model) / 1e6:.2f}M parameters; training {seconds:.0f}s"
            + (" to the target's distribution" if distill else ""))
        # The teacher is the saved bf16 target, with the faster experts implementation where it
        # loads (the measurements below keep eager's), run under the student's autocast.
        teacher = None
        if distill:
            teacher = load_teacher(os.path.join(args.out, "tiny-target"), train_stream, dev)
        objective = distill_objective(teacher) if distill else lm_objective(is_moe)
        tr = train(model, objective, train_stream, val_stream, seconds, args.batch, lr, dev,
                   args.seed + (1 if is_moe else 2))
        tr["experts_implementation"] = impl
        d = os.path.join(args.out, f"tiny-{role}")
        write_model_dir(model, d, tok, bpe_tokenizer_config(tok, 4096), [im_end, eot], eot)
        del model, teacher
        torch.cuda.empty_cache()
        # Everything below runs the saved bf16 weights in fp32 (what the engine loads).
        m = from_pretrained(d, attn_implementation="sdpa", experts_implementation="eager").to(dev).eval()
        hl, nwin = heldout_loss(m, held_stream, dev, n_windows=512)
        c = m.config
        entry = {"parameters": count_params(m), "training": tr, "heldout_loss": round(hl, 4),
                 "heldout_perplexity": round(math.exp(hl), 3), "heldout_tokens": nwin * SEQ,
                 "safetensors_bytes": os.path.getsize(os.path.join(d, "model.safetensors"))}
        if is_moe:
            E, k = c.num_experts, c.num_experts_per_tok
            expert_params = 3 * c.hidden_size * c.moe_intermediate_size
            entry["parameters_active_per_token"] = entry["parameters"] - c.num_hidden_layers * (E - k) * expert_params
        stats[role] = entry
        models[role] = m
        log(f"{role}: held-out loss {hl:.4f} (ppl {math.exp(hl):.2f}) over {nwin * SEQ} tokens")

    target, draft = models["target"], models["draft"]
    stats["routing"] = routing_stats(target, held_stream, target.config.num_experts,
                                     target.config.num_experts_per_tok, dev)
    for li in stats["routing"]["per_layer"]:
        log(f"routing layer {li['layer']}: max/mean {li['max_over_mean_load']}, entropy "
            f"{li['normalized_entropy']}, overlap {li['consecutive_overlap']}, distinct "
            f"{li['mean_distinct_experts_window_1_to_8']}")

    samples = []
    for p in prompts[:2]:
        samples.append({"prompt": tok.decode(p), "target_greedy": tok.decode(plain_greedy(target, p, 64, dev)),
                        "draft_greedy": tok.decode(plain_greedy(draft, p, 64, dev))})
        log("sample prompt:\n" + samples[-1]["prompt"] + "\n--- target continues:\n" + samples[-1]["target_greedy"])
    stats["samples"] = samples

    acc = {"greedy": {}, "sampled": {}}
    for k in range(1, args.max_k + 1):
        for mode in ("greedy", "sampled"):
            r = speculative_rates(target, draft, prompts, k, args.new_tokens, args.temperature,
                                  mode == "greedy", dev, args.seed + 100 * k)
            acc[mode][str(k)] = {kk: (round(v, 4) if isinstance(v, float) else v) for kk, v in r.items()}
        log(f"k={k}: greedy {acc['greedy'][str(k)]['acceptance_rate']:.3f} "
            f"({acc['greedy'][str(k)]['tokens_per_target_pass']:.2f} tok/pass), sampled "
            f"{acc['sampled'][str(k)]['acceptance_rate']:.3f} ({acc['sampled'][str(k)]['tokens_per_target_pass']:.2f} tok/pass)")
    stats["acceptance"] = {
        "definition": "acceptance_rate = accepted draft tokens / drafted tokens; greedy: draft argmax "
                      "accepted while it equals the target argmax; sampled: standard speculative "
                      "sampling (accept with min(1, p/q), resample from norm(max(0, p - q)), bonus "
                      "token from p when all k are accepted), p and q = softmax(logits / T)",
        "temperature": args.temperature, "prompts": len(prompts), "prompt_len": args.prompt_len,
        "new_tokens_per_prompt": args.new_tokens,
        "note": "fp32 compute on the saved bf16 weights, full recompute per pass; sampled rates "
                "are one seeded run each (seed = --seed + 100*k)",
        **acc}
    stats["corpus"] = {"source": f"Python {versions['python']} standard library .py files ({root}), "
                                 "excluding test/, tests/, idle_test/ and site-packages",
                       "license": "Python Software Foundation License Version 2 (PSF-2.0)",
                       "train_files": len(train_docs), "heldout_files": len(held_docs),
                       "validation_files": len(val_docs),
                       "split": "by file: sha1(relative path)[0] % 16 == 0 held-out (test, prompts), "
                                "== 1 validation (checkpoint selection), else train",
                       "train_bytes": train_bytes, "heldout_bytes": held_bytes,
                       "train_tokens": len(train_stream), "heldout_tokens": len(held_stream)}
    stats["tokenizer"] = {"type": "byte-level BPE, Qwen2 pre-tokenizer regex", "vocab_size": V,
                          "specials": {"<|endoftext|>": eot, "<|im_start|>": tok.token_to_id("<|im_start|>"),
                                       "<|im_end|>": im_end}}
    stats["total_seconds"] = round(time.time() - t_start, 1)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "pair_stats.json"), "w") as f:
        json.dump(stats, f, indent=1, ensure_ascii=False)
        f.write("\n")
    with open(os.path.join(args.out, "pair_prompts.json"), "w") as f:
        json.dump({"prompts": prompts, "sources": prompt_src, "new_tokens": args.new_tokens,
                   "temperature": args.temperature, "draft_lengths": list(range(1, args.max_k + 1)),
                   "seed": args.seed}, f, indent=1)
        f.write("\n")
    log(json.dumps({r: {"params": stats[r]["parameters"], "heldout_loss": stats[r]["heldout_loss"]}
                    for r in ("target", "draft")}))
    log(f"done in {stats['total_seconds']}s")


if __name__ == "__main__":
    main()
