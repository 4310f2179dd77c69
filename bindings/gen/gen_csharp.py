"""gen.py's C# emitter: bindings/csharp/Native.g.cs (P/Invoke structs, externs, enums,
constants) and Version.g.props (the package version)."""
import sys

from gen_header import BANNER, FREES, pascal

CS_SCALARS = {'uint8_t': 'byte', 'int': 'int', 'int32_t': 'int', 'uint32_t': 'uint', 'int64_t': 'long', 'uint64_t': 'ulong',
              'size_t': 'UIntPtr', 'double': 'double', 'float': 'float', 'pkv_status': 'Status',
              'char': 'byte', 'void': 'void'}


# Anonymous enums of pkv.h that are C# enums, by their first constant: (enum, prefix, doc, flags);
# a flags enum is [Flags] and gets None = 0. Tier and CopyKind are written by hand (Engine.cs,
# Batch.cs: each value has its own doc). Other enums are Native.PKV_* constants only.
CS_ENUMS = {
    'PKV_DEVICE_AUTO': ('Device', 'PKV_DEVICE_', 'Where an engine\'s pool lives (PKV_DEVICE_*).', False),
    'PKV_DTYPE_F32': ('DType', 'PKV_DTYPE_',
                      'An element type: the model\'s (Dtype) or the KV cache\'s (KvDType) (PKV_DTYPE_*).', False),
    'PKV_KV_LAYOUT_HEADS': ('KvLayout', 'PKV_KV_LAYOUT_',
                            'What the cache holds per token per layer: Heads (K and V of each kv head) '
                            'or Mla (one latent) (PKV_KV_LAYOUT_*).', False),
    'PKV_LAYER_ATTENTION': ('LayerKind', 'PKV_LAYER_',
                            'What a layer keeps in the cache (LayerSpec.Kind, PKV_LAYER_*): Attention (K and '
                            'V of its own heads), Mla (one latent), Shared (an earlier layer\'s) or State (a '
                            'recurrent state per sequence, since 0.6).', False),
    'PKV_ATTENTION_FULL': ('AttentionKind', 'PKV_ATTENTION_',
                           'Which keys a token attends to (LayerSpec.Attention, PKV_ATTENTION_*): Full, '
                           'Sliding (the last Window) or Chunked (its own Window-token chunk).', False),
    'PKV_BUDGET_FROM_UTILIZATION': ('BudgetSource', 'PKV_BUDGET_',
                                    'Which rule decided a budget\'s NumBlocks (PKV_BUDGET_*).', False),
    'PKV_DEBUG_CONSTANT_HASH': ('DebugFlags', 'PKV_DEBUG_',
                                'EngineParams.DebugFlags bits, for tests of pkv itself (PKV_DEBUG_*).', True),
    'PKV_FINISH_NONE': ('FinishReason', 'PKV_FINISH_', 'Why a request finished (PKV_FINISH_*).', False),
    'PKV_PREEMPT_RECOMPUTE': ('PreemptionMode', 'PKV_PREEMPT_',
                              'What the scheduler does to a request it preempts (PKV_PREEMPT_*).', False),
    'PKV_EVENT_BLOCK_STORED': ('KvEventType', 'PKV_EVENT_', 'What a KvEvent says (PKV_EVENT_*).', False),
    'PKV_EVENT_FORMAT_MAP': ('EventFormat', 'PKV_EVENT_FORMAT_',
                             'How a publisher encodes KV events on the wire (PKV_EVENT_FORMAT_*).', False),
    'PKV_STORE_NONE': ('StoreKind', 'PKV_STORE_', 'A store tier\'s kind (PKV_STORE_*).', False),
    'PKV_STORE_WRITE_THROUGH': ('StoreWriteMode', 'PKV_STORE_',
                                'How an engine writes to its store (PKV_STORE_WRITE_*, READ_ONLY).', False),
    'PKV_STORE_LIST_KEYS_ONLY': ('StoreListFlags', 'PKV_STORE_LIST_', 'Store.List flags (PKV_STORE_LIST_*).', True),
    'PKV_STATE_CHECKPOINT_PROMPT_END': ('StateCheckpointPolicy', 'PKV_STATE_CHECKPOINT_',
                                        'Where a sequence leaves checkpoints of its recurrent state '
                                        '(EngineParams.StateCheckpointPolicy, PKV_STATE_CHECKPOINT_*).', False),
    'PKV_STORE_VALUE_UNREAD': ('StoreValueState', 'PKV_STORE_VALUE_',
                               'What reading a store value found (PKV_STORE_VALUE_*).', False),
    'PKV_INDEXER_SCALE_UE8M0': ('IndexerFlags', 'PKV_INDEXER_',
                                'Batch.IndexerWrite flags (since 0.7, PKV_INDEXER_*).', True),
    'PKV_TOPK_POSITIONS': ('TopKKind', 'PKV_TOPK_',
                           'What Batch.IndexerTopK\'s indices are (since 0.7, PKV_TOPK_*): Positions in '
                           'the token\'s sequence, or Slots of the layer\'s KV group.', False),
    'PKV_RANKS_ONE': ('Ranks', 'PKV_RANKS_',
                      'Which ranks an engine decides for and holds pools of (EngineParams.Ranks, since '
                      '0.10, PKV_RANKS_*): One, itself; All, every rank\'s pool in this process; '
                      'Pool, one rank\'s pool running the plans a decider exported.', False),
    'PKV_BLOCK_LAYOUT_LAYERS': ('BlockLayout', 'PKV_BLOCK_LAYOUT_',
                                'How a block is laid out in the pool (EngineParams.BlockLayout, '
                                'since 0.11, PKV_BLOCK_LAYOUT_*): Layers, a layer\'s blocks '
                                'together; Page, a block one page of all its group\'s layers, one '
                                'segment (Engine.BlockSegments).', False),
}
# The C type of each C# enum's fields (an enum of a uint32_t field is ': uint').
CS_ENUM_C_TYPES = {'DType': 'int32_t', 'Device': 'int32_t', 'KvLayout': 'uint32_t', 'BudgetSource': 'uint32_t',
                   'DebugFlags': 'uint32_t', 'FinishReason': 'uint32_t', 'PreemptionMode': 'uint32_t',
                   'KvEventType': 'uint32_t', 'StoreKind': 'uint32_t', 'StoreWriteMode': 'uint32_t',
                   'StoreListFlags': 'uint32_t', 'StoreValueState': 'uint32_t', 'Tier': 'uint32_t',
                   'EventFormat': 'uint32_t', 'LayerKind': 'uint32_t', 'AttentionKind': 'uint32_t',
                   'StateCheckpointPolicy': 'uint32_t', 'IndexerFlags': 'uint32_t', 'TopKKind': 'uint32_t',
                   'Ranks': 'uint32_t', 'BlockLayout': 'uint32_t'}
