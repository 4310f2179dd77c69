"""gen.py's Go emitter: bindings/go/consts_gen.go, types_gen.go, layout_gen.go (cgo) and
load_gen.c (cgo)."""
import re
import sys
import textwrap

from gen_header import BANNER, pascal

# Names follow Go style: initialisms upper-case (NumKVHeads, DeviceID, SendHWM, TPSize), the
# dtype word as DType. The C structs are mirrored by unexported raw structs (cEngineParams, ...)
# whose layout is checked against C at init; the API's structs (EngineParams, Stats, ...) are Go
# types (typed enums, bool on/off fields, no struct_size or reserved fields) converted to and
# from the raw ones by generated toC / fromC methods.
INITIALISMS = {'ABI', 'CPU', 'CUDA', 'F32', 'F16', 'BF16', 'FP8', 'E4M3', 'E5M2', 'OK', 'HF', 'ID',
               'KV', 'COW', 'TP', 'PP', 'HWM', 'TTL', 'IO', 'LRU', 'URL', 'MLA', 'QK', 'UE8M0'}
GO_WORDS = {'dtype': 'DType', 'ids': 'IDs'}
GO_SCALARS = {'char': 'byte', 'uint8_t': 'uint8', 'int32_t': 'int32', 'uint32_t': 'uint32', 'int64_t': 'int64', 'uint64_t': 'uint64',
              'double': 'float64', 'float': 'float32'}
GO_KEYWORDS = {'type', 'func', 'range', 'map', 'chan', 'go', 'select', 'var', 'default'}

