"""Not a valid audit target: the signature is (q, k, v, mask) - ``attnum audit`` exits 2."""


def attention(q, k, v, mask):
    return q