# The fields of those types, by C name or struct.field.
CS_TYPED_FIELDS = {'dtype': 'DType', 'kv_dtype': 'DType', 'model_dtype': 'DType', 'device': 'Device',
                   'kv_layout': 'KvLayout', 'pkv_kv_budget.source': 'BudgetSource',
                   'pkv_engine_params.debug_flags': 'DebugFlags',
                   'pkv_engine_params.state_checkpoint_policy': 'StateCheckpointPolicy', 'pkv_seq_info.finish_reason': 'FinishReason',
                   'pkv_engine_params.preemption_mode': 'PreemptionMode', 'pkv_kv_event.type': 'KvEventType',
                   'pkv_store_params.kind': 'StoreKind', 'pkv_store_info.kind': 'StoreKind',
                   'pkv_store_params.write_mode': 'StoreWriteMode', 'pkv_store_entry.state': 'StoreValueState',
                   'pkv_seq_info.kv_tier': 'Tier', 'pkv_kv_event.medium': 'Tier',
                   'pkv_event_publisher_params.format': 'EventFormat', 'pkv_layer_spec.kind': 'LayerKind',
                   'pkv_layer_info.kind': 'LayerKind', 'attention': 'AttentionKind', 'index_dtype': 'DType',
                   'pkv_engine_params.ranks': 'Ranks',
                   'pkv_engine_params.block_layout': 'BlockLayout'}
CS_WORDS = {'dtype': 'DType'}
# Structs only the binding's own types use (they hold C pointers, strings or fixed buffers):
# internal. Every other struct is public, its pointer fields internal (IntPtr is never public).
CS_INTERNAL_STRUCTS = {'pkv_store_key', 'pkv_store_callbacks', 'pkv_store_params', 'pkv_event_publisher_params',
                       'pkv_seq_params', 'pkv_batch_view', 'pkv_event_publisher_info', 'pkv_store_entry',
                       'pkv_store_verify_result'}
