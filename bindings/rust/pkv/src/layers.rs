//! The cache described per layer (pkv 0.5): `LayerSpec` (`pkv_layer_spec`, given to
//! `Params::layer_specs`), what each KV group costs (`Params::kv_group_info`), where each layer
//! of an engine's pool is (`Engine::layer_info`), attention sinks (`Engine::set_attention_sinks`)
//! and a config.json read into specs (`Params::from_hf_config_layers`). A recurrent layer's
//! state (pkv 0.6) is in state.rs.
use std::os::raw::{c_char, c_void};
use std::ptr;
use std::sync::Arc;

use pkv_sys as sys;

use crate::engine::Engine;
use crate::error::{Error, Result, Status};
use crate::library::{call, codes, count, sized};
use crate::params::Params;
use crate::sparse::{IndexerInfo, IndexerSpec};
use crate::state::{StatePart, StatePartInfo, MAX_STATE_PARTS};

codes! {
    /// What a layer keeps in the cache (`PKV_LAYER_*`).
    LayerKind: u32 {
        /// K and V of its own kv heads (V may be K: `LayerSpec::k_eq_v`).
        Attention = sys::PKV_LAYER_ATTENTION,
        /// One latent per token (as `KvLayout::Mla`; not mixed with the other kinds).
        Mla = sys::PKV_LAYER_MLA,
        /// No cache of its own: it reads the K and V of `source_layer` (Gemma 3n / 4).
        Shared = sys::PKV_LAYER_SHARED,
        /// A recurrent layer (pkv 0.6): a fixed-size state per sequence instead of K and V, in
        /// the parts of `LayerSpec::state` (`LayerSpec::state()`).
        State = sys::PKV_LAYER_STATE,
    }
}

codes! {
    /// Which keys a token at position p attends to (`PKV_ATTENTION_*`).
    AttentionKind: u32 {
        /// Keys 0 ..= p.
        Full = sys::PKV_ATTENTION_FULL,
        /// The last `window` keys, p's own included.
        Sliding = sys::PKV_ATTENTION_SLIDING,
        /// The keys of p's own `window`-token chunk (Llama 4's attention_chunk_size).
        Chunked = sys::PKV_ATTENTION_CHUNKED,
    }
}

/// One layer of the cache (`pkv_layer_spec`). A field left 0 (`None`, `false`) takes the
/// engine's flat one, so `LayerSpec::default()` is the layer the rest of `Params` describes.
/// pkv.h documents each field and its limits.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LayerSpec {
    /// `None`: `LayerKind::Attention`.
    pub kind: Option<LayerKind>,
    /// `None`: `AttentionKind::Full`. A shared layer's must be its source's.
    pub attention: Option<AttentionKind>,
    /// Sliding: keys per token; chunked: the chunk size; full: 0.
    pub window: u32,
    pub num_kv_heads: u32,
    pub head_dim: u32,
    /// V's values per head (and out's); 0 = `head_dim`.
    pub v_head_dim: u32,
    /// V is K, stored once: `OpenBatch::attention_kv` takes no v.
    pub k_eq_v: bool,
    /// A shared layer's source: an earlier attention layer of the same shape.
    pub source_layer: u32,
    /// The layer has attention sinks, set with `Engine::set_attention_sinks`.
    pub sinks: bool,
    /// c > 0: scores become c * tanh(s / c) before the softmax; 0 = none.
    pub logit_softcap: f32,
    /// 0: the engine's `softmax_scale`, or 1/sqrt(this layer's head_dim).
    pub softmax_scale: f32,
    /// A state layer's parts, this rank's (pkv 0.6): `[conv, ssm]`; absent in every other layer.
    pub state: [StatePart; MAX_STATE_PARTS],
    /// An MLA layer's sparse-attention indexer (pkv 0.7: DeepSeek V3.2, GLM-5); `None` in every
    /// other layer.
    pub indexer: Option<IndexerSpec>,
}

