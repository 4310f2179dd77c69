//! The element types `attention` takes from host slices: `f32`, `F16` and `Bf16`, one per model
//! dtype, so a slice of one kind is never read as another. `F16` and `Bf16` are the 16 bits of a
//! value (`#[repr(transparent)]` over `u16`): `from_f32` / `to_f32` convert one value, and
//! `from_bits_slice` / `from_bits_slice_mut` view a `u16` buffer of bits held elsewhere as one,
//! without a copy.
use std::slice;

use crate::params::Dtype;

/// An element type `attention` takes from host slices: `f32` for F32 engines, `F16` for F16
/// ones, `Bf16` for BF16 ones. Sealed: no other type is one.
pub trait Element: Copy + private::Sealed {
    /// The model dtype whose values this type holds.
    const DTYPE: Dtype;
}

impl Element for f32 {
    const DTYPE: Dtype = Dtype::F32;
}

/// An IEEE 754 binary16 value, as its bits (the model dtype `Dtype::F16`).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct F16(pub u16);

/// A bfloat16 value, as its bits: the upper half of an f32 (the model dtype `Dtype::Bf16`).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Bf16(pub u16);

impl Element for F16 {
    const DTYPE: Dtype = Dtype::F16;
}

impl Element for Bf16 {
    const DTYPE: Dtype = Dtype::Bf16;
}

mod private {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for super::F16 {}
    impl Sealed for super::Bf16 {}
}

macro_rules! bits_slices {
    ($t:ident) => {
        impl $t {
            /// A buffer of bits held as `u16` viewed as values of this type (no copy).
            pub fn from_bits_slice(bits: &[u16]) -> &[$t] {
                // SAFETY: $t is repr(transparent) over u16: same size, alignment and validity.
                unsafe { slice::from_raw_parts(bits.as_ptr() as *const $t, bits.len()) }
            }
            /// As `from_bits_slice`, writable (an `out` buffer).
            pub fn from_bits_slice_mut(bits: &mut [u16]) -> &mut [$t] {
                // SAFETY: as above; the borrow is moved into the result.
                unsafe { slice::from_raw_parts_mut(bits.as_mut_ptr() as *mut $t, bits.len()) }
            }
        }
    };
}
bits_slices!(F16);
bits_slices!(Bf16);

impl Bf16 {
    /// The nearest bfloat16 (ties to even); NaN stays NaN (quiet), infinities stay infinite.
    pub fn from_f32(x: f32) -> Bf16 {
        let b = x.to_bits();
        if x.is_nan() {
            return Bf16((b >> 16) as u16 | 0x0040);
        }
        // Adding 0x7fff plus the kept part's lowest bit rounds the dropped half to even.
        Bf16(((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16)
    }
    /// The value, exactly.
    pub fn to_f32(self) -> f32 {
        f32::from_bits((self.0 as u32) << 16)
    }
}

impl F16 {
    /// The nearest binary16 (ties to even): above 65504 (after rounding) is infinity, below
    /// 2^-24 / 2 is zero, between them subnormals; NaN stays NaN (quiet).
    pub fn from_f32(x: f32) -> F16 {
        let b = x.to_bits();
        let sign = ((b >> 16) & 0x8000) as u16;
        let exp = ((b >> 23) & 0xff) as i32;
        let man = b & 0x7f_ffff;
        if exp == 0xff {
            let nan = if man != 0 { 0x0200 | (man >> 13) as u16 } else { 0 };
            return F16(sign | 0x7c00 | nan);
        }
        let e = exp - 127 + 15; // the binary16 exponent field
        if e >= 0x1f {
            return F16(sign | 0x7c00);
        }
        if e <= 0 {
            if e < -10 {
                return F16(sign); // below half the smallest subnormal
            }
            // A subnormal: the value is m * 2^-24 with m the significand shifted right.
            let m = man | 0x80_0000;
            let shift = (14 - e) as u32;
            let rounded = (m + (1 << (shift - 1)) - 1 + ((m >> shift) & 1)) >> shift;
            return F16(sign | rounded as u16); // may round up into the smallest normal: right
        }
        let rounded = (man + 0x0fff + ((man >> 13) & 1)) >> 13; // a carry moves into the exponent
        let v = ((e as u32) << 10) + rounded;
        F16(if v >= 0x7c00 { sign | 0x7c00 } else { sign | v as u16 })
    }
    /// The value, exactly.
    pub fn to_f32(self) -> f32 {
        let h = self.0 as u32;
        let sign = (h & 0x8000) << 16;
        let (exp, man) = ((h >> 10) & 0x1f, h & 0x3ff);
        let bits = match exp {
            0 => {
                // zero or a subnormal: man * 2^-24, exact in f32
                let v = man as f32 / (1u32 << 24) as f32;
                return if sign != 0 { -v } else { v };
            }
            0x1f => sign | 0x7f80_0000 | (man << 13),
            _ => sign | ((exp + 112) << 23) | (man << 13),
        };
        f32::from_bits(bits)
    }
}