# Structs the binding gives a managed twin: the C layout is internal <Name>Native, the public
# <Name> a struct of its non-pointer fields (no struct_size, no reserved) plus what the binding
# adds by hand (EngineParams.LayerWindows, an array it owns), with ToNative/FromNative. Each
# maps to the fields of those additions (all of a struct's fields are declared in one part).
CS_MANAGED_STRUCTS = {'pkv_engine_params': ['uint[] layerWindows;  // LayerWindows (Params.cs): never changed in place',
                                            'LayerSpec[] layerSpecs;  // LayerSpecs (Layers.cs): never changed in place',
                                            'int[] rankDeviceIds;  // RankDeviceIds (Params.cs): never changed in place'],
                      'pkv_seq_info': [],
                      'pkv_layer_spec': ['StatePart[] stateParts;  // StateParts (State.cs): never changed in place']}
# Fields of a managed twin that the binding sets itself (the size of an array it passes): left out.
CS_HIDDEN_FIELDS = {'pkv_engine_params.layer_spec_size'}
# Structs whose public type the binding writes by hand (it owns memory a pointer field needs): the
# C layout is internal <Name>Native, with no generated twin.
CS_HAND_STRUCTS = {'pkv_extra_key'}
# Fields of the managed twins that pkv.h documents as 0 or 1: bool in C#.
CS_BOOL_FIELDS = {'pkv_engine_params.enable_prefix_caching', 'pkv_engine_params.enable_kv_events',
                  'pkv_engine_params.host_offload', 'pkv_seq_info.is_preempted', 'pkv_seq_info.in_batch',
                  'pkv_seq_info.is_request', 'pkv_layer_spec.k_eq_v', 'pkv_layer_spec.sinks'}
# The enums written by hand (by first constant): not Constants.
CS_HAND_ENUMS = {'PKV_TIER_NONE', 'PKV_COPY_COW'}
# Calls of FREES that free their handle on success only (a failed pkv_batch_end keeps the batch):
# the SafeHandle is passed, and released by the binding after a success.
CS_FREES_ON_SUCCESS = {'pkv_batch_end'}


def cs_name(c_name):  # pkv_engine_params -> EngineParams, pkv_engine -> EngineHandle
    name = pascal(c_name[len('pkv_'):]) if c_name.startswith('pkv_') else pascal(c_name)
    return name + 'Native' if c_name in CS_MANAGED_STRUCTS or c_name in CS_HAND_STRUCTS else name


def cs_type(t, fn=None, field=False):
    if t.proto:  # a function pointer field: Marshal.GetFunctionPointerForDelegate of its delegate
        return 'IntPtr'
    if t.depth == 0:
        return CS_SCALARS.get(t.base) or cs_name(t.base)
    if field or (t.base == 'char' and fn is None):
        return 'IntPtr'
    if t.opaque:
        if t.depth == 2:
            return 'out ' + cs_name(t.base) + 'Handle'
        return 'IntPtr' if fn in FREES and fn not in CS_FREES_ON_SUCCESS else cs_name(t.base) + 'Handle'
    return (CS_SCALARS.get(t.base) or cs_name(t.base)) + '*' * t.depth


def cs_enums(h):
    o = []
    for enum in h.enums:
        if enum[0][0] not in CS_ENUMS:
            continue
        t, prefix, doc, flags = CS_ENUMS[enum[0][0]]
        under = ' : uint' if CS_ENUM_C_TYPES[t] == 'uint32_t' else ''
        o += ['    /// <summary>%s</summary>' % doc] + (['    [Flags]'] if flags else [])
        o += ['    public enum %s%s' % (t, under), '    {']
        o += ['        None = 0,'] if flags and all(v for _, v in enum) else []
        o += ['        %s = %d,' % (pascal(n[len(prefix):].lower()), v) for n, v in enum]
        o += ['    }', '']
    return o


def cs_struct(name, fields, size):
    o = []
    for f, t in fields:
        if t.proto:
            res, params = t.proto
            o += ['    /// <summary>%s.%s: the delegate to pass as an IntPtr (keep it alive).</summary>'
                  % (name, f), '    [UnmanagedFunctionPointer(CallingConvention.Cdecl)]',
                  '    internal unsafe delegate %s %s(%s);' % (cs_type(res), cs_name(t.base), ', '.join(
                      '%s %s' % (cs_type(pt, t.base), cs_ident(p)) for p, pt in params)), '']
    fixed = any(t.length for _, t in fields)  # a fixed buffer needs an unsafe struct
    public = name not in CS_INTERNAL_STRUCTS and name not in CS_MANAGED_STRUCTS and name not in CS_HAND_STRUCTS
    o += ['    /// <summary>%s (%d bytes on x86_64).</summary>' % (name, size),
          '    [StructLayout(LayoutKind.Sequential)]',
          '    %s %spartial struct %s' % ('public' if public else 'internal', 'unsafe ' if fixed else '',
                                         cs_name(name)), '    {']
    o += ['        %s %s;' % ('internal' if public and (t.depth or t.proto) else 'public',
                               cs_field(name, f, t)) for f, t in fields]
    o += ['    }', '']
    if name in CS_MANAGED_STRUCTS:
        o += cs_managed_struct(name, fields)
    return o


