def forward_cpu(x):
    return double(x) + 1


def forward_gpu(x):
    return double(x) + 2


def double(x):
    return 2 * x
