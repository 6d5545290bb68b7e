//! Raw declarations of `colibri.h`: bindgen's output for the header (`colibri_h.rs`, checked to
//! be current by `regen-sys.sh --check`), split by `build.rs` into the types and constants
//! (here) and the [`Functions`] table that replaces the `extern "C"` declarations: the crate
//! never links against libcolibri, it resolves these pointers with `dlsym`.
//!
//! Everything here is `unsafe` to use and follows the header's rules; the safe API is the crate
//! root. Note: bindgen types the header's `#define` constants as `u32` (negative ones as `i32`);
//! `COLIBRI_SEED_FROM_SESSION` (`UINT64_MAX`) is not translated by bindgen and is defined below.
#![allow(non_camel_case_types, non_upper_case_globals, non_snake_case, dead_code, clippy::all)]

include!(concat!(env!("OUT_DIR"), "/types.rs"));
include!(concat!(env!("OUT_DIR"), "/functions.rs"));

/// `COLIBRI_SEED_FROM_SESSION` (`UINT64_MAX` in the header).
pub const COLIBRI_SEED_FROM_SESSION: u64 = u64::MAX;

pub(crate) mod layout {
    #![allow(unused_imports)]
    use super::*;
    include!(concat!(env!("OUT_DIR"), "/layout.rs"));
}