def cs_managed_struct(name, fields):
    mine = [(f, t) for f, t in fields
            if not (t.depth or t.proto or t.length or f == 'struct_size' or f.startswith('reserved')
                    or name + '.' + f in CS_HIDDEN_FIELDS)]
    sized = any(f == 'struct_size' for f, _ in fields)
    public, raw = pascal(name[len('pkv_'):]), cs_name(name)
    o = ['    /// <summary>%s in C# values (0/1 as bool; no pointers, struct_size or reserved fields);'
         % name, '    /// %s is its C layout.</summary>' % raw, '    public partial struct %s' % public, '    {']
    bools = {f for f, _ in mine if name + '.' + f in CS_BOOL_FIELDS}
    if len(bools) != len([b for b in CS_BOOL_FIELDS if b.startswith(name + '.')]):
        sys.exit('gen.py: CS_BOOL_FIELDS names a field %s does not have' % name)
    field = lambda f, t: cs_field(name, f, t).split()[-1]
    o += ['        public %s;' % ('bool ' + field(f, t) if f in bools else cs_field(name, f, t)) for f, t in mine]
    o += ['        ' + extra for extra in CS_MANAGED_STRUCTS[name]]
    o += ['', '        /// <summary>The C struct of these fields (pointers zero).</summary>',
          '        internal unsafe %s ToNative()' % raw, '        {',
          '            var n = new %s { StructSize = (uint)sizeof(%s) };' % (raw, raw) if sized else
          '            var n = new %s();' % raw]
    o += ['            n.{0} = {0}{1};'.format(field(f, t), ' ? 1u : 0u' if f in bools else '') for f, t in mine]
    o += ['            return n;', '        }', '',
          '        /// <summary>The fields of a C struct pkv filled (its pointers are not read).</summary>',
          '        internal static %s FromNative(%s n)' % (public, raw), '        {',
          '            var p = new %s();' % public]
    o += ['            p.{0} = n.{0}{1};'.format(field(f, t), ' != 0' if f in bools else '') for f, t in mine]
    o += ['            return p;', '        }', '    }', '']
    return o