impl LayerSpec {
    /// A layer attending to its last `window` keys.
    pub fn sliding(window: u32) -> LayerSpec {
        LayerSpec { attention: Some(AttentionKind::Sliding), window, ..LayerSpec::default() }
    }
    /// A layer attending within its own `chunk`-token chunk.
    pub fn chunked(chunk: u32) -> LayerSpec {
        LayerSpec { attention: Some(AttentionKind::Chunked), window: chunk, ..LayerSpec::default() }
    }
    /// A layer with no cache of its own, reading `source`'s (give it the source's window too).
    pub fn shared(source: u32) -> LayerSpec {
        LayerSpec { kind: Some(LayerKind::Shared), source_layer: source, ..LayerSpec::default() }
    }
    /// An MLA layer with a sparse-attention indexer (pkv 0.7).
    pub fn indexed(indexer: IndexerSpec) -> LayerSpec {
        LayerSpec { kind: Some(LayerKind::Mla), indexer: Some(indexer), ..LayerSpec::default() }
    }

    pub(crate) fn to_raw(&self) -> sys::pkv_layer_spec {
        let (state_dtype, state_shape) = StatePart::parts_to_raw(&self.state);
        let [index_head_dim, index_dtype, index_n_heads, index_topk] = IndexerSpec::to_raw(self.indexer);
        sys::pkv_layer_spec {
            kind: self.kind.map_or(sys::PKV_LAYER_ATTENTION as u32, LayerKind::code),
            attention: self.attention.map_or(sys::PKV_ATTENTION_FULL as u32, AttentionKind::code),
            window: self.window,
            num_kv_heads: self.num_kv_heads,
            head_dim: self.head_dim,
            v_head_dim: self.v_head_dim,
            k_eq_v: u32::from(self.k_eq_v),
            source_layer: self.source_layer,
            sinks: u32::from(self.sinks),
            logit_softcap: self.logit_softcap,
            softmax_scale: self.softmax_scale,
            reserved0: 0,
            state_dtype,
            state_shape,
            index_head_dim,
            index_dtype,
            index_n_heads,
            index_topk,
        }
    }

    /// A spec pkv wrote; a kind or attention code this binding does not know is `None`.
    pub(crate) fn from_raw(r: &sys::pkv_layer_spec) -> LayerSpec {
        LayerSpec {
            kind: LayerKind::from_code(r.kind),
            attention: AttentionKind::from_code(r.attention),
            window: r.window,
            num_kv_heads: r.num_kv_heads,
            head_dim: r.head_dim,
            v_head_dim: r.v_head_dim,
            k_eq_v: r.k_eq_v != 0,
            source_layer: r.source_layer,
            sinks: r.sinks != 0,
            logit_softcap: r.logit_softcap,
            softmax_scale: r.softmax_scale,
            state: StatePart::parts_from_raw(&r.state_dtype, &r.state_shape),
            indexer: IndexerSpec::from_raw(r.index_head_dim, r.index_dtype, r.index_n_heads, r.index_topk),
        }
    }
}

/// One KV group and its bytes (`pkv_kv_group_info`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KvGroupInfo {
    pub attention: Option<AttentionKind>,
    /// The window or chunk size; 0 for full attention.
    pub window: u32,
    /// Layers whose K and V its blocks hold.
    pub num_layers: u32,
    /// Those layers' K and V of one token, this rank.
    pub bytes_per_token: u64,
    /// What its blocks leave unused: `block_bytes - bytes_per_token * block_size`.
    pub padding_bytes_per_block: u64,
}

