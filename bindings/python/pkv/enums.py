"""pkv.h's enums as IntEnum / IntFlag classes, their members taken from the generated constants.

    pkv.Dtype.BF16 == pkv.DTYPE_BF16          # an IntEnum is its int: both spellings work
    engine.budget().device                    # <Device.CPU: 1>
    [e.type for e in engine.drain_kv_events()]   # [<EventType.BLOCK_STORED: 1>, ...]

Each class claims the constants of pkv.h that start with one of its prefixes (the longest prefix
wins: PKV_STORE_WRITE_BACK is a StoreWriteMode, PKV_STORE_FILE a StoreKind); a member is named
by the constant without PKV_ and the class's `strip`. The limits and versions stay plain ints
(PLAIN). tests/test_surface.py checks that every constant of pkv.h is claimed exactly once.
"""
import enum

from . import _raw

# (class, base, strip, prefixes, doc)
_TABLE = (
    ('Device', enum.IntEnum, 'DEVICE_', ('DEVICE_',),
     "Where an engine's pool lives (PKV_DEVICE_*; AUTO resolves to CPU or CUDA)."),
    ('Dtype', enum.IntEnum, 'DTYPE_', ('DTYPE_',),
     'An element type: the model\'s (params.dtype: F32, F16, BF16) or the KV cache\'s '
     '(kv_dtype: those or FP8_E4M3, FP8_E5M2) (PKV_DTYPE_*).'),
    ('KvLayout', enum.IntEnum, 'KV_LAYOUT_', ('KV_LAYOUT_',),
     'What the cache holds per token per layer (pkv_engine_params.kv_layout, PKV_KV_LAYOUT_*): '
     'HEADS, K and V of each kv head; MLA, one latent of kv_lora_rank + qk_rope_head_dim values '
     '(multi-head latent attention: DeepSeek V2/V3, Kimi K2), whose first kv_lora_rank are V.'),
    ('LayerKind', enum.IntEnum, 'LAYER_', ('LAYER_',),
     'What a layer keeps in the cache (LayerSpec.kind, LayerInfo.kind, PKV_LAYER_*): ATTENTION, K '
     'and V of its own kv heads; MLA, one latent; SHARED, nothing: it reads an earlier layer\'s; '
     'STATE (since 0.6.0), a recurrent layer\'s fixed-size state per sequence, in a state slot.'),
    ('AttentionKind', enum.IntEnum, 'ATTENTION_',
     ('ATTENTION_FULL', 'ATTENTION_SLIDING', 'ATTENTION_CHUNKED'),
     'Which keys a token at position p attends to (LayerSpec.attention, PKV_ATTENTION_*): FULL, '
     '0..p; SLIDING, the last `window`; CHUNKED, those of its own `window`-token chunk.'),
    ('StateCheckpointPolicy', enum.IntEnum, 'STATE_CHECKPOINT_', ('STATE_CHECKPOINT_',),
     'Where a sequence leaves checkpoints of its recurrent state (since 0.6.0; '
     'params.state_checkpoint_policy, PKV_STATE_CHECKPOINT_*): PROMPT_END, its prompt\'s last '
     'block boundary; EVERY, each state_checkpoint_interval blocks too; NONE, none.'),
    ('BudgetSource', enum.IntEnum, 'BUDGET_', ('BUDGET_',),
     "Which rule decided a budget's num_blocks (pkv_kv_budget.source, PKV_BUDGET_*)."),
    ('DebugFlags', enum.IntFlag, 'DEBUG_', ('DEBUG_',),
     'Bits of pkv_engine_params.debug_flags, for tests of pkv itself (PKV_DEBUG_*).'),
    ('FinishReason', enum.IntEnum, 'FINISH_', ('FINISH_',),
     "Why a request finished (pkv_seq_info.finish_reason, PKV_FINISH_*)."),
    ('CopyKind', enum.IntEnum, 'COPY_', ('COPY_',),
     'What a copy of a batch moves (batch.copy_kind, PKV_COPY_*): a block, or (STATE, since '
     '0.6.0) a state slot into another; STATE_OUT (since 0.6.0), a state slot to a host state '
     'slot (swap-out, a checkpoint offloaded); STATE_IN, a host state slot to a working slot '
     '(swap-in, an offloaded checkpoint restored).'),
    ('BlockLayout', enum.IntEnum, 'BLOCK_LAYOUT_', ('BLOCK_LAYOUT_',),
     'How a block is laid out in the pool (since 0.11.0; params.block_layout, '
     'PKV_BLOCK_LAYOUT_*): LAYERS (the default), a layer\'s blocks together, a block 2 x layers '
     'segments; PAGE, a block one page of all its KV group\'s layers, one segment '
     '(engine.block_segments).'),
    ('TransferState', enum.IntEnum, 'TRANSFER_',
     ('TRANSFER_NONE', 'TRANSFER_HOLDING', 'TRANSFER_RECEIVING'),
     'Where a sequence is in a KV transfer between engines (since 0.12.0; seq.info().transfer, '
     'PKV_TRANSFER_NONE/HOLDING/RECEIVING): NONE, in none; HOLDING, a producer\'s sequence '
     'holding its blocks for a transfer out (engine.hold, submit(hold_on_finish=True)) until '
     'engine.hold_end; RECEIVING, a consumer\'s request (submit(num_remote_tokens=N)) waiting for '
     'its first N tokens\' KV (engine.drain_receiving) until engine.receive_end.'),
    ('TransferOutcome', enum.IntEnum, 'TRANSFER_', ('TRANSFER_DONE', 'TRANSFER_FAILED'),
     'How a KV transfer ended (since 0.12.0; engine.hold_end, engine.receive_end, '
     'PKV_TRANSFER_DONE/FAILED/FAILED_FINISH): DONE, every byte arrived; FAILED, it did not (a '
     'receiving request computes its prompt itself); FAILED_FINISH (receive_end only), it did '
     'not and the request finishes (FinishReason.TRANSFER_FAILED).'),
    ('Ranks', enum.IntEnum, 'RANKS_', ('RANKS_',),
     'Which ranks an engine decides for and holds pools of (since 0.10.0; params.ranks, '
     'PKV_RANKS_*): ONE, itself (alone, or as the decider whose plans batch.export_plan gives '
     'the other ranks); ALL, every tensor-parallel rank and pipeline stage, a pool per rank in '
     'this process (batch.rank(r) is rank r\'s handle); POOL, one rank\'s pool, running the plans '
     'a decider exported (engine.import_plan).'),
    ('PreemptionMode', enum.IntEnum, 'PREEMPT_', ('PREEMPT_',),
     'What the scheduler does to a request it preempts (params.preemption_mode, PKV_PREEMPT_*).'),
    ('Tier', enum.IntEnum, 'TIER_', ('TIER_',),
     "Where a sequence's KV is (seq_info.kv_tier) or a block was (KvEvent.medium) (PKV_TIER_*)."),
    ('StoreKind', enum.IntEnum, 'STORE_', ('STORE_',),
     "A store tier's kind (StoreParams.kind, StoreInfo.kind, PKV_STORE_NONE/FILE/REDIS/CALLBACK)."),
    ('StoreWriteMode', enum.IntEnum, 'STORE_', ('STORE_WRITE_', 'STORE_READ_ONLY'),
     'When an engine writes blocks to its store (StoreParams.write_mode, PKV_STORE_WRITE_*, '
     'PKV_STORE_READ_ONLY).'),
    ('StoreListFlags', enum.IntFlag, 'STORE_LIST_', ('STORE_LIST_',),
     'pkv_store_list flags (PKV_STORE_LIST_*).'),
    ('StoreValueState', enum.IntEnum, 'STORE_VALUE_', ('STORE_VALUE_',),
     'What reading a store value found (StoreEntry.state, PKV_STORE_VALUE_*).'),
    ('EventType', enum.IntEnum, 'EVENT_', ('EVENT_',),
     "What a KV event says (KvEvent.type, PKV_EVENT_*)."),
    ('EventFormat', enum.IntEnum, 'EVENT_FORMAT_', ('EVENT_FORMAT_',),
     'How the event publisher encodes KV events on the wire (EventPublisherParams.format, '
     'PKV_EVENT_FORMAT_*).'),
    ('IndexerFlags', enum.IntFlag, 'INDEXER_', ('INDEXER_SCALE_',),
     'Bits of batch.indexer_write\'s flags (since 0.7.0, PKV_INDEXER_*): SCALE_UE8M0, each fp8 '
     'key\'s scale rounded up to a power of two (DeepSeek\'s "ue8m0" scale format).'),
    ('TopkKind', enum.IntEnum, 'TOPK_', ('TOPK_',),
     'What batch.indexer_topk\'s indices are (since 0.7.0, PKV_TOPK_*): POSITIONS in the '
     'token\'s sequence (batch.sparse_mla_attention takes them), or SLOTS of the layer\'s group '
     '(block id * block_size + offset, for a host\'s own kernels over layer_info\'s layout).'),
)