def gen_csharp(h):
    macros = dict(h.macros)
    o = ['// ' + BANNER,
         '// The raw layer, internal: structs with C# names (pkv_engine_params -> EngineParamsNative,',
         '// fields in PascalCase), calls with C names (each checks that the library loaded, then calls',
         '// its [DllImport] extern), unsafe pointers, SafeHandles for the opaque handles (Handles.cs).',
         '// Public: the enums, pkv.h\'s constants (Constants), the structs without pointers, and',
         '// EngineParams. The idiomatic API is Engine.cs, Batch.cs, Store*.cs, Variants.cs, Events.cs.',
         'using System;', 'using System.Runtime.InteropServices;', '',
         '// The assembly\'s version is pkv.h\'s PKV_VERSION_*.',
         '[assembly: System.Reflection.AssemblyVersion("%d.%d.%d.0")]' % tuple(
             macros['PKV_VERSION_' + k] for k in ('MAJOR', 'MINOR', 'PATCH')),
         '[assembly: System.Reflection.AssemblyFileVersion("%d.%d.%d.0")]' % tuple(
             macros['PKV_VERSION_' + k] for k in ('MAJOR', 'MINOR', 'PATCH')),
         '[assembly: System.Reflection.AssemblyInformationalVersion("%d.%d.%d")]' % tuple(
             macros['PKV_VERSION_' + k] for k in ('MAJOR', 'MINOR', 'PATCH')), '',
         'namespace Pkv', '{']
    o += ['    /// <summary>pkv_status values (PKV_STATUS_MAP).</summary>', '    public enum Status', '    {']
    o += ['        %s = %d,' % (pascal(n.replace('ERR_', '', 1)), v) for n, v, _ in h.statuses]
    o += ['    }', '']
    o += cs_enums(h)
    for name, fields, size in h.structs:
        o += cs_struct(name, fields, size)
    o += ['    /// <summary>pkv.h\'s constants (PKV_MAX_HEAD_DIM is MaxHeadDim, ...): the version,',
          '    /// limits and defaults; the values of its enums are the C# enums.</summary>',
          '    public static class Constants', '    {']
    consts = list(h.macros) + [kv for enum in h.enums if enum[0][0] not in CS_ENUMS and
                               enum[0][0] not in CS_HAND_ENUMS for kv in enum]
    o += ['        public const int %s = %d;' % (pascal(n[len('PKV_'):].lower()), v) for n, v in consts]
    o += ['    }', '']
    o += ['    internal static unsafe partial class Native', '    {',
          '        /// <summary>The library as [DllImport] names it: its SONAME, so the runtime',
          '        /// needs no development symlink (libpkv.so).</summary>',
          '        public const string Library = "libpkv.so.%d";' % macros['PKV_ABI_VERSION'], '']
    o += ['        public const int %s = %d;' % m for m in h.macros] + ['']
    o += ['        public const int PKV_%s = %d;' % (n, v) for n, v, _ in h.statuses] + ['']
    for enum in h.enums:
        o += ['        public const int %s = %d;' % kv for kv in enum]
    o += ['', '        /// <summary>The structs and their sizeof on x86_64 Linux (checked by the tests).</summary>',
          '        public static readonly Type[] StructTypes = { %s };'
          % ', '.join('typeof(%s)' % cs_name(n) for n, _, _ in h.structs),
          '        public static readonly int[] StructSizes = { %s };'
          % ', '.join(str(s) for _, _, s in h.structs), '',
          '        /// <summary>The C name of a status without PKV_ ("ERR_NO_SPACE"), or "UNKNOWN".</summary>',
          '        public static string StatusName(Status s)', '        {', '            switch (s)',
          '            {']
    o += ['                case Status.%s: return "%s";' % (pascal(n.replace('ERR_', '', 1)), n)
          for n, _, _ in h.statuses]
    o += ['                default: return "UNKNOWN";', '            }', '        }', '']
    # Each call checks first that the library was loaded (Native.Loaded, Handles.cs), so that a
    # missing library is one exception that says what to set, from whichever call comes first.
    for name, res, params, _ in h.functions:
        args = ', '.join('%s %s' % (cs_type(t, name), cs_ident(p)) for p, t in params)
        call = ', '.join(('out ' if cs_type(t, name).startswith('out ') else '') + cs_ident(p)
                         for p, t in params)
        o += ['        [DllImport(Library, CallingConvention = CallingConvention.Cdecl, EntryPoint = "%s")]'
              % name, '        static extern %s %s_native(%s);' % (cs_type(res), name, args), '',
              '        public static %s %s(%s)' % (cs_type(res), name, args), '        {',
              '            Loaded();',
              '            %s%s_native(%s);' % ('' if cs_type(res) == 'void' else 'return ', name, call),
              '        }', '']
    o[-1:] = ['    }', '}', '']
    return '\n'.join(o)


def gen_csharp_props(h):
    """The package's version for dotnet (Pkv.csproj imports it): pkv.h's, as the assembly's."""
    v = dict(h.macros)
    return '\n'.join(['<!-- ' + BANNER + ' -->', '<Project>', '  <PropertyGroup>',
                      '    <Version>%d.%d.%d</Version>' % tuple(v['PKV_VERSION_' + k] for k in ('MAJOR', 'MINOR', 'PATCH')),
                      '  </PropertyGroup>', '</Project>', ''])


def cs_field(struct, f, t):
    name = pascal(f, words=CS_WORDS)
    if t.length:
        return 'fixed %s %s[%d]' % (CS_SCALARS[t.base], name, t.length)
    typed = CS_TYPED_FIELDS.get(struct + '.' + f) or CS_TYPED_FIELDS.get(f)
    if typed:
        c_type = CS_ENUM_C_TYPES[typed]
        # a uint32_t field may hold an int32_t enum (index_dtype: a DType): the same size, and
        # pkv's values of it are small
        if t.depth or (t.base != c_type and {t.base, c_type} != {'int32_t', 'uint32_t'}):
            sys.exit('gen.py: %s.%s is not an %s field' % (struct, f, CS_ENUM_C_TYPES[typed]))
        return '%s %s' % (typed, name)
    return '%s %s' % (cs_type(t, field=True), name)


def cs_ident(p):
    return '@' + p if p in ('out', 'ref', 'in', 'base', 'params', 'object', 'string') else p