/// One layer of an engine's pool (`pkv_layer_info`): its spec resolved and where its K and V
/// are. Layer l's K of token t of block b, kv head h, is element `b * block_stride + t *
/// token_stride + h * head_stride` from `k_base` (V from `v_base`, tokens `v_token_stride`
/// apart and heads `v_head_dim`). The bases are addresses (device ones on CUDA), valid while the
/// engine lives.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerInfo {
    pub kind: Option<LayerKind>,
    pub attention: Option<AttentionKind>,
    pub window: u32,
    /// Its KV group (a shared layer: its source's).
    pub group: u32,
    /// The layer whose cache it reads: itself, or a shared layer's source.
    pub source_layer: u32,
    /// Per rank.
    pub kv_heads: u32,
    pub head_dim: u32,
    pub v_head_dim: u32,
    /// `v_base == k_base` (also for MLA).
    pub k_eq_v: bool,
    pub sinks: bool,
    pub logit_softcap: f32,
    /// The scale `pkv_attention` uses.
    pub softmax_scale: f32,
    pub k_base: *mut c_void,
    pub v_base: *mut c_void,
    pub block_stride: u64,
    pub token_stride: u64,
    pub v_token_stride: u64,
    pub head_stride: u64,
    /// The host tier's, with the same strides; null when it is off.
    pub host_k_base: *mut c_void,
    pub host_v_base: *mut c_void,
    /// A state layer's parts and where each is within a slot (pkv 0.6; no K and V: the bases
    /// above null, the strides 0).
    pub state: [StatePartInfo; MAX_STATE_PARTS],
    /// An MLA layer's indexer and where its keys are (pkv 0.7); `None` without one.
    pub indexer: Option<IndexerInfo>,
}

impl LayerInfo {
    pub(crate) fn from_raw(r: &sys::pkv_layer_info) -> LayerInfo {
        LayerInfo {
            kind: LayerKind::from_code(r.kind),
            attention: AttentionKind::from_code(r.attention),
            window: r.window,
            group: r.group,
            source_layer: r.source_layer,
            kv_heads: r.kv_heads,
            head_dim: r.head_dim,
            v_head_dim: r.v_head_dim,
            k_eq_v: r.k_eq_v != 0,
            sinks: r.sinks != 0,
            logit_softcap: r.logit_softcap,
            softmax_scale: r.softmax_scale,
            k_base: r.k_base,
            v_base: r.v_base,
            block_stride: r.block_stride,
            token_stride: r.token_stride,
            v_token_stride: r.v_token_stride,
            head_stride: r.head_stride,
            host_k_base: r.host_k_base,
            host_v_base: r.host_v_base,
            state: StatePartInfo::from_raw(r),
            indexer: IndexerInfo::from_raw(r),
        }
    }
}

impl Params {
    /// The cache per layer (pkv 0.5), `num_layers` specs (checked when the params are used), in
    /// place of `sliding_window` and `layer_windows` (both must be unset: each layer's window is
    /// in its spec). Kept by the Params (a copy), read at create.
    pub fn layer_specs(mut self, specs: &[LayerSpec]) -> Params {
        self.specs = Some(specs.iter().map(LayerSpec::to_raw).collect::<Vec<_>>().into());
        self
    }
    /// Drops the per-layer specs (the flat fields describe every layer again).
    pub fn without_layer_specs(mut self) -> Params {
        self.specs = None;
        self
    }
    /// The per-layer specs, when set.
    pub fn get_layer_specs(&self) -> Option<Vec<LayerSpec>> {
        self.specs.as_ref().map(|s| s.iter().map(LayerSpec::from_raw).collect())
    }

    /// The defaults with the model read from a Hugging Face `config.json` text, per layer
    /// (`pkv_engine_params_from_hf_config_layers`): a model whose layers differ (windows, sinks,
    /// soft-caps, heads, K = V, shared layers, chunks: gpt-oss, Gemma 2/3/3n/4, Llama 4) gets
    /// `layer_specs`; one whose layers are all alike gets the flat fields only.
    pub fn from_hf_config_layers(json: &str) -> Result<Params> {
        Params::new()?.hf_config_layers(json)
    }

