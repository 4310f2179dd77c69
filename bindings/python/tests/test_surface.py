"""The binding's surface against include/pkv/pkv.h (issue 26, item 9): every PKV_API call is wrapped
(WRAPPED names where, and that code calls it) or listed in UNWRAPPED with the reason; every
constant belongs to an enum class or is a plain limit; every struct has its Python type; the
package's version is pkv.h's. A call, constant or struct added to pkv.h fails here until the
binding knows it."""
import dataclasses
import importlib.util
import inspect
import os
import re
import unittest

from _util import BINDING, TREE, pkv

HEADER = os.path.join(TREE, 'include', 'pkv', 'pkv.h')

# C call: where the binding calls it (a dotted path from the pkv package: its public name, or the
# helper module function that the public one uses).
WRAPPED = {
    'pkv_version': 'version', 'pkv_abi_version': 'abi_version',
    'pkv_status_string': 'status_string',
    'pkv_last_error': 'params.check',  # every call without an engine raises with its message
    'pkv_store_params_init': 'StoreParams.__init__',
    'pkv_event_publisher_params_init': 'EventPublisherParams.__init__',
    'pkv_engine_params_init': 'Params.__init__',
    'pkv_engine_params_from_hf_config': 'Params.from_hf_config',
    'pkv_hf_config_layer_windows': 'hf_config_layer_windows',
    'pkv_hf_config_digest': 'hf_config_digest',
    'pkv_kv_groups': 'kv_groups', 'pkv_profile': 'profile',
    'pkv_engine_create': 'Engine.__init__', 'pkv_engine_destroy': 'Engine.close',
    'pkv_engine_last_error': 'Engine.last_error', 'pkv_engine_params_get': 'Engine.__init__',
    'pkv_engine_budget': 'Engine.budget', 'pkv_engine_stats': 'Engine.stats',
    'pkv_engine_store_error': 'Engine.store_error',
    'pkv_seq_params_init': 'engine._seq_params',  # Engine.allocate(salt=...)
    'pkv_allocate': 'Engine.allocate', 'pkv_allocate_query': 'Engine.allocate_query',
    'pkv_append': 'Sequence.append', 'pkv_fork': 'Sequence.fork', 'pkv_release': 'Sequence.release',
    'pkv_truncate': 'Sequence.truncate', 'pkv_preempt': 'Sequence.preempt',
    'pkv_resume': 'Sequence.resume', 'pkv_swap_out': 'Sequence.swap_out',
    'pkv_swap_in': 'Sequence.swap_in', 'pkv_seq_info': 'Sequence.info',
    'pkv_seq_block_table': 'Sequence.block_table',
    'pkv_seq_group_block_table': 'Sequence.group_block_table', 'pkv_seq_tokens': 'Sequence.tokens',
    'pkv_batch_begin': 'Engine.batch', 'pkv_batch_info': 'Batch.view',
    'pkv_batch_copy': 'Batch.copy',
    'pkv_batch_end': 'Batch.end', 'pkv_batch_abort': 'Batch.abort',
    'pkv_request_params_init': 'Engine.submit', 'pkv_submit': 'Engine.submit',
    'pkv_step': 'Engine.step', 'pkv_commit': 'Batch.commit',
    'pkv_drain_finished': 'Engine.drain_finished',
    'pkv_drain_kv_events_sized': 'Engine.drain_kv_events',
    'pkv_event_publisher_info': 'Engine.event_publisher_info',
    'pkv_reset_prefix_cache': 'Engine.reset_prefix_cache', 'pkv_attention': 'Batch.attention',
    'pkv_pool_info': 'Engine.pool_info', 'pkv_set_kv_scales': 'Engine.set_kv_scales',
    'pkv_engine_set_stream': 'Engine.set_stream',
    'pkv_block_hash_root': 'block_hash_root', 'pkv_block_hash': 'block_hash',
    'pkv_store_open': 'StoreAdmin.__init__', 'pkv_store_close': 'StoreAdmin.close',
    'pkv_store_info': 'StoreAdmin.info', 'pkv_store_list': 'StoreAdmin.list',
    'pkv_store_verify': 'StoreAdmin.verify', 'pkv_store_clear': 'StoreAdmin.clear',
    'pkv_engine_check': 'Engine.check',
    # 0.5: the cache per layer, extra keys and adapters
    'pkv_engine_params_from_hf_config_layers': 'Params.from_hf_config_layers',
    'pkv_kv_group_info': 'kv_group_info', 'pkv_layer_info': 'Engine.layer_info',
    'pkv_set_attention_sinks': 'Engine.set_attention_sinks',
    'pkv_block_hash_root_lora': 'block_hash_root_lora', 'pkv_block_hash_extra': 'block_hash_extra',
    # 0.7: sparse attention
    'pkv_indexer_write': 'Batch.indexer_write', 'pkv_indexer_topk': 'Batch.indexer_topk',
    'pkv_sparse_mla_attention': 'Batch.sparse_mla_attention',
    # 0.8: retention
    'pkv_cache_set_priority': 'Engine.cache_set_priority', 'pkv_cache_pin': 'Engine.cache_pin',
    'pkv_cache_unpin': 'Engine.cache_unpin',
    # 0.9: CUDA graphs
    'pkv_batch_plan_graph': 'Batch.plan_graph',
    # 0.10: ranks
    'pkv_batch_rank': 'Batch.rank', 'pkv_rank_pool_info': 'Engine.rank_pool_info',
    'pkv_engine_set_rank_stream': 'Engine.set_rank_stream',
    'pkv_batch_export_plan': 'Batch.export_plan', 'pkv_plan_import': 'Engine.import_plan',
    # 0.11: block descriptors
    'pkv_block_segments': 'Engine.block_segments', 'pkv_seq_segments': 'Engine.seq_segments',
    'pkv_layout_fingerprint': 'Engine.layout_fingerprint',
    # 0.12: KV transfers between engines
    'pkv_hold': 'Engine.hold', 'pkv_hold_end': 'Engine.hold_end',
    'pkv_drain_receiving': 'Engine.drain_receiving', 'pkv_receive_end': 'Engine.receive_end',
    'pkv_seq_state_segment': 'Engine.seq_state_segment',
    # 0.12: the UCX transfer agent
    'pkv_agent_params_init': 'Agent.__init__', 'pkv_agent_create': 'Agent.__init__',
    'pkv_agent_destroy': 'agent._Handle.destroy',  # Agent.close, Engine.close
    'pkv_agent_address': 'Agent.address', 'pkv_agent_connect': 'Agent.connect',
    'pkv_agent_pull': 'Agent.pull', 'pkv_agent_progress': 'Agent.progress',
    'pkv_agent_stats_get': 'Agent.stats',
}

