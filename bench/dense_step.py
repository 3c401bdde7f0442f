"""The dense decoder of worker/model in PyTorch, timed the way bench/worker_bench
times the C++ trainer: forward + backward + AdamW step on a fixed batch. Prints
one JSON line with the median step time. Used only by bench/worker_bench.

usage: python3 dense_step.py D_MODEL N_HEADS N_LAYERS D_FF VOCAB CONTEXT BATCH THREADS REPEATS
"""
import json
import math
import sys
import time

import torch
import torch.nn.functional as F


class RMSNorm(torch.nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos.unsqueeze(1), sin.unsqueeze(1)
    return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], -1)


class Block(torch.nn.Module):
    def __init__(self, d, h, d_ff):
        super().__init__()
        self.h = h
        self.norm1, self.norm2 = RMSNorm(d), RMSNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d, bias=False)
        self.proj = torch.nn.Linear(d, d, bias=False)
        self.w13 = torch.nn.Linear(d, 2 * d_ff, bias=False)
        self.w2 = torch.nn.Linear(d_ff, d, bias=False)

    def attn(self, x, cos, sin):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4).unbind(0)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.h)
        future = torch.ones(n, n, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
        return self.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d))

    def forward(self, x, cos, sin):
        a = self.attn(self.norm1(x), cos, sin)
        gate, up = self.w13(self.norm2(x + a)).chunk(2, -1)
        return x + a + self.w2(F.silu(gate) * up)


class Decoder(torch.nn.Module):
    def __init__(self, vocab, d, h, layers, d_ff, context):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)
        self.blocks = torch.nn.ModuleList(Block(d, h, d_ff) for _ in range(layers))
        self.norm = RMSNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)
        half = d // h // 2
        inv = 10000.0 ** (-torch.arange(half, dtype=torch.float64) / half)
        angles = torch.outer(torch.arange(context, dtype=torch.float64), inv)
        self.register_buffer("cos", angles.cos().float().unsqueeze(0))
        self.register_buffer("sin", angles.sin().float().unsqueeze(0))

    def forward(self, tokens):
        x = self.emb(tokens)
        for block in self.blocks:
            x = block(x, self.cos, self.sin)
        return self.head(self.norm(x))


def main():
    d, h, layers, d_ff, vocab, context, batch, threads, repeats = map(int, sys.argv[1:10])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = Decoder(vocab, d, h, layers, d_ff, context)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    tokens = torch.randint(0, vocab, (batch, context))
    targets = torch.randint(0, vocab, (batch, context))
    times = []
    for i in range(repeats + 2):
        start = time.perf_counter()
        opt.zero_grad()
        loss = F.cross_entropy(model(tokens).reshape(-1, vocab), targets.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if i >= 2:
            times.append(time.perf_counter() - start)
    times.sort()
    print(json.dumps({"median_s": times[len(times) // 2], "torch": torch.__version__}))


if __name__ == "__main__":
    main()