# Anonymous enums that become a named Go type, by their first constant: (type, underlying type,
# the C prefix replaced, the Go prefix of the constants, doc).
GO_ENUMS = {
    'PKV_DEVICE_AUTO': ('Device', 'int32', 'PKV_DEVICE_', 'Device',
                        'where an engine\'s pool lives (pkv_engine_params.device)'),
    'PKV_DTYPE_F32': ('DType', 'int32', 'PKV_DTYPE_', 'DType',
                      'an element type: the model\'s (dtype) or the KV cache\'s (kv_dtype)'),
    'PKV_BUDGET_FROM_UTILIZATION': ('BudgetSource', 'uint32', 'PKV_BUDGET_', 'Budget',
                                    'how KVBudget.NumBlocks was decided'),
    'PKV_FINISH_NONE': ('FinishReason', 'uint32', 'PKV_FINISH_', 'Finish', 'why a request finished'),
    'PKV_COPY_COW': ('CopyKind', 'int32', 'PKV_COPY_', 'Copy', 'what a block copy of a batch moves'),
    'PKV_PREEMPT_RECOMPUTE': ('PreemptionMode', 'uint32', 'PKV_PREEMPT_', 'Preempt',
                              'what the scheduler does to the request it preempts'),
    'PKV_TIER_NONE': ('Tier', 'uint32', 'PKV_TIER_', 'Tier',
                      'where a sequence\'s KV is (SeqInfo.KVTier) or a block is (KVEvent.Medium)'),
    'PKV_STORE_NONE': ('StoreKind', 'uint32', 'PKV_STORE_', 'Store', 'the store tier\'s backend'),
    'PKV_STORE_WRITE_THROUGH': ('StoreWriteMode', 'uint32', 'PKV_STORE_', 'Store',
                                'when blocks are written to the store'),
    'PKV_STORE_VALUE_UNREAD': ('StoreValueState', 'uint32', 'PKV_STORE_VALUE_', 'StoreValue',
                               'what reading a listed value found (StoreEntry.State)'),
    'PKV_EVENT_BLOCK_STORED': ('EventType', 'uint32', 'PKV_EVENT_', 'Event', 'a KV event\'s type'),
    'PKV_EVENT_FORMAT_MAP': ('EventFormat', 'uint32', 'PKV_EVENT_FORMAT_', 'EventFormat',
                             'how KV events are encoded on the wire (EventPublisherParams.Format)'),
    'PKV_DEBUG_CONSTANT_HASH': ('DebugFlags', 'uint32', 'PKV_DEBUG_', 'Debug',
                                'bits of EngineParams.DebugFlags, for tests of pkv itself'),
    'PKV_KV_LAYOUT_HEADS': ('KVLayout', 'uint32', 'PKV_KV_LAYOUT_', 'KVLayout',
                            'what the cache holds per token per layer (kv heads\' K and V, or an MLA latent)'),
    'PKV_LAYER_ATTENTION': ('LayerKind', 'uint32', 'PKV_LAYER_', 'Layer',
                            'what a layer keeps in the cache (LayerSpec.Kind)'),
    'PKV_ATTENTION_FULL': ('AttentionKind', 'uint32', 'PKV_ATTENTION_', 'Attention',
                           'which keys a token attends to (LayerSpec.Attention)'),
    'PKV_STATE_CHECKPOINT_PROMPT_END': ('StateCheckpointPolicy', 'uint32', 'PKV_STATE_CHECKPOINT_', 'StateCheckpoint',
                                        'where a sequence leaves checkpoints of its recurrent state '
                                        '(EngineParams.StateCheckpointPolicy)'),
    'PKV_INDEXER_SCALE_UE8M0': ('IndexerFlags', 'uint32', 'PKV_INDEXER_', 'Indexer',
                                'bits of Batch.IndexerWrite\'s flags (pkv_indexer_write)'),
    'PKV_TOPK_POSITIONS': ('TopKKind', 'uint32', 'PKV_TOPK_', 'TopK',
                           'what Batch.IndexerTopK\'s indices are (pkv_indexer_topk\'s out_kind)'),
    'PKV_RANKS_ONE': ('Ranks', 'uint32', 'PKV_RANKS_', 'Ranks',
                      'which ranks an engine decides for and holds pools of (EngineParams.Ranks)'),
    'PKV_BLOCK_LAYOUT_LAYERS': ('BlockLayout', 'uint32', 'PKV_BLOCK_LAYOUT_', 'BlockLayout',
                                'how a block is laid out in the pool (EngineParams.BlockLayout): a '
                                'layer\'s blocks together, or a page of all its group\'s layers'),
    'PKV_TRANSFER_NONE': ('TransferState', 'uint32', 'PKV_TRANSFER_', 'Transfer',
                          'where a sequence is in a KV transfer between engines (SeqInfo.Transfer)'),
    'PKV_TRANSFER_DONE': ('TransferOutcome', 'uint32', 'PKV_TRANSFER_', 'Transfer',
                          'how a transfer ended (Engine.HoldEnd, Engine.ReceiveEnd)'),
}
# Struct fields of a named type: the field's C name (any struct) or struct.field -> the Go type.
GO_TYPED_FIELDS = {'dtype': 'DType', 'kv_dtype': 'DType', 'model_dtype': 'DType', 'device': 'Device',
                   'kv_tier': 'Tier', 'medium': 'Tier', 'finish_reason': 'FinishReason',
                   'preemption_mode': 'PreemptionMode', 'source': 'BudgetSource', 'type': 'EventType',
                   'kv_layout': 'KVLayout', 'debug_flags': 'DebugFlags', 'kind': 'StoreKind',
                   'state': 'StoreValueState', 'pkv_layer_spec.kind': 'LayerKind',
                   'pkv_layer_info.kind': 'LayerKind', 'attention': 'AttentionKind',
                   'state_checkpoint_policy': 'StateCheckpointPolicy', 'index_dtype': 'DType',
                   'pkv_engine_params.ranks': 'Ranks',
                   'pkv_engine_params.block_layout': 'BlockLayout',
                   'pkv_seq_info.transfer': 'TransferState'}
# On/off fields (0 or 1 in C): bool in Go.
GO_BOOL_FIELDS = {'enable_prefix_caching', 'enable_kv_events', 'host_offload', 'is_preempted',
                  'in_batch', 'is_request', 'k_eq_v', 'sinks', 'hold_on_finish'}
