//! What parameters give before any engine exists: the KV budget (`pkv_profile`: `profile`,
//! `Params::profile`) and the layers' KV groups (`pkv_kv_groups`: `Params::kv_groups`).
use std::ptr;

use pkv_sys as sys;

use crate::error::Result;
use crate::library::{call, count, sized};
use crate::params::Params;
use crate::types::KvBudget;

/// How the layers are grouped for the pool (`pkv_kv_groups`, DESIGN.md §12): groups of
/// `group_layers` layers with one window each, full-attention groups first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvGroups {
    /// Layers a block holds (K and V): `num_layers` with one group.
    pub group_layers: u32,
    /// `[num_groups]`: each group's window, 0 = full attention.
    pub group_window: Vec<u32>,
    /// `[num_layers]`: each layer's group.
    pub layer_group: Vec<u32>,
    /// `[num_layers]`: each layer's place in its group's blocks (its index in the pool's layer
    /// dimension, `PoolInfo`).
    pub layer_slot: Vec<u32>,
}

impl KvGroups {
    pub fn num_groups(&self) -> usize {
        self.group_window.len()
    }
}

impl Params {
    /// How the layers are grouped for the pool (`pkv_kv_groups`); the params are validated as
    /// by `Engine::new`.
    pub fn kv_groups(&self) -> Result<KvGroups> {
        let p = self.c_params()?;
        let (mut n, mut group_layers) = (0u32, 0u32);
        // SAFETY: p is a full struct whose windows live in self; outputs NULL with cap 0.
        unsafe {
            call!(
                self.library(),
                pkv_kv_groups(
                    &p,
                    ptr::null_mut(),
                    ptr::null_mut(),
                    ptr::null_mut(),
                    0,
                    &mut n,
                    &mut group_layers
                )
            )?
        };
        let layers = p.num_layers as usize;
        let mut g = KvGroups {
            group_layers,
            group_window: vec![0; n as usize],
            layer_group: vec![0; layers],
            layer_slot: vec![0; layers],
        };
        let cap = count(g.group_window.len(), "groups")?;
        // SAFETY: the per-layer vectors have num_layers elements, group_window cap.
        unsafe {
            call!(
                self.library(),
                pkv_kv_groups(
                    &p,
                    g.layer_group.as_mut_ptr(),
                    g.layer_slot.as_mut_ptr(),
                    g.group_window.as_mut_ptr(),
                    cap,
                    &mut n,
                    &mut g.group_layers
                )
            )?
        };
        Ok(g)
    }

    /// The KV budget these parameters give (`pkv_profile`); see `profile_detailed` for every
    /// term of a budget that is too small.
    pub fn profile(&self) -> Result<KvBudget> {
        let (budget, status) = self.profile_detailed();
        status.map(|()| budget)
    }

    /// `pkv_profile` with its budget even when the call fails: on `Status::OutOfMemory` every term
    /// is filled, `shortfall_bytes` included.
    pub fn profile_detailed(&self) -> (KvBudget, Result<()>) {
        let mut budget = sized!(sys::pkv_kv_budget);
        let status = self.c_params().and_then(|p| {
            // SAFETY: both structs are full ones with struct_size set; p's windows live in self.
            unsafe { call!(self.library(), pkv_profile(&p, &mut budget)) }
        });
        (KvBudget::from_raw(&budget), status)
    }
}

/// The KV budget of `params` (`pkv_profile`).
pub fn profile(params: &Params) -> Result<KvBudget> {
    params.profile()
}
