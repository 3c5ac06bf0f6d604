"""torchvision's ResNet-18 (its model zoo, built from code: random weights, 10 classes),
one training step: cross-entropy, SGD with momentum. A workload for dltrace
(docs/workloads.md): ``dltrace probe torch --workload examples/torch/resnet18.py``.

Synthetic data, made here: nothing is downloaded. torchvision is the environment's
``torchvision`` extra (frameworks.yaml), pinned to the torch release it was built for."""

import torch
import torch.nn.functional as F
import torchvision


def workload(device: torch.device):
    model = torchvision.models.resnet18(weights=None, num_classes=10).to(device).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images = torch.randn(2, 3, 64, 64).to(device)  # made on the host, then moved: as a data loader does
    labels = torch.tensor([3, 7]).to(device)

    def forward():
        return F.cross_entropy(model(images), labels)

    def backward(loss):
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return forward, backward, list(model.parameters())
