"""Shared by the tests: import pkv from this source tree, find the data and the C demo."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BINDING = os.path.dirname(HERE)
TREE = os.path.dirname(os.path.dirname(BINDING))
sys.path.insert(0, BINDING)

import pkv  # noqa: E402,F401

HASH_VECTORS = os.environ.get('PKV_HASH_VECTORS',
                              os.path.join(TREE, 'tests', 'data', 'hash_vectors.txt'))


def c_demo():
    """The C reference demo: $PKV_DEMO (set by meson), else build/examples/demo."""
    path = os.environ.get('PKV_DEMO') or os.path.join(TREE, 'build', 'examples', 'demo')
    if not os.path.exists(path):
        raise RuntimeError('set PKV_DEMO to the C demo (build/examples/demo)')
    return path


def small_params(**fields):
    """A small CPU f32 engine, as the demo's."""
    p = pkv.Params(num_layers=2, num_q_heads=4, num_kv_heads=2, head_dim=16,
                   dtype=pkv.DTYPE_F32, block_size=4, num_blocks=16, device=pkv.DEVICE_CPU,
                   num_threads=1)
    for name, value in fields.items():
        setattr(p, name, value)
    return p