    /// `hf_config`, per layer: as `from_hf_config_layers`, replacing the model-shape fields,
    /// windows and specs of `self`.
    pub fn hf_config_layers(mut self, json: &str) -> Result<Params> {
        let text = json.as_ptr() as *const c_char;
        let size = std::mem::size_of::<sys::pkv_layer_spec>() as u32;
        let mut raw = *self.raw();
        raw.layer_windows = ptr::null();
        raw.layer_specs = ptr::null();
        let mut n = 0u32;
        // SAFETY: text has json.len() bytes; specs NULL with cap 0 asks the length only.
        unsafe {
            call!(
                self.library(),
                pkv_engine_params_from_hf_config_layers(
                    &mut raw,
                    text,
                    json.len(),
                    ptr::null_mut(),
                    size,
                    0,
                    &mut n
                )
            )?
        };
        // SAFETY: all-zero specs are valid values (integers and floats).
        let mut specs: Vec<sys::pkv_layer_spec> = vec![unsafe { std::mem::zeroed() }; n as usize];
        // SAFETY: specs has n elements of size bytes each; raw is a full struct.
        unsafe {
            call!(
                self.library(),
                pkv_engine_params_from_hf_config_layers(
                    &mut raw,
                    text,
                    json.len(),
                    specs.as_mut_ptr(),
                    size,
                    n,
                    &mut n
                )
            )?
        };
        let per_layer = !raw.layer_specs.is_null();
        raw.layer_specs = ptr::null();
        raw.layer_spec_size = 0;
        *self.raw_mut() = raw;
        self.windows = None;
        self.specs = if per_layer { Some(specs.into()) } else { None };
        Ok(self)
    }

    /// Group `group` of the layers and its bytes (`pkv_kv_group_info`); the params are validated
    /// as by `Engine::new`. `Params::kv_groups` says how many groups there are.
    pub fn kv_group_info(&self, group: u32) -> Result<KvGroupInfo> {
        let p = self.c_params()?;
        let mut out = sized!(sys::pkv_kv_group_info);
        // SAFETY: p is a full struct whose arrays live in self; out is a full struct.
        unsafe { call!(self.library(), pkv_kv_group_info(&p, group, &mut out))? };
        Ok(KvGroupInfo {
            attention: AttentionKind::from_code(out.attention),
            window: out.window,
            num_layers: out.num_layers,
            bytes_per_token: out.bytes_per_token,
            padding_bytes_per_block: out.padding_bytes_per_block,
        })
    }

    /// Every group's `kv_group_info`, in group order.
    pub fn kv_group_infos(&self) -> Result<Vec<KvGroupInfo>> {
        let n = count(self.kv_groups()?.num_groups(), "groups")?;
        (0..n).map(|g| self.kv_group_info(g)).collect()
    }
}

/// The raw specs of `Params::layer_specs`, shared by clones.
pub(crate) type RawSpecs = Option<Arc<[sys::pkv_layer_spec]>>;

impl Engine {
    /// Layer `layer` of the pool (`pkv_layer_info`).
    pub fn layer_info(&self, layer: u32) -> Result<LayerInfo> {
        Ok(LayerInfo::from_raw(&self.raw_layer_info(layer)?))
    }

    pub(crate) fn raw_layer_info(&self, layer: u32) -> Result<sys::pkv_layer_info> {
        let mut out = sized!(sys::pkv_layer_info);
        // SAFETY: live handle, full struct.
        unsafe { call!(self.library(), pkv_layer_info(self.as_raw(), layer, &mut out))? };
        Ok(out)
    }

    /// A layer's attention sinks (`pkv_set_attention_sinks`): one finite logit per q head of
    /// this rank (`num_q_heads / tp_size`), for a layer whose spec has `sinks`, before the
    /// first sequence. Each joins its head's softmax denominator and adds nothing to the output.
    /// `Status::State` once a sequence was made.
    pub fn set_attention_sinks(&self, layer: u32, sinks: &[f32]) -> Result<()> {
        let p = self.params_raw();
        let heads = (p.num_q_heads / p.tp_size.max(1)) as usize;
        if sinks.len() != heads {
            return Err(Error::new(
                Status::InvalidArgument,
                format!(
                    "set_attention_sinks: {} sinks, the engine has {} q heads per rank: give one per q head",
                    sinks.len(),
                    heads
                ),
            ));
        }
        let n = count(sinks.len(), "sinks")?;
        // SAFETY: sinks has n elements, what pkv reads.
        unsafe { call!(self.library(), pkv_set_attention_sinks(self.as_raw(), layer, sinks.as_ptr(), n)) }
    }
}
