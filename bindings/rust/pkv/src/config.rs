//! Reading a Hugging Face `config.json` beyond the shape `Params::from_hf_config` takes from it:
//! each layer's window (`hf_config_layer_windows`) and a model id for the store
//! (`hf_config_digest`).
use std::os::raw::c_char;
use std::ptr;

use pkv_sys as sys;

use crate::error::Result;
use crate::library::{call, library, Library};

/// Each layer's sliding window (0 = full attention) of a Hugging Face `config.json` text
/// (`pkv_hf_config_layer_windows`: layer_types, sliding_window_pattern, Gemma 2's alternation,
/// use_sliding_window with max_window_layers, or one window for every layer).
/// `Params::from_hf_config` sets them already: this reads them alone.
pub fn hf_config_layer_windows(json: &str) -> Result<Vec<u32>> {
    layer_windows_of(library()?, json)
}

pub(crate) fn layer_windows_of(lib: &'static Library, json: &str) -> Result<Vec<u32>> {
    let text = json.as_ptr() as *const c_char;
    let mut len = 0u32;
    // SAFETY: text points at json.len() bytes; out NULL with cap 0 asks the length.
    unsafe { call!(lib, pkv_hf_config_layer_windows(text, json.len(), ptr::null_mut(), 0, &mut len))? };
    let mut out = vec![0u32; len as usize];
    // SAFETY: out has len elements.
    unsafe { call!(lib, pkv_hf_config_layer_windows(text, json.len(), out.as_mut_ptr(), len, &mut len))? };
    Ok(out)
}

/// A model id for `StoreParams::model_id` from a `config.json` text (`pkv_hf_config_digest`,
/// pkv 0.4): `"config-sha256:"` and the SHA-256 of the text as it is. It tells models of other
/// configs apart where their KV shapes are equal, not two fine-tunes of one base model (one
/// config): name those by their weights. A text `Params::from_hf_config` refuses is refused
/// with its error.
pub fn hf_config_digest(json: &str) -> Result<String> {
    let lib = library()?;
    let mut out = [0u8; sys::PKV_HF_CONFIG_DIGEST_BYTES as usize];
    // SAFETY: json has json.len() bytes; out has the PKV_HF_CONFIG_DIGEST_BYTES pkv.h asks.
    unsafe {
        call!(
            lib,
            pkv_hf_config_digest(
                json.as_ptr() as *const c_char,
                json.len(),
                out.as_mut_ptr() as *mut c_char,
                out.len() as u32
            )
        )?
    };
    let end = out.iter().position(|&b| b == 0).unwrap_or(out.len());
    Ok(String::from_utf8_lossy(&out[..end]).into_owned())
}
