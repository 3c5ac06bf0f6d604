def _pair(x):
    return (x, x)
