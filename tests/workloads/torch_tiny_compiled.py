"""A tiny torch workload for the compiled door's tests (tests/test_compiled_door.py): one
linear layer, a mean-squared loss and plain SGD, so that recording it under
torch.compile and checking its compile-backend skeleton take seconds."""

import torch


def workload(device):
    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 2).to(device)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    x = torch.linspace(-1, 1, 3 * 4).reshape(3, 4).to(device)
    y = torch.ones(3, 2).to(device)

    def forward():
        return ((layer(x) - y) ** 2).mean()

    def backward(loss):
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return forward, backward, list(layer.parameters())


def never_compiled(device):
    """The same step with its forward kept from torch.compile (graph breaks everywhere:
    Dynamo skips the function): the compiled door has no graph to give for it."""
    forward, backward, params = workload(device)
    return torch._dynamo.disable(forward), torch._dynamo.disable(backward), params
