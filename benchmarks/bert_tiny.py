"""A BERT-tiny-like training step (Google's BERT-tiny shape: 2 encoder layers, hidden
128, 2 heads, MLP 512; post-norm, GELU, a pooler and a 2-class head, AdamW), written
with torch.nn alone (no download, no transformers), its vocabulary cut from 30,522 to
2,048 tokens so that the backward pass is not AdamW streaming the 3.9M-entry embedding
(23 ms of a 26 ms step here): a dispatch-bound step, a few milliseconds of many small
ops, where what a tracer adds per call shows most. A workload for dltrace
(docs/workloads.md) that benchmarks/workloads.py measures beside torchvision's
ResNet-18; not a registry example (the survey does not probe it)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, HIDDEN, LAYERS, HEADS, MLP, SEQ, BATCH = 2048, 128, 2, 2, 512, 32, 2


class BertTiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, HIDDEN)
        self.positions = nn.Embedding(512, HIDDEN)
        self.types = nn.Embedding(2, HIDDEN)
        self.norm = nn.LayerNorm(HIDDEN, eps=1e-12)
        layer = nn.TransformerEncoderLayer(HIDDEN, HEADS, MLP, dropout=0.1, activation="gelu", batch_first=True,
                                           layer_norm_eps=1e-12)
        self.encoder = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.pooler = nn.Linear(HIDDEN, HIDDEN)
        self.classifier = nn.Linear(HIDDEN, 2)

    def forward(self, ids, mask):
        pos = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
        x = self.norm(self.tokens(ids) + self.positions(pos) + self.types(torch.zeros_like(ids)))
        x = self.encoder(x, src_key_padding_mask=~mask)
        return self.classifier(torch.tanh(self.pooler(x[:, 0])))


def workload(device):
    torch.manual_seed(0)
    model = BertTiny().to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ)).to(device)
    mask = torch.ones(BATCH, SEQ, dtype=torch.bool)
    mask[1, SEQ // 2:] = False
    mask = mask.to(device)
    labels = torch.tensor([0, 1]).to(device)

    def forward():
        return F.cross_entropy(model(ids, mask), labels)

    def backward(loss):
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return forward, backward, list(model.parameters())
