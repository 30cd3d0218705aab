"""Experiment (session 34, issue 15; not part of the engine yet): restore the case and commas of
recognizer words with L = 2 words of right context, before the model reads them.
On all of newstest2013 (v4, int8, guard 8, beam 5) the recognizer view scores 12.05, restored
12.84 (written 15.01); notes/model-notes.md, "A restorer with two words of right context".
train: python scripts/restore_experiment.py train CORPUS.de OUT.pt [MINUTES]
apply: python scripts/restore_experiment.py apply OUT.pt RECOGNIZER.txt > RESTORED.txt
score: python scripts/restore_experiment.py score OUT.pt WRITTEN.de
"""

import collections
import random
import sys
import time
import zlib

import torch
from torch import nn

from simulmt.data.asr import recognizer_word, strip_punctuation

CASES = ["lower", "cap", "upper"]
PUNCT = ["", ",", ".", "?", "!", ":"]
L = 2
V = 60000
H = 1 << 15


def labels(line):
    toks = line.split()
    words, cases, puncts = [], [], []
    for t in toks:
        r = recognizer_word(t)
        core = strip_punctuation(t)
        if r:
            words.append(r)
            if core == r:
                c = 0
            elif len(core) > 1 and core.isupper():
                c = 2
            else:
                c = 1
            cases.append(c)
            p = 0
            for ch in t[::-1]:
                if ch in ",.?!:;":
                    p = PUNCT.index(ch) if ch in PUNCT else 1
                    break
                if ch.isalnum():
                    break
            puncts.append(p)
        elif puncts:
            for ch in t:
                if ch in ",.?!:" and puncts[-1] == 0:
                    puncts[-1] = PUNCT.index(ch)
    return words, cases, puncts


def hid(s, salt):
    return zlib.crc32((salt + s).encode()) % H


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Embedding(V + 1, 128)
        self.s = nn.Embedding(H, 64)
        self.gru = nn.GRU(192, 256, batch_first=True)
        self.head = nn.Sequential(
            nn.Linear(256 + 192, 256), nn.ReLU(), nn.Linear(256, len(CASES) + len(PUNCT))
        )

    def forward(self, wid, sid):  # (B, T), (B, T, 3)
        x = torch.cat([self.w(wid), self.s(sid).sum(2)], -1)  # (B, T, 192)
        h, _ = self.gru(x)  # (B, T, 256)
        T = h.shape[1]
        idx = torch.clamp(torch.arange(T) + L, max=T - 1)
        ahead = h[:, idx]  # state after reading word j+L (or the last)
        return self.head(torch.cat([ahead, x], -1))


def feats(words, vocab):
    wid = [vocab.get(w, V) for w in words]
    sid = [[hid(w[-3:], "s3"), hid(w[-4:], "s4"), hid(w[:4], "p4")] for w in words]
    return wid, sid


def batchify(items, vocab):
    T = max(len(w) for w, _, _ in items)
    wid = torch.full((len(items), T), V)
    sid = torch.zeros((len(items), T, 3), dtype=torch.long)
    yc = torch.full((len(items), T), -100)
    yp = torch.full((len(items), T), -100)
    for i, (w, c, p) in enumerate(items):
        a, b = feats(w, vocab)
        wid[i, : len(w)] = torch.tensor(a)
        sid[i, : len(w)] = torch.tensor(b)
        yc[i, : len(w)] = torch.tensor(c)
        yp[i, : len(w)] = torch.tensor(p)
    return wid, sid, yc, yp


def train(corpus, out, minutes=12):
    torch.set_num_threads(2)
    data = [labels(line) for line in open(corpus, encoding="utf-8")]
    data = [d for d in data if 0 < len(d[0]) <= 60]
    cnt = collections.Counter(w for d in data for w in d[0])
    vocab = {w: i for i, (w, _) in enumerate(cnt.most_common(V))}
    random.seed(0)
    random.shuffle(data)
    net = Net()
    opt = torch.optim.Adam(net.parameters(), 2e-3)
    ce = nn.CrossEntropyLoss(ignore_index=-100)
    t0 = time.time()
    step = 0
    data.sort(key=lambda d: len(d[0]))
    batches = [data[i : i + 128] for i in range(0, len(data), 128)]
    while time.time() - t0 < minutes * 60:
        random.shuffle(batches)
        for b in batches:
            wid, sid, yc, yp = batchify(b, vocab)
            o = net(wid, sid)
            loss = ce(o[..., :3].reshape(-1, 3), yc.reshape(-1)) + ce(
                o[..., 3:].reshape(-1, len(PUNCT)), yp.reshape(-1)
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step % 200 == 0:
                print(step, round(loss.item(), 3), int(time.time() - t0), flush=True)
            if time.time() - t0 > minutes * 60:
                break
    torch.save({"net": net.state_dict(), "vocab": vocab}, out)


def load(path):
    """The trained network (eval mode) and its vocabulary."""
    ck = torch.load(path)
    net = Net()
    net.load_state_dict(ck["net"])
    return net.eval(), ck["vocab"]


def predict(net, vocab, words):
    """Each word's case class and punctuation class (indices into CASES and PUNCT)."""
    wid, sid = feats(words, vocab)
    with torch.no_grad():
        o = net(torch.tensor([wid]), torch.tensor([sid]))[0]  # (T, 3 + len(PUNCT))
    return o[:, :3].argmax(1).tolist(), o[:, 3:].argmax(1).tolist()


def restore_line(net, vocab, line, punct=True, case=True):
    words = line.split()
    if not words:
        return line
    out = []
    for w, c, p in zip(words, *predict(net, vocab, words), strict=True):
        if case and c == 1:
            w = w[0].upper() + w[1:]
        elif case and c == 2:
            w = w.upper()
        if punct and p == 1:
            w += ","
        out.append(w)
    return " ".join(out)


if __name__ == "__main__":
    if sys.argv[1] == "train":
        train(sys.argv[2], sys.argv[3], float(sys.argv[4]) if len(sys.argv) > 4 else 12)
    elif sys.argv[1] == "apply":
        net, vocab = load(sys.argv[2])
        mode = sys.argv[4] if len(sys.argv) > 4 else "both"
        for line in open(sys.argv[3], encoding="utf-8"):
            print(
                restore_line(
                    net,
                    vocab,
                    line.strip(),
                    punct=mode in ("both", "punct"),
                    case=mode in ("both", "case"),
                )
            )
    elif sys.argv[1] == "score":  # accuracy on written text
        net, vocab = load(sys.argv[2])
        tc = nc = tp = fp = fn = 0
        for line in open(sys.argv[3], encoding="utf-8"):
            w, c, p = labels(line)
            if not w:
                continue
            pc, pp = predict(net, vocab, w)
            tc += sum(a == b for a, b in zip(pc, c, strict=True))
            nc += len(c)
            for a, b in zip(pp, p, strict=True):
                tp += a == 1 and b == 1
                fp += a == 1 and b != 1
                fn += a != 1 and b == 1
        print(
            f"case acc {tc / nc:.3f}  comma P {tp / max(1, tp + fp):.2f}",
            f"R {tp / max(1, tp + fn):.2f}",
        )