# The structs of the Go API: C name -> (direction: 'in' has toC, 'out' fromC, 'inout' both;
# fields the generator leaves to the binding's code: C field -> (Go field, Go type) or None to
# leave out; unexported fields to add; doc).
GO_API_STRUCTS = {
    'pkv_engine_params': ('inout', {
        'store': None,
        'layer_windows': ('LayerWindows', '[]uint32'),
        'layer_specs': ('LayerSpecs', '[]LayerSpec'), 'layer_spec_size': None,
        'event_publisher': ('EventPublisher', '*EventPublisherParams'),
        'rank_device_ids': ('RankDeviceIDs', '[]int32')}, ['initialized bool'],
        'EngineParams are an engine\'s parameters (pkv_engine_params; pkv.h documents each field).\n'
        'Start from DefaultParams (or ParamsFromHFConfig): a struct literal lacks pkv\'s defaults and\n'
        'is refused. LayerWindows: each layer\'s sliding window (0 = full attention), NumLayers of\n'
        'them, nil for SlidingWindow in every layer. LayerSpecs: the cache per layer, NumLayers of\n'
        'them (nil: every layer as the flat fields say). EventPublisher: publish the engine\'s KV events\n'
        'over ZeroMQ (nil: none). RankDeviceIDs: with Ranks RanksAll on CUDA, each rank\'s device,\n'
        'TPSize * PPSize of them (nil: every rank on DeviceID). The store tier is\n'
        'NewEngineWithStore\'s.'),
    'pkv_request_params': ('inout', {'cache_salt': None, 'cache_salt_len': None,
                                     'extra_keys': ('ExtraKeys', '[]ExtraKey'), 'num_extra_keys': None,
                                     'extra_key_size': None}, ['initialized bool'],
                           'RequestParams are a request\'s parameters (pkv_request_params): start\n'
                           'from DefaultRequestParams; the cache salt is an argument of Submit.\n'
                           'ExtraKeys: the prompt\'s extra keys (nil: none), LoraID its adapter.'),
    'pkv_layer_spec': ('inout', {}, [], 'LayerSpec is one layer of the cache (pkv_layer_spec): zero fields\n'
                       'take the engine\'s flat ones, so LayerSpec{} is the layer EngineParams describe.'),
    'pkv_kv_group_info': ('out', {}, [], 'KVGroupInfo is one KV group and its bytes (pkv_kv_group_info).'),
    'pkv_layer_info': ('out', {}, [], 'LayerInfo is one layer of an engine\'s pool (pkv_layer_info): its spec\n'
                       'resolved, and where its K and V are (addresses in the pool, strides in elements).'),
    'pkv_kv_budget': ('out', {}, [], 'KVBudget is how many KV blocks fit and why (pkv_kv_budget).'),
    'pkv_stats': ('out', {}, [], 'Stats are an engine\'s counters (pkv_stats).'),
    'pkv_seq_info': ('out', {}, [], 'SeqInfo is a sequence\'s state (pkv_seq_info).'),
    'pkv_pool_info': ('out', {}, [], 'PoolInfo says where the pool is (pkv_pool_info), for a host\'s\n'
                      'own kernels: addresses and strides in bytes.'),
    'pkv_batch_view': ('out', {}, [], 'BatchView is a batch\'s raw plan (pkv_batch_view): counts, and C\n'
                       'addresses valid while the batch is open.'),
    'pkv_kv_event': ('out', {}, [], 'KVEvent is one KV event (pkv_kv_event).'),
    'pkv_event_publisher_info': ('out', {}, [], 'EventPublisherInfo is what an engine\'s event\n'
                                 'publisher did (pkv_event_publisher_info): its endpoints as bound,\n'
                                 'and its counters.'),
    'pkv_store_info': ('out', {}, [], 'StoreInfo is what a store holds (pkv_store_info): Kind StoreFile or\n'
                       'StoreRedis, NumBlocks values under block names, TotalBytes their sizes.'),
    'pkv_store_entry': ('out', {}, [], 'StoreEntry is one block of a listing (pkv_store_entry): its key and\n'
                        'size; NumTokens, PayloadBytes, Parent and Fingerprint are read from the\n'
                        'value\'s header when State is StoreValueGood only; Problem says why a\n'
                        'StoreValueBad value is bad.'),
    'pkv_store_verify_result': ('out', {}, [], 'StoreVerifyResult counts what StoreAdmin.Verify read\n'
                                '(pkv_store_verify_result); FirstBadKey and FirstBadProblem name the\n'
                                'first bad value met.'),
}
# Raw structs that are API as they are (no Go twin): their Go name is public.
GO_RAW_PUBLIC = {'pkv_store_key'}


def go_ident(c_name):  # a field or a constant's rest
    return pascal(c_name, INITIALISMS, GO_WORDS)


def go_name(c_name):
    return go_ident(c_name[len('PKV_'):])


def go_block(rows, sep):
    """gofmt's alignment: the first column padded to the longest, then sep and the rest."""
    width = max(len(a) + len(sep.rstrip()) for a, _ in rows)
    return ['\t' + (a + sep.rstrip()).ljust(width) + ' ' + b for a, b in rows]


def go_struct_name(c_name):  # pkv_engine_params -> EngineParams
    return go_ident(c_name[len('pkv_'):])


