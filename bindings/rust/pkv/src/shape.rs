//! What `OpenBatch::attention` and its kin read and write from host slices: one layer's shape
//! (each layer its own with layer specs, pkv 0.5), and the refusals of slices that do not fit,
//! made before pkv is called so that they name the shape asked.
use crate::element::Element;
use crate::engine::Engine;
use crate::error::{Error, Result, Status};
use crate::layers::LayerKind;
use crate::params::{Device, Dtype, KvLayout};

/// Which of k and v a layer's call takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KvArgs {
    /// k and v (an attention layer).
    Both,
    /// k only: V is K (`k_eq_v`) or the latents' first values (MLA).
    KOnly,
    /// Neither: a shared layer reads its source's cache and writes nothing.
    None,
}

/// The shape of one layer's host slices: rows x heads x widths, and the element counts.
pub(crate) struct HostShape {
    rows: usize,
    q_heads: usize,
    kv_heads: usize,
    head_dim: usize,
    v_dim: usize,
    out_dim: usize,
    pub(crate) q: usize,
    pub(crate) k: usize,
    pub(crate) v: usize,
    pub(crate) out: usize,
    pub(crate) args: KvArgs,
}

/// `layer`'s shape for `rows` new tokens of host slices of `T`, refusing an engine that is not
/// on the CPU and an element type that is not the model's.
pub(crate) fn host_shape<T: Element>(
    engine: &Engine,
    layer: u32,
    rows: usize,
    call: &str,
) -> Result<HostShape> {
    if engine.device() != Some(Device::Cpu) {
        return Err(Error::new(
            Status::Unsupported,
            format!("{}: host slices need a CPU engine; use attention_raw with device pointers", call),
        ));
    }
    let dtype = engine.dtype();
    if dtype != Some(T::DTYPE) {
        return Err(Error::new(
            Status::InvalidArgument,
            format!(
                "{}: the engine's model dtype is {}: slices of {} expected, {} given",
                call,
                dtype.map_or_else(|| "unknown to this binding".to_string(), |d| format!("{:?}", d)),
                dtype.map_or("a type this binding has", element_name),
                element_name(T::DTYPE)
            ),
        ));
    }
    let p = engine.params_raw();
    let q_heads = (p.num_q_heads / p.tp_size.max(1)) as usize;
    let (kv_heads, head_dim, v_dim, out_dim, args) = match engine.layer_shape(layer) {
        Some(l) => {
            let args = match LayerKind::from_code(l.kind) {
                Some(LayerKind::Shared) => KvArgs::None,
                Some(LayerKind::State) => {
                    return Err(Error::new(
                        Status::InvalidArgument,
                        format!(
                            "{}: layer {} is a state layer (a recurrent state, no K and V): pkv has no \
                             attention for it; run its recurrence on BatchView::state_slots",
                            call, layer
                        ),
                    ))
                }
                _ if l.k_eq_v != 0 => KvArgs::KOnly,
                _ => KvArgs::Both,
            };
            (l.kv_heads, l.head_dim, l.v_head_dim, l.v_head_dim, args)
        }
        None => {
            let pool = engine.raw_pool();
            match KvLayout::from_code(p.kv_layout) {
                Some(KvLayout::Mla) => (pool.kv_heads, pool.head_dim, 0, p.kv_lora_rank, KvArgs::KOnly),
                _ => (pool.kv_heads, pool.head_dim, pool.head_dim, pool.head_dim, KvArgs::Both),
            }
        }
    };
    let (kv_heads, head_dim, v_dim, out_dim) =
        (kv_heads as usize, head_dim as usize, v_dim as usize, out_dim as usize);
    Ok(HostShape {
        rows,
        q_heads,
        kv_heads,
        head_dim,
        v_dim,
        out_dim,
        q: rows * q_heads * head_dim,
        k: rows * kv_heads * head_dim,
        v: rows * kv_heads * v_dim,
        out: rows * q_heads * out_dim,
        args,
    })
}

impl HostShape {
    /// `InvalidArgument` for the first slice shorter than expected, with the shape that asks it.
    pub(crate) fn check(&self, call: &str, slices: &[(&str, usize, usize)]) -> Result<()> {
        for &(name, got, want) in slices {
            if got < want {
                let (heads, dim) = match name {
                    "q" => (self.q_heads, self.head_dim),
                    "out" => (self.q_heads, self.out_dim),
                    "v" => (self.kv_heads, self.v_dim),
                    _ => (self.kv_heads, self.head_dim),
                };
                return Err(Error::new(
                    Status::InvalidArgument,
                    format!(
                        "{}: {} has {} elements, {} expected ({} tokens x {} heads x {})",
                        call, name, got, want, self.rows, heads, dim
                    ),
                ));
            }
        }
        Ok(())
    }

    /// `InvalidArgument` when the call's k and v are not those the layer takes.
    pub(crate) fn check_args(&self, call: &str, layer: u32, has_k: bool, has_v: bool) -> Result<()> {
        let (want_k, want_v, why) = match self.args {
            KvArgs::Both => (true, true, "it keeps K and V of its own: give k and v"),
            KvArgs::KOnly => (true, false, "its V is K (k_eq_v, or an MLA latent): give k, and v None"),
            KvArgs::None => {
                (false, false, "it is shared, reading its source layer's cache: give k and v None")
            }
        };
        if (has_k, has_v) == (want_k, want_v) {
            return Ok(());
        }
        Err(Error::new(
            Status::InvalidArgument,
            format!(
                "{}: layer {} was given {} and {}; {}",
                call,
                layer,
                if has_k { "k" } else { "no k" },
                if has_v { "v" } else { "no v" },
                why
            ),
        ))
    }
}

/// The Rust type of a model dtype's values.
fn element_name(dtype: Dtype) -> &'static str {
    match dtype {
        Dtype::F32 => "f32",
        Dtype::F16 => "pkv::F16",
        Dtype::Bf16 => "pkv::Bf16",
        _ => "none (not a model dtype)",
    }
}
