#!/usr/bin/env python3
"""The scheduler's loop for a bf16 model whose sealed prefix blocks go to a FILE store, then that
store administered with no engine: what a serving host does with pkv, in Python.

Usage: serve.py [store_dir]   (default: a temporary directory, removed at the end)
"""
import array
import os
import struct
import sys
import tempfile

# In a pkv checkout, the package next to this example; elsewhere (a copy of it), the installed one.
_BINDING = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
if os.path.isfile(os.path.join(_BINDING, 'pkv', '__init__.py')):
    sys.path.insert(0, _BINDING)
import pkv  # noqa: E402

LAYERS, Q_HEADS, KV_HEADS, HEAD_DIM = 2, 4, 2, 16
SYSTEM = list(range(100, 112))  # a shared system prompt: 3 blocks of 4 tokens


def bf16(values):
    """Python floats as bf16 bits (uint16): pkv takes a bf16 model's arrays as array('H')."""
    return array.array('H', [struct.unpack('<I', struct.pack('<f', x))[0] >> 16 for x in values])


def run_step(batch, step):
    """The model's forward pass for one step, stood in for by fixed activations; returns the
    token sampled for each sequence of the batch."""
    n = batch.num_tokens
    out = array.array('H', bytes(2 * n * Q_HEADS * HEAD_DIM))
    for layer in range(LAYERS):
        q = bf16([0.01 * ((i + layer) % 7) for i in range(n * Q_HEADS * HEAD_DIM)])
        kv = bf16([0.02 * ((i + step) % 5) for i in range(n * KV_HEADS * HEAD_DIM)])
        batch.attention(layer, q, kv, kv, out)  # float32 arrays here: InvalidArgumentError
    return [(seq_id + step) % 50 for seq_id in batch.seq_ids]


def serve(store):
    params = pkv.Params(num_layers=LAYERS, num_q_heads=Q_HEADS, num_kv_heads=KV_HEADS,
                        head_dim=HEAD_DIM, dtype=pkv.Dtype.BF16, block_size=4, num_blocks=64,
                        host_num_blocks=16, device=pkv.Device.CPU, num_threads=1)
    with pkv.Engine(params, store=store) as engine:
        requests = [engine.submit(SYSTEM + [1, 2, 3], max_new_tokens=3),
                    engine.submit(SYSTEM + [4, 5], max_new_tokens=2)]
        step = 0
        while True:
            batch = engine.step()
            if batch is None:
                break
            step += 1
            with batch:  # not committed in the block (an exception): aborted, never left open
                sampled = run_step(batch, step)
                print('step %d: %d seqs, %d tokens' % (step, batch.num_seqs, batch.num_tokens))
                batch.commit(sampled)
        for seq in engine.drain_finished():
            info = seq.info()  # a SeqInfo: finish_reason is a FinishReason
            print('request %d: %s after %d tokens' % (requests.index(seq),
                                                      info.finish_reason.name,
                                                      info.num_generated_tokens))
            seq.release()
    # closed: the queued writes are in the store


def administer(store):
    with pkv.StoreAdmin(store) as admin:
        info = admin.info()
        print('store: %d blocks' % info.num_blocks)
        tokens = sorted(entry.num_tokens for entry in admin.list())
        print('listed: %d blocks of %s tokens' % (len(tokens), '/'.join(map(str, sorted(set(tokens))))))
        result = admin.verify()
        print('verify: %d good, %d bad' % (result.num_good, result.num_bad))
        print('cleared: %d' % admin.clear())


def main():
    with tempfile.TemporaryDirectory() as tmp:
        # model_id names the model, so engines of another model (or fine-tune) never share its
        # blocks: a weights digest or 'org/model@revision' (pkv.hf_config_digest(config) tells
        # configs apart)
        store = pkv.StoreParams.file(sys.argv[1] if len(sys.argv) > 1 else tmp,
                                     model_id='pkv-examples/serve@1')
        serve(store)
        administer(store)


if __name__ == '__main__':
    main()