# Constants that are no enum: versions, statuses (pkv.errors), limits and defaults.
PLAIN = ('VERSION_', 'ABI_VERSION', 'OK', 'ERR_', 'MAX_', 'ATTENTION_', 'CUDA_MAX_GRID', 'DEFAULT_',
         'STORE_PROBLEM_BYTES', 'HF_CONFIG_DIGEST_BYTES', 'INDEXER_MAX_HEAD_DIM',
         'CACHE_PRIORITY_', 'TRANSFER_TIMEOUT_DEFAULT_MS')

CONSTANTS = {name[len('PKV_'):]: value for name, value in vars(_raw).items()
             if name.startswith('PKV_') and isinstance(value, int)}


def owner(name):
    """The class name (or 'PLAIN') that claims constant `name` (without PKV_): longest prefix."""
    best, best_len = None, -1
    for cls, _, _, prefixes, _ in _TABLE:
        for p in prefixes:
            if name.startswith(p) and len(p) > best_len:
                best, best_len = cls, len(p)
    for p in PLAIN:
        if (name == p or (p.endswith('_') and name.startswith(p))) and len(p) > best_len:
            best, best_len = 'PLAIN', len(p)
    return best


def _make(cls, base, strip, doc):
    members = [(name[len(strip):], value) for name, value in CONSTANTS.items()
               if owner(name) == cls]
    made = base(cls, members, module=__name__)
    made.__doc__ = doc
    return made


ENUMS = {cls: _make(cls, base, strip, doc) for cls, base, strip, _, doc in _TABLE}
globals().update(ENUMS)
__all__ = sorted(ENUMS)


def typed(cls, value):
    """value as enum cls; a value this binding does not know (a newer library) stays an int."""
    try:
        return cls(value)
    except ValueError:
        return value