# C call: why the binding does not wrap it (each is still callable raw, as pkv.lib.<name>).
UNWRAPPED = {
    'pkv_drain_kv_events': 'pkv_drain_kv_events_sized does the same at this binding\'s '
                           'sizeof(pkv_kv_event), so a library newer or older than the binding '
                           'fills only the fields both know (Engine.drain_kv_events)',
}

# pkv.h struct: the Python type that holds it (records' dataclasses are checked separately).
STRUCTS = {
    'pkv_store_key': 'bytes (32): StoreEntry.key, DictStore keys',
    'pkv_store_callbacks': 'StoreParams.callback(store): the host\'s store object',
    'pkv_store_params': 'StoreParams', 'pkv_event_publisher_params': 'EventPublisherParams',
    'pkv_engine_params': 'Params', 'pkv_seq_params': 'Engine.allocate(salt=...)',
    'pkv_batch_view': 'BatchView', 'pkv_request_params': 'Engine.submit keywords',
    'pkv_layer_spec': 'LayerSpec (Params.layer_specs)',
    'pkv_extra_key': 'ExtraKey (Engine.allocate(extra_keys=...), block_hash_extra)',
    'pkv_agent_params': 'Agent keywords',
}


def header_calls():
    with open(HEADER) as f:
        text = re.sub(r'/\*.*?\*/', ' ', f.read(), flags=re.S)  # no comments
    return re.findall(r'\bPKV_API\b[^;{(]*?\b(pkv_\w+)\s*\(', text)


def resolve(path):
    obj = pkv
    for part in path.split('.'):
        obj = getattr(obj, part)
    return obj


class Calls(unittest.TestCase):
    def test_every_call_of_the_header_is_known(self):
        calls = header_calls()
        self.assertGreaterEqual(len(calls), 60)  # the parse found the header's calls
        self.assertEqual(set(WRAPPED) & set(UNWRAPPED), set())
        unknown = sorted(set(calls) - set(WRAPPED) - set(UNWRAPPED))
        self.assertEqual(unknown, [], 'pkv.h declares calls this binding neither wraps nor lists '
                         'in UNWRAPPED: wrap each and add it to WRAPPED (tests/test_surface.py)')
        gone = sorted((set(WRAPPED) | set(UNWRAPPED)) - set(calls))
        self.assertEqual(gone, [], 'listed here, no longer in pkv.h')
        self.assertEqual(set(pkv._raw.FUNCTIONS), set(calls), '_raw.py is stale: run gen.py')

    def test_each_wrapper_calls_its_function(self):
        for name, path in WRAPPED.items():
            obj = resolve(path)
            if isinstance(obj, property):
                obj = obj.fget
            source = inspect.getsource(obj)
            self.assertRegex(source, r'\blib\.%s\b' % name, '%s does not call %s' % (path, name))

    def test_unwrapped_calls_are_reachable_raw(self):
        for name, reason in UNWRAPPED.items():
            self.assertGreater(len(reason), 20, name)
            self.assertTrue(callable(getattr(pkv.lib, name)), name)