def go_raw_name(c_name):  # the raw mirror: cEngineParams (StoreKey stays public)
    return go_struct_name(c_name) if c_name in GO_RAW_PUBLIC else 'c' + go_struct_name(c_name)


def go_status(n):
    return 'Status' + go_ident(n.replace('ERR_', '', 1))


def go_enum(enum):
    return GO_ENUMS.get(enum[0][0])


def go_comment(text, indent=''):
    """text as // lines of at most 100 columns (its own line breaks are not kept)."""
    return textwrap.wrap(' '.join(text.split()), 100 - len(indent) - 3, initial_indent=indent + '// ',
                         subsequent_indent=indent + '// ', break_long_words=False,
                         break_on_hyphens=False)


def gen_go(h):
    errs = [(n, go_ident(n[len('ERR_'):])) for n, _, _ in h.statuses if n.startswith('ERR_')]
    o = ['// ' + BANNER, '', 'package pkv', '',
         '// Versions and ABI major of the header the binding was generated from.', 'const (']
    o += go_block([(go_name(n), '= %d' % v) for n, v in h.macros], ' ') + [')', '']
    version = dict(h.macros)
    o += ['// BindingVersion is this package\'s version, MAJOR.MINOR.PATCH: that of the pkv.h it was',
          '// generated from (the version a go.mod requires it at).',
          'const BindingVersion = "%d.%d.%d"' % tuple(version['PKV_VERSION_' + part]
                                                   for part in ('MAJOR', 'MINOR', 'PATCH')), '']
    o += ['// Statuses (pkv_status), from PKV_STATUS_MAP.', 'const (']
    o += go_block([(go_status(n), 'Status = %d' % v) for n, v, _ in h.statuses], ' ') + [')', '']
    for enum in h.enums:
        typed = go_enum(enum)
        if not typed:
            o += ['const ('] + go_block([(go_name(n), '= %d' % v) for n, v in enum], ' ') + [')', '']
            continue
        t, under, cprefix, gprefix, doc = typed
        names = [(gprefix + go_ident(n[len(cprefix):]), n, v) for n, v in enum]
        if not all(n.startswith(cprefix) for _, n, _ in names):
            sys.exit('gen.py: %s: not every constant starts with %s' % (t, cprefix))
        if not any(l.startswith('type %s ' % t) for l in o):
            o += ['// %s is %s: pkv.h\'s PKV_%s*.' % (t, doc, cprefix[len('PKV_'):]), 'type %s %s' % (t, under), '']
        o += ['const ('] + go_block([(g, '%s = %d' % (t, v)) for g, _, v in names], ' ') + [')', '']
    for t in sorted({e[0] for e in GO_ENUMS.values()}):
        rows = [(GO_ENUMS[enum[0][0]][3] + go_ident(n[len(GO_ENUMS[enum[0][0]][2]):]),
                 '"%s",' % n[len('PKV_'):]) for enum in h.enums if go_enum(enum)
                and go_enum(enum)[0] == t for n, _ in enum]
        if not rows:
            sys.exit('gen.py: no enum of pkv.h is %s' % t)
        o += ['// String is the C name without PKV_, e.g. "%s".' % rows[0][1][1:-2],
              'func (v %s) String() string {' % t, '\tswitch v {']
        for g, s in rows:
            o += ['\tcase %s:' % g, '\t\treturn %s' % s[:-1]]
        o += ['\t}', '\treturn unknown("%s", int64(v))' % t, '}', '']
    o += ['// statusNames are the C names without PKV_.', 'var statusNames = map[Status]string{']
    o += go_block([(go_status(n), '"%s",' % n) for n, _, _ in h.statuses], ': ') + ['}', '']
    o += ['// Sentinel errors: errors.Is(err, ErrNoSpace) matches any *Error of that status.', 'var (']
    o += go_block([('Err' + g, '= &Error{Status: %s}' % go_status(n)) for n, g in errs], ' ')
    o += [')', '', '// sentinels by status', 'var sentinels = map[Status]*Error{']
    o += go_block([(go_status(n), 'Err%s,' % g) for n, g in errs], ': ') + ['}', '']
    for name, fields, size in h.structs:  # pointers as uintptr: no Go pointers cross into C
        if name in GO_RAW_PUBLIC:
            o += ['// %s is C\'s %s (%d bytes on amd64; layout checked against C at init).'
                  % (go_raw_name(name), name, size)]
        else:
            o += ['// %s mirrors C\'s %s (%d bytes on amd64; layout checked against C at init).'
                  % (go_raw_name(name), name, size)]
        o += ['type %s struct {' % go_raw_name(name)]
        o += go_block([(go_ident(f), go_field_type(t)) for f, t in fields], ' ')
        o += ['}', '']
    return '\n'.join(o)


