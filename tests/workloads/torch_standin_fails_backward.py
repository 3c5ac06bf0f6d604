"""A torch step whose backward pass fails on any device but the CPU, as an op with no
kernel on a new backend would: the stand-in's list would lack the pass, so the probe
must fail naming it. Used by tests/test_standin.py."""
import torch

def workload(device):
    w = torch.ones(4, 3, device=device, requires_grad=True)
    x = torch.ones(2, 4, device=device)
    def forward():
        return (x @ w).sum()
    def backward(loss):
        loss.backward()
        if w.device.type != "cpu":
            raise RuntimeError("this op has no kernel on the new device")
    return forward, backward
