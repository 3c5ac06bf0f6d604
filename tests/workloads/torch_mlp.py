"""A torch workload written from docs/workloads.md alone: a small MLP with torch's own
in-place ReLU and dropout, trained with Adam. Used by tests/test_workloads.py."""

import torch
import torch.nn as nn


def workload(device):
    model = nn.Sequential(nn.Linear(12, 16), nn.ReLU(inplace=True), nn.Dropout(0.1), nn.Linear(16, 3)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.linspace(-1, 1, 5 * 12).reshape(5, 12).to(device)
    y = torch.tensor([0, 1, 2, 1, 0]).to(device)
    loss_fn = nn.CrossEntropyLoss()

    def forward():
        return loss_fn(model(x), y)

    def backward(loss):
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return forward, backward, list(model.parameters())


def whole_step(device):
    """The same network as one step callable (FILE.py:whole_step)."""
    forward, backward, _ = workload(device)

    def step():
        loss = forward()
        backward(loss)
        return loss

    return step