def go_field_type(t):  # a function pointer is a uintptr too: a C function's address
    if t.depth or t.proto:
        return 'uintptr'
    base = GO_SCALARS[t.base] if t.base in GO_SCALARS else go_raw_name(t.base)  # a struct: its raw twin
    return ('[%d]' % t.length if t.length else '') + base


def go_api_fields(name, fields):
    """(C field, Go field, Go type, conversion kind) of an API struct: kind is 'plain' (also a
    byte array, or a public raw struct such as StoreKey), 'typed', 'bool', 'string' (a char *
    read with goString), 'chars' (a char array's NUL-terminated text), 'address' (a pointer as
    uintptr) or 'hand'."""
    _, hand, _, _ = GO_API_STRUCTS[name]
    out = []
    for f, t in fields:
        if f == 'struct_size' or re.fullmatch(r'reserved\d*', f):
            continue
        if f in hand:
            if hand[f]:
                out.append((f, hand[f][0], hand[f][1], 'hand'))
            continue
        g = go_ident(f)
        if t.length and not t.depth and t.base == 'char':
            out.append((f, g, 'string', 'chars'))
        elif t.length and not t.depth and t.base in GO_SCALARS:  # bytes, or numbers: [N]T both
            out.append((f, g, go_field_type(t), 'plain'))
        elif t.record and not t.depth and not t.length and t.base in GO_RAW_PUBLIC:
            out.append((f, g, go_raw_name(t.base), 'plain'))
        elif t.proto or t.length or t.record:
            sys.exit('gen.py: %s.%s: no Go API form' % (name, f))
        elif t.depth:
            if t.base == 'char' and t.depth == 1:
                out.append((f, g, 'string', 'string'))
            else:
                out.append((f, g, 'uintptr', 'address'))
        elif f in GO_BOOL_FIELDS:
            if t.base != 'uint32_t':
                sys.exit('gen.py: %s.%s: an on/off field that is not uint32_t' % (name, f))
            out.append((f, g, 'bool', 'bool'))
        elif name + '.' + f in GO_TYPED_FIELDS or f in GO_TYPED_FIELDS:
            out.append((f, g, GO_TYPED_FIELDS.get(name + '.' + f, GO_TYPED_FIELDS.get(f)), 'typed'))
        else:
            out.append((f, g, GO_SCALARS[t.base], 'plain'))
    for f in hand:
        if f not in dict(fields):
            sys.exit('gen.py: %s has no field %s' % (name, f))
    return out


def gen_go_types(h):
    o = ['// ' + BANNER, '', 'package pkv', '']
    structs = {name: fields for name, fields, _ in h.structs}
    for name in GO_API_STRUCTS:
        if name not in structs:
            sys.exit('gen.py: pkv.h has no struct %s' % name)
    for name, fields, _ in h.structs:
        if name not in GO_API_STRUCTS:
            continue
        direction, _, extra, doc = GO_API_STRUCTS[name]
        g, raw = go_struct_name(name), go_raw_name(name)
        rows = go_api_fields(name, fields)
        o += go_comment(doc) + ['type %s struct {' % g]
        o += go_block([(gf, gt) for _, gf, gt, _ in rows], ' ')
        if extra:
            o += [''] + go_block([tuple(x.split(' ', 1)) for x in extra], ' ')
        o += ['}', '']
        if direction in ('in', 'inout'):
            o += ['// toC copies p into c, but for the fields the binding sets by hand.',
                  'func (p *%s) toC(c *%s) {' % (g, raw)]
            for f, gf, gt, kind in rows:
                cf = go_ident(f)
                if kind == 'plain':
                    o += ['\tc.%s = p.%s' % (cf, gf)]
                elif kind == 'typed':
                    o += ['\tc.%s = %s(p.%s)' % (cf, go_field_type(dict(fields)[f]), gf)]
                elif kind == 'bool':
                    o += ['\tc.%s = boolU32(p.%s)' % (cf, gf)]
                elif kind != 'hand':
                    sys.exit('gen.py: %s.%s: an input %s' % (name, f, kind))
            o += ['}', '']
        if direction in ('out', 'inout'):
            o += ['// fromC copies c into p, but for the fields the binding sets by hand.',
                  'func (p *%s) fromC(c *%s) {' % (g, raw)]
            for f, gf, gt, kind in rows:
                cf = go_ident(f)
                o += {'plain': ['\tp.%s = c.%s' % (gf, cf)], 'address': ['\tp.%s = c.%s' % (gf, cf)],
                      'typed': ['\tp.%s = %s(c.%s)' % (gf, gt, cf)],
                      'bool': ['\tp.%s = c.%s != 0' % (gf, cf)],
                      'string': ['\tp.%s = goString(c.%s)' % (gf, cf)],
                      'chars': ['\tp.%s = cText(c.%s[:])' % (gf, cf)], 'hand': []}[kind]
            o += ['}', '']
    return '\n'.join(o)


