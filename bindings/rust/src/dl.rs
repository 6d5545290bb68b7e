//! The three functions of libdl the crate needs, declared by hand (no dependencies).
use std::os::raw::{c_char, c_int, c_void};

pub const RTLD_NOW: c_int = 2;
pub const RTLD_LOCAL: c_int = 0;

#[link(name = "dl")]
extern "C" {
    pub fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
    pub fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    pub fn dlclose(handle: *mut c_void) -> c_int;
    pub fn dlerror() -> *mut c_char;
}