class Types(unittest.TestCase):
    def test_every_constant_is_an_enum_member_or_plain(self):
        for name, value in pkv.enums.CONSTANTS.items():
            owner = pkv.enums.owner(name)
            self.assertIsNotNone(owner, 'PKV_%s is in no enum class of pkv/enums.py, nor PLAIN'
                                 % name)
            if owner != 'PLAIN':
                member = getattr(pkv, name)
                self.assertIsInstance(member, pkv.enums.ENUMS[owner], name)
                self.assertEqual(int(member), value, name)
            else:
                self.assertIs(type(getattr(pkv, name)), int, name)
        for cls in pkv.enums.ENUMS.values():
            self.assertTrue(len(cls), '%s has no member: its prefix matches nothing' % cls.__name__)

    def test_every_struct_has_its_type(self):
        structs = set(pkv._raw.SIZES)
        records = {cls._struct.__name__: cls for cls in pkv.records.RECORDS}
        self.assertEqual(set(records) & set(STRUCTS), set())
        self.assertEqual(sorted(structs - set(records) - set(STRUCTS)), [],
                         'pkv.h structs with no Python type here')
        for name, cls in records.items():
            want = [f for f, _ in getattr(pkv._raw, name)._fields_
                    if f != 'struct_size' and not f.startswith('reserved')]
            self.assertEqual([f.name for f in dataclasses.fields(cls)], want, name)
            self.assertTrue(cls.__dataclass_params__.frozen, name)

    def test_results_are_typed(self):
        with pkv.Engine(pkv.Params(num_layers=1, num_q_heads=2, num_kv_heads=1, head_dim=8,
                                   num_blocks=8, block_size=4, device=pkv.DEVICE_CPU,
                                   dtype=pkv.DTYPE_F32, enable_kv_events=1)) as engine:
            budget, pool, stats = engine.budget(), engine.pool_info(), engine.stats()
            self.assertIsInstance(budget, pkv.KvBudget)
            self.assertIs(budget.device, pkv.Device.CPU)
            self.assertIs(budget.source, pkv.BudgetSource.FIXED_BLOCKS)
            self.assertIs(budget.kv_layout, pkv.KvLayout.HEADS)
            self.assertIsInstance(pool, pkv.PoolInfo)
            self.assertIs(pool.model_dtype, pkv.Dtype.F32)
            self.assertIsInstance(pool.kernels, str)
            self.assertIsInstance(stats, pkv.Stats)
            self.assertIs(engine.params.device, pkv.Device.CPU)
            with engine.allocate([1, 2, 3, 4]) as seq:
                info = seq.info()
                self.assertIsInstance(info, pkv.SeqInfo)
                self.assertIs(info.in_batch, False)
                self.assertIs(info.kv_tier, pkv.Tier.DEVICE)
                self.assertIs(info.finish_reason, pkv.FinishReason.NONE)
                with engine.batch([seq]) as batch:
                    buf = bytearray(4 * 2 * 8 * 4)
                    kv = buf[:len(buf) // 2]
                    batch.attention(0, buf, kv, kv, bytearray(len(buf)))
            (event,) = engine.drain_kv_events()
            self.assertIsInstance(event, pkv.KvEvent)
            self.assertIs(event.type, pkv.EventType.BLOCK_STORED)
            self.assertIs(event.medium, pkv.Tier.DEVICE)
            with self.assertRaises(dataclasses.FrozenInstanceError):
                event.num_tokens = 0
        self.assertIsInstance(pkv.kv_groups(pkv.Params(num_layers=2, num_q_heads=2, num_kv_heads=1,
                                                         head_dim=8)), pkv.KvGroups)
        self.assertIs(pkv.StoreParams.file('/tmp').kind, pkv.StoreKind.FILE)
        self.assertIs(pkv.LayerSpec.shared(0).kind, pkv.LayerKind.SHARED)  # 'kind': per struct
        self.assertIs(pkv.records.field_enum('pkv_layer_info', 'kind'), pkv.LayerKind)
        self.assertIs(pkv.records.field_enum('pkv_store_info', 'kind'), pkv.StoreKind)
        self.assertIs(pkv.records.field_enum('pkv_kv_group_info', 'attention'), pkv.AttentionKind)
        self.assertIs(pkv.EventPublisherParams().format, pkv.EventFormat.MAP)


class Version(unittest.TestCase):
    def test_version_is_the_headers(self):
        with open(HEADER) as f:
            text = f.read()
        parts = [re.search(r'#define PKV_VERSION_%s (\d+)' % p, text).group(1)
                 for p in ('MAJOR', 'MINOR', 'PATCH')]
        self.assertEqual(pkv.__version__, '.'.join(parts))
        spec = importlib.util.spec_from_file_location(
            'pkv_build', os.path.join(BINDING, 'build_backend', 'pkv_build.py'))
        backend = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(backend)
        self.assertEqual(backend.version(), pkv.__version__)  # the wheel's version


if __name__ == '__main__':
    unittest.main()