def gen_go_layout(h):
    o = ['// ' + BANNER, '', 'package pkv', '', '// #include <pkv/pkv.h>', 'import "C"', '',
         'import "unsafe"', '', '// layouts pairs each raw struct with the C one: sizes, then offsets.',
         'var layouts = []layout{']
    for name, fields, _ in h.structs:
        g, c = go_raw_name(name) + '{}', 'C.struct_%s{}' % name
        o += ['\t{"%s", unsafe.Sizeof(%s), unsafe.Sizeof(%s), []fieldOffset{' % (name, g, c)]
        o += ['\t\t{"%s", unsafe.Offsetof(%s.%s), unsafe.Offsetof(%s.%s)},'
              % (f, g, go_ident(f), c, '_' + f if f in GO_KEYWORDS else f) for f, _ in fields]
        o += ['\t}},']
    o += ['}', '']
    return '\n'.join(o)


def gen_go_dl(h):
    """The C half of loading libpkv at run time (load.go): every function of pkv.h defined to call
    the library's through a pointer that pkvgo_resolve fills with dlsym. Until then (no library) a
    call returns PKV_ERR_UNSUPPORTED and the last-error calls return pkvgo_load_error."""
    o = ['// ' + BANNER,
         '// libpkv is loaded at run time (load.go): each pkv_* function of pkv.h is defined here to',
         '// call the library\'s through a pointer that pkvgo_resolve fills (dlsym). Before that, or',
         '// when the library was not found, a call returns PKV_ERR_UNSUPPORTED and the last-error',
         '// calls return why the library is missing. Names are parenthesized: pkv.h defines a macro',
         '// of one of them (pkv_drain_kv_events).',
         '#include <dlfcn.h>', '#include <stddef.h>', '#include <stdint.h>',
         '#include <pkv/pkv.h>', '', '#include "load.h"', '', 'static struct {']
    for name, _, _, _ in h.functions:
        res, params = h.c_decls[name]
        o += ['  %s;' % c_decl(res, '(*%s)' % name, [t for _, t in params])]
    o += ['} fn;', '', 'int pkvgo_resolve(void *lib, const char **missing) {']
    for name, _, _, _ in h.functions:
        o += ['  if (!(*(void **)&fn.%s = dlsym(lib, "%s"))) {' % (name, name),
              '    *missing = "%s";' % name, '    return -1;', '  }']
    o += ['  return 0;', '}', '']
    for name, _, _, _ in h.functions:
        res, params = h.c_decls[name]
        args = [(p or 'a%d' % i, t) for i, (p, t) in enumerate(params)]
        o += [c_decl(res, '(%s)' % name, ['%s%s' % (t, '' if t.endswith('*') else ' ') + p
                                          for p, t in args]) + ' {']
        call = '(fn.%s)(%s)' % (name, ', '.join(p for p, _ in args))
        if res == 'void':
            o += ['  if (fn.%s) %s;' % (name, call)]
        elif res == 'pkv_status':
            o += ['  return fn.%s ? %s : PKV_ERR_UNSUPPORTED;' % (name, call)]
        elif res == 'const char *':
            o += ['  return fn.%s ? %s : pkvgo_load_error;' % (name, call)]
        elif res in ('uint32_t', 'uint64_t', 'int32_t', 'int'):
            o += ['  return fn.%s ? %s : 0;' % (name, call)]
        else:
            sys.exit('gen.py: %s returns %s: no default for an unloaded library' % (name, res))
        o += ['}', '']
    return '\n'.join(o)


def c_decl(res, declarator, params):
    return '%s%s%s(%s)' % (res, '' if res.endswith('*') else ' ', declarator,
                           ', '.join(params) if params else 'void')
