//! Safe Rust binding to **libcolibri.so.1**, the C ABI of the Colibri Mixture-of-Experts
//! inference engine (`capi/colibri.h`; guide: `docs/api.md`).
//!
//! The crate has no dependencies and does not link against libcolibri: it `dlopen`s the library
//! at run time (the SONAME `libcolibri.so.1`, found like the dynamic linker finds libraries, or
//! a path given to [`Library::load`]), checks its ABI generation and resolves every function of
//! the header into a table ([`sys::Functions`], generated from Debian bindgen's output for the
//! header).
//!
//! ```no_run
//! use std::ops::ControlFlow;
//! let model = colibri::Model::open("model.colibri", &colibri::ModelOptions::default())?;
//! let mut session = model.session(&colibri::SessionOptions::default())?;
//! let result = session.generate_text("Once upon a time", &colibri::GenerateOptions::default(), |piece| {
//!     print!("{piece}");
//!     ControlFlow::Continue(())
//! })?;
//! println!("\n[{:?}]", result.finish_reason);
//! # Ok::<(), colibri::Error>(())
//! ```
//!
//! # Threads
//! [`Model`] is `Send + Sync` (and cheap to clone): the model is immutable and shared by any
//! number of threads and sessions. [`Session`] is `Send` but not `Sync`: one thread at a time,
//! which the borrow checker enforces (calls that run the model take `&mut self`). Different
//! sessions of one model run concurrently. The library checks the same at run time for
//! callers outside Rust (colibri.h, "Misuse"): a session in use by another thread, a callback
//! that calls back into its own session, and a freed or foreign handle are
//! [`Status::BAD_STATE`], never a crash.
//!
//! ```compile_fail
//! fn shared<T: Sync>() {}
//! shared::<colibri::Session>(); // a session is not Sync
//! ```
//!
//! # Errors
//! Every failing call returns [`Error`]: the library's [`Status`] and the message it stored for
//! the calling thread, read right after the failing call. A panic in a callback is caught at
//! the FFI boundary: the generation stops and the call returns an error with
//! [`Status::CALLBACK`].
#![deny(unsafe_op_in_unsafe_fn)]

use std::os::raw::{c_char, c_void};
use std::any::Any;
use std::ffi::{CStr, CString};
use std::fmt;
use std::ops::{BitOr, ControlFlow};
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::ptr::{self, NonNull};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

mod dl;
pub mod sys;

/// The ABI generation this crate was generated for (`COLIBRI_ABI_VERSION`).
pub const ABI_VERSION: u32 = sys::COLIBRI_ABI_VERSION;
/// The library name loaded by default.
pub const DEFAULT_LIBRARY: &str = "libcolibri.so.1";

// ---------------------------------------------------------------------------------------------
// Status and errors
// ---------------------------------------------------------------------------------------------

/// A libcolibri status code. Negative values are errors; the set may grow in later versions.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Status(pub i32);

impl Status {
    pub const OK: Status = Status(sys::COLIBRI_OK as i32);
    pub const DONE: Status = Status(sys::COLIBRI_DONE as i32);
    pub const INVALID_ARGUMENT: Status = Status(sys::COLIBRI_ERROR_INVALID_ARGUMENT);
    pub const IO: Status = Status(sys::COLIBRI_ERROR_IO);
    pub const NOT_AN_IMAGE: Status = Status(sys::COLIBRI_ERROR_NOT_AN_IMAGE);
    pub const CORRUPT: Status = Status(sys::COLIBRI_ERROR_CORRUPT);
    pub const UNSUPPORTED: Status = Status(sys::COLIBRI_ERROR_UNSUPPORTED);
    pub const NON_FINITE: Status = Status(sys::COLIBRI_ERROR_NON_FINITE);
    pub const OUT_OF_MEMORY: Status = Status(sys::COLIBRI_ERROR_OUT_OF_MEMORY);
    pub const BUFFER_TOO_SMALL: Status = Status(sys::COLIBRI_ERROR_BUFFER_TOO_SMALL);
    pub const CONTEXT_FULL: Status = Status(sys::COLIBRI_ERROR_CONTEXT_FULL);
    pub const BAD_STATE: Status = Status(sys::COLIBRI_ERROR_BAD_STATE);
    pub const CALLBACK: Status = Status(sys::COLIBRI_ERROR_CALLBACK);
    pub const INTERNAL: Status = Status(sys::COLIBRI_ERROR_INTERNAL);
    /// Not an error: nothing ready yet ([`Request::next_piece`] with a timeout).
    pub const PENDING: Status = Status(sys::COLIBRI_PENDING as i32);
    /// The engine's queue is full ([`Engine::submit`]); try again later.
    pub const BUSY: Status = Status(sys::COLIBRI_ERROR_BUSY);

    /// True for the negative codes.
    pub fn is_error(self) -> bool {
        self.0 < 0
    }

    /// The name `colibri_status_string` gives a known code; "unknown status" otherwise.
    pub fn name(self) -> &'static str {
        match self {
            Status::OK => "ok",
            Status::DONE => "done",
            Status::INVALID_ARGUMENT => "invalid argument",
            Status::IO => "input/output error",
            Status::NOT_AN_IMAGE => "not a colibri image",
            Status::CORRUPT => "corrupt image",
            Status::UNSUPPORTED => "unsupported",
            Status::NON_FINITE => "non-finite value",
            Status::OUT_OF_MEMORY => "out of memory",
            Status::BUFFER_TOO_SMALL => "buffer too small",
            Status::CONTEXT_FULL => "context full",
            Status::BAD_STATE => "bad state",
            Status::CALLBACK => "callback failed",
            Status::INTERNAL => "internal error",
            Status::PENDING => "pending",
            Status::BUSY => "busy",
            _ => "unknown status",
        }
    }
}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Status({}: {})", self.0, self.name())
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A failed call: the status code and the library's message (what failed and how to fix it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    status: Status,
    message: String,
}

impl Error {
    /// An error made by the binding itself (argument checks, a panicking callback, loading).
    pub fn new(status: Status, message: impl Into<String>) -> Error {
        Error { status, message: message.into() }
    }
    pub fn status(&self) -> Status {
        self.status
    }
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "colibri: {}", self.status)
        } else {
            write!(f, "colibri: {} ({})", self.message, self.status)
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

fn cstring(what: &str, s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::new(Status::INVALID_ARGUMENT, format!("{what} contains a NUL byte")))
}

unsafe fn static_str(p: *const c_char) -> &'static str {
    if p.is_null() {
        ""
    } else {
        // SAFETY: the library's static strings are NUL-terminated and never freed.
        unsafe { CStr::from_ptr(p) }.to_str().unwrap_or("")
    }
}

/// A string the library owns (valid while the model is): copied.
unsafe fn owned_string(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: the caller passes a NUL-terminated string that is valid now.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

// ---------------------------------------------------------------------------------------------
// Library
// ---------------------------------------------------------------------------------------------

/// A log handler: receives (level, message); may run on several threads at once.
pub type LogHandler = Box<dyn Fn(LogLevel, &str) + Send + Sync>;

/// A loaded libcolibri: the `dlopen` handle and the resolved function table. Libraries stay
/// loaded for the life of the process (libcolibri is linked `-z nodelete`); loading the same
/// path twice returns the same `Arc`.
pub struct Library {
    functions: sys::Functions,
    path: Option<PathBuf>,
    version: String,
    log_handler: RwLock<Option<LogHandler>>,
}

// SAFETY: the table holds plain function pointers into a library that is never unloaded; the
// library's functions are thread-safe as documented per function, and the wrappers below keep
// the per-handle rules (Session is not Sync).
unsafe impl Send for Library {}
unsafe impl Sync for Library {}

static LIBRARIES: Mutex<Vec<Arc<Library>>> = Mutex::new(Vec::new());

impl Library {
    /// Loads libcolibri from `path` (`None`: [`DEFAULT_LIBRARY`]), checks that its ABI
    /// generation is [`ABI_VERSION`] and resolves every function of the header.
    pub fn load(path: Option<&Path>) -> Result<Arc<Library>> {
        let mut cache = LIBRARIES.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(lib) = cache.iter().find(|l| l.path.as_deref() == path) {
            return Ok(lib.clone());
        }
        let name = match path {
            Some(p) => CString::new(p.as_os_str().as_bytes())
                .map_err(|_| Error::new(Status::INVALID_ARGUMENT, "library path contains a NUL byte"))?,
            None => CString::new(DEFAULT_LIBRARY).unwrap(),
        };
        let shown = name.to_string_lossy().into_owned();
        // SAFETY: dlopen/dlsym with NUL-terminated strings; symbols are only transmuted to the
        // header's signatures after the ABI generation matched.
        unsafe {
            let handle = dl::dlopen(name.as_ptr(), dl::RTLD_NOW | dl::RTLD_LOCAL);
            if handle.is_null() {
                let why = dl::dlerror();
                let why = if why.is_null() { "unknown dlopen error".into() } else { owned_string(why) };
                return Err(Error::new(Status::IO, format!("cannot load {shown}: {why}")));
            }
            let abi = dl::dlsym(handle, b"colibri_abi_version\0".as_ptr().cast());
            if abi.is_null() {
                dl::dlclose(handle);
                return Err(Error::new(
                    Status::UNSUPPORTED,
                    format!("{shown} is not libcolibri: it has no colibri_abi_version"),
                ));
            }
            let abi: unsafe extern "C" fn() -> u32 = core::mem::transmute(abi);
            let loaded = abi();
            if loaded != ABI_VERSION {
                dl::dlclose(handle);
                return Err(Error::new(
                    Status::UNSUPPORTED,
                    format!(
                        "{shown} has ABI version {loaded}; this crate was built for {ABI_VERSION} (libcolibri.so.{ABI_VERSION})"
                    ),
                ));
            }
            let mut lookup = |symbol: &[u8]| dl::dlsym(handle, symbol.as_ptr().cast());
            let functions = match sys::Functions::resolve(&mut lookup) {
                Ok(f) => f,
                Err(missing) => {
                    dl::dlclose(handle);
                    return Err(Error::new(
                        Status::UNSUPPORTED,
                        format!("{shown} lacks {missing} (it is older than this crate's colibri.h)"),
                    ));
                }
            };
            let version = static_str((functions.version_string)()).to_string();
            let lib = Arc::new(Library {
                functions,
                path: path.map(Path::to_path_buf),
                version,
                log_handler: RwLock::new(None),
            });
            cache.push(lib.clone());
            Ok(lib)
        }
    }

    /// [`Library::load`]`(None)`: the SONAME.
    pub fn load_default() -> Result<Arc<Library>> {
        Library::load(None)
    }

    /// The loaded library's release, "MAJOR.MINOR.PATCH".
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The loaded library's ABI generation (= [`ABI_VERSION`]).
    pub fn abi_version(&self) -> u32 {
        // SAFETY: a pure getter.
        unsafe { (self.functions.abi_version)() }
    }

    /// The path given to [`Library::load`] (`None` for the default name).
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The library's name for a status code.
    pub fn status_string(&self, status: Status) -> &'static str {
        // SAFETY: a pure getter returning a static string.
        unsafe { static_str((self.functions.status_string)(status.0)) }
    }

    /// The raw function table, for calls the safe API does not cover. Calling through it is
    /// `unsafe` and follows `colibri.h`.
    pub fn functions(&self) -> &sys::Functions {
        &self.functions
    }

    /// Converts a status into `Ok(status)` or the calling thread's error. Must be called right
    /// after the call that returned `status`, on the same thread.
    fn check(&self, status: i32) -> Result<i32> {
        if status >= 0 {
            return Ok(status);
        }
        let mut size = 0usize;
        // SAFETY: size query, then a copy into a buffer of size + 1 bytes.
        let message = unsafe {
            (self.functions.last_error)(ptr::null_mut(), 0, &mut size);
            let mut buf = vec![0u8; size + 1];
            (self.functions.last_error)(buf.as_mut_ptr().cast(), buf.len(), ptr::null_mut());
            buf.truncate(size);
            String::from_utf8_lossy(&buf).into_owned()
        };
        Err(Error { status: Status(status), message })
    }

    /// Installs the process-wide log handler (messages at `min_level` and above); `None` turns
    /// logging off. The handler may run on several threads at once and must not call back into
    /// the library; a panic in it is caught and ignored.
    pub fn set_log_handler(self: &Arc<Self>, min_level: LogLevel, handler: Option<LogHandler>) -> Result<()> {
        let on = handler.is_some();
        *self.log_handler.write().unwrap_or_else(|e| e.into_inner()) = handler;
        let user = Arc::as_ptr(self) as *mut c_void; // the library lives in LIBRARIES forever
        // SAFETY: log_trampoline matches colibri_log_fn; user outlives every call.
        let status = unsafe {
            (self.functions.set_log_callback)(if on { Some(log_trampoline) } else { None }, user, min_level as i32)
        };
        self.check(status).map(|_| ())
    }
}

impl fmt::Debug for Library {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Library").field("path", &self.path).field("version", &self.version).finish()
    }
}

unsafe extern "C" fn log_trampoline(user: *mut c_void, level: i32, message: *const c_char) {
    // SAFETY: user is a &Library kept alive by LIBRARIES; message is NUL-terminated.
    let lib = unsafe { &*(user as *const Library) };
    let message = unsafe { CStr::from_ptr(message) }.to_string_lossy();
    let level = LogLevel::from_raw(level);
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if let Some(handler) = lib.log_handler.read().unwrap_or_else(|e| e.into_inner()).as_ref() {
            handler(level, &message);
        }
    }));
}

/// Log levels (`COLIBRI_LOG_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(i32)]
pub enum LogLevel {
    Debug = sys::COLIBRI_LOG_DEBUG as i32,
    Info = sys::COLIBRI_LOG_INFO as i32,
    Warning = sys::COLIBRI_LOG_WARNING as i32,
    Error = sys::COLIBRI_LOG_ERROR as i32,
    /// As a minimum level: deliver nothing.
    Off = sys::COLIBRI_LOG_OFF as i32,
}

impl LogLevel {
    fn from_raw(v: i32) -> LogLevel {
        match v {
            0 => LogLevel::Debug,
            1 => LogLevel::Info,
            2 => LogLevel::Warning,
            _ => LogLevel::Error,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Enumerations and flags
// ---------------------------------------------------------------------------------------------

/// Element types (`COLIBRI_DTYPE_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F16,
    BF16,
    Q8,
    /// Image format v2 weights: int4 with f16 group scales, int8 with f16 scales per 32, OCP MX FP4.
    Q4,
    Q8F16,
    MXFP4,
    /// A value this crate does not know (a newer library).
    Other(u32),
}

impl DType {
    fn from_raw(v: u32) -> DType {
        match v {
            sys::COLIBRI_DTYPE_F32 => DType::F32,
            sys::COLIBRI_DTYPE_F16 => DType::F16,
            sys::COLIBRI_DTYPE_BF16 => DType::BF16,
            sys::COLIBRI_DTYPE_Q8 => DType::Q8,
            sys::COLIBRI_DTYPE_Q4 => DType::Q4,
            sys::COLIBRI_DTYPE_Q8F16 => DType::Q8F16,
            sys::COLIBRI_DTYPE_MXFP4 => DType::MXFP4,
            v => DType::Other(v),
        }
    }
    fn raw(self) -> u32 {
        match self {
            DType::F32 => sys::COLIBRI_DTYPE_F32,
            DType::F16 => sys::COLIBRI_DTYPE_F16,
            DType::BF16 => sys::COLIBRI_DTYPE_BF16,
            DType::Q8 => sys::COLIBRI_DTYPE_Q8,
            DType::Q4 => sys::COLIBRI_DTYPE_Q4,
            DType::Q8F16 => sys::COLIBRI_DTYPE_Q8F16,
            DType::MXFP4 => sys::COLIBRI_DTYPE_MXFP4,
            DType::Other(v) => v,
        }
    }
}

/// Paging advice for the mapped image (`COLIBRI_ADVICE_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Advice {
    Normal,
    Sequential,
    WillNeed,
    Random,
    HugePage,
}

/// What happens when NaN/Inf comes out of a guarded stage of the forward pass. A non-finite
/// final norm or logit row is always [`Status::NON_FINITE`] (the message names the stage and
/// position): no token is generated from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NonFinitePolicy {
    /// The call fails with [`Status::NON_FINITE`].
    Error,
    /// The row is zeroed and counted in [`Stats::non_finite_rows`].
    Zero,
}

impl NonFinitePolicy {
    fn raw(self) -> u32 {
        match self {
            NonFinitePolicy::Error => sys::COLIBRI_NON_FINITE_ERROR,
            NonFinitePolicy::Zero => sys::COLIBRI_NON_FINITE_ZERO,
        }
    }
}

/// NUMA placement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Numa {
    Off,
    /// Weights (model) / worker threads (session) on this node.
    Bind(u32),
    /// Weight pages interleaved over all nodes.
    Interleave,
}

impl Numa {
    fn raw(self) -> (u32, u32) {
        match self {
            Numa::Off => (sys::COLIBRI_NUMA_OFF, 0),
            Numa::Bind(node) => (sys::COLIBRI_NUMA_BIND, node),
            Numa::Interleave => (sys::COLIBRI_NUMA_INTERLEAVE, 0),
        }
    }
}

/// The widest CPU instruction set a session's kernels may use ([`SessionOptions::max_isa`]).
/// One level gives the same bits on every CPU that has it; levels differ in the last bits of
/// the logits, so a fleet of AVX2 and AVX-512 machines that wants identical outputs caps every
/// session at [`Isa::Avx2`]. A cap above what the CPU has gives its best level
/// ([`SessionInfo::backend`] says which).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// Portable scalar kernels (the same as `force_scalar`).
    Scalar,
    /// AVX2 + FMA + F16C.
    Avx2,
    /// AVX-512 (and VNNI for q8 where present).
    Avx512,
}

impl Isa {
    fn raw(self) -> u32 {
        match self {
            Isa::Scalar => sys::COLIBRI_ISA_SCALAR,
            Isa::Avx2 => sys::COLIBRI_ISA_AVX2,
            Isa::Avx512 => sys::COLIBRI_ISA_AVX512,
        }
    }
}

/// Where a session's forward pass runs ([`SessionOptions::device`]). A CUDA session needs the
/// library's CUDA module, an NVIDIA driver and the device; without one of them the session is
/// refused with a message starting "no CUDA device: " (docs/api.md, "Devices").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    /// The CPU kernels (the default).
    Cpu,
    /// NVIDIA GPU `cuda:N`, in CUDA's device order.
    Cuda(u32),
}

impl Device {
    fn raw(self) -> (u32, u32) {
        match self {
            Device::Cpu => (sys::COLIBRI_DEVICE_CPU, 0),
            Device::Cuda(index) => (sys::COLIBRI_DEVICE_CUDA, index),
        }
    }
}

fn pin_raw(pin: bool) -> u32 {
    if pin {
        sys::COLIBRI_PIN_ON
    } else {
        sys::COLIBRI_PIN_OFF
    }
}

/// `colibri_tokenize` flags; combine with `|`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TokenizeFlags(pub u32);

impl TokenizeFlags {
    pub const NONE: TokenizeFlags = TokenizeFlags(0);
    /// Add BOS/EOS as the tokenizer's post-processor says.
    pub const ADD_SPECIAL: TokenizeFlags = TokenizeFlags(sys::COLIBRI_TOKENIZE_ADD_SPECIAL);
    /// Special-token text in the input becomes the special token.
    pub const PARSE_SPECIAL: TokenizeFlags = TokenizeFlags(sys::COLIBRI_TOKENIZE_PARSE_SPECIAL);
}

impl BitOr for TokenizeFlags {
    type Output = TokenizeFlags;
    fn bitor(self, rhs: TokenizeFlags) -> TokenizeFlags {
        TokenizeFlags(self.0 | rhs.0)
    }
}

/// `colibri_detokenize` flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DetokenizeFlags(pub u32);

impl DetokenizeFlags {
    pub const NONE: DetokenizeFlags = DetokenizeFlags(0);
    /// Leave special tokens (BOS, EOS, ...) out.
    pub const SKIP_SPECIAL: DetokenizeFlags = DetokenizeFlags(sys::COLIBRI_DETOKENIZE_SKIP_SPECIAL);
}

// ---------------------------------------------------------------------------------------------
// Model
// ---------------------------------------------------------------------------------------------

/// Options of [`Model::open`]; `Default` (or `None` fields) takes the library's defaults.
#[derive(Clone, Debug, Default)]
pub struct ModelOptions {
    /// MAP_POPULATE: fault every page in at open.
    pub populate: bool,
    /// madvise hint for the mapping; `None` keeps the C default, [`Advice::HugePage`].
    pub advice: Option<Advice>,
    /// mlock the whole image (a refusal is an [`Status::IO`] error).
    pub lock_memory: bool,
    /// Check every tensor's checksum at open (reads every byte).
    pub verify_checksums: bool,
    /// Threads for verification and the sessions' default (`None`/0: every CPU).
    pub threads: Option<u32>,
    pub pin_threads: Option<bool>,
    pub non_finite_policy: Option<NonFinitePolicy>,
    pub numa: Option<Numa>,
    /// Read every weight page once at open.
    pub warm_up: bool,
    /// Copy the image into private huge-page memory at open and serve the weights from that
    /// copy, not the file mapping: a few percent faster decode, for a read of the whole file
    /// and the image's size in memory no other process shares.
    pub load_into_memory: bool,
}

struct ModelInner {
    lib: Arc<Library>,
    raw: NonNull<sys::colibri_model>,
    info: ModelInfo,
}

// SAFETY: a colibri_model is immutable and thread-safe (colibri.h); closing happens in Drop,
// when no other reference exists.
unsafe impl Send for ModelInner {}
unsafe impl Sync for ModelInner {}

impl Drop for ModelInner {
    fn drop(&mut self) {
        // SAFETY: the last reference; sessions hold their own reference in the library.
        unsafe { (self.lib.functions.model_close)(self.raw.as_ptr()) }
    }
}

/// An opened image: weights, hyper-parameters, tokenizer. `Send + Sync`; cloning shares it.
/// The model is closed when the last clone and the last [`Session`] are dropped.
#[derive(Clone)]
pub struct Model {
    inner: Arc<ModelInner>,
}

/// Describes a model (`colibri_model_info`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelInfo {
    pub format_version: u32,
    pub path: String,
    /// "mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "glm4_moe", "minimax_m2", "gpt_oss", "deepseek_v3"
    pub family: String,
    pub architecture: String,
    pub file_size_bytes: u64,
    pub parameter_count: u64,
    pub active_parameter_count: u64,
    /// Weight bytes one decode token reads.
    pub active_weight_bytes: u64,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub layer_count: usize,
    pub moe_layer_count: usize,
    pub head_count: usize,
    pub kv_head_count: usize,
    pub head_dim: usize,
    pub max_position_embeddings: usize,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    pub clip_qkv: f64,
    pub tie_word_embeddings: bool,
    pub attention_bias: bool,
    pub qk_norm: String,
    pub expert_count: usize,
    pub expert_ffn_size: usize,
    pub top_k: usize,
    pub router_score: String,
    pub norm_topk_prob: bool,
    pub shared_expert_gate: bool,
    pub shared_expert_ffn_size: usize,
    pub dense_ffn_size: usize,
    /// Leading values of each head RoPE rotates (head_dim unless partial).
    pub rotary_dim: usize,
    /// Sigmoid routers ("sigmoid": GLM-4.5, MiniMax-M2): experts chosen by score + bias.
    pub router_select_bias: bool,
    /// 1 = no group limit.
    pub expert_group_count: usize,
    pub expert_group_top: usize,
    pub routed_scaling_factor: f64,
    pub topk_norm_epsilon: f64,
    /// "none" or "yarn".
    pub rope_scaling: String,
    pub rope_factor: f64,
    pub rope_attention_factor: f64,
    /// gpt-oss: positions a sliding-window layer attends to (0: no sliding layer).
    pub sliding_window: usize,
    pub sliding_layer_count: usize,
    pub attention_sinks: bool,
    pub attention_output_bias: bool,
    pub router_bias: bool,
    pub expert_bias: bool,
    /// "silu" or "swiglu_clamped" (gpt-oss).
    pub expert_activation: String,
    pub swiglu_limit: f64,
    pub swiglu_alpha: f64,
    /// "gqa" or "mla" (multi-head latent attention: DeepSeek-V3, Kimi-K2). With "mla",
    /// `head_dim` is the rotated part of a query head and the cache keeps `kv_lora_rank +
    /// head_dim` values per position and layer; the ranks are 0 for "gqa".
    pub attention: String,
    /// 0: a direct query projection.
    pub q_lora_rank: usize,
    pub kv_lora_rank: usize,
    pub qk_nope_head_dim: usize,
    pub v_head_dim: usize,
    pub rope_interleave: bool,
    /// The softmax scale of the scores.
    pub attention_scale: f64,
    /// One position of an f32 KV cache over all layers (an f16 cache: half).
    pub kv_cache_bytes_per_token: u64,
    /// Multi-token-prediction layers of the checkpoint (kept as mtp.<j>.* tensors, never run).
    pub mtp_layer_count: usize,
    pub weight_dtype: Option<DType>,
    pub weight_group_size: u32,
    pub tensor_count: usize,
    /// -1 = none
    pub bos_token_id: i32,
    pub eos_token_id: i32,
    pub pad_token_id: i32,
    pub eos_token_count: usize,
    pub add_bos_token: bool,
    pub add_eos_token: bool,
    pub has_tokenizer: bool,
    pub has_chat_template: bool,
    pub numa_report: String,
}

/// One tensor of the image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    pub dtype: DType,
    /// Outermost first.
    pub shape: Vec<u64>,
    /// Q8 group size, 0 otherwise.
    pub group_size: u32,
    pub offset_bytes: u64,
    pub size_bytes: u64,
    /// XXH3-64 of the tensor's bytes.
    pub checksum: u64,
}

/// One chat message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> ChatMessage {
        ChatMessage { role: role.into(), content: content.into() }
    }
}

/// Options of [`Model::chat_render`].
#[derive(Clone, Debug)]
pub struct ChatOptions {
    /// End with the assistant turn's opening (default true).
    pub add_generation_prompt: bool,
    /// A Jinja template to use instead of the model's.
    pub template: Option<String>,
    /// Extra template variables: (name, JSON value text).
    pub variables: Vec<(String, String)>,
}

impl Default for ChatOptions {
    fn default() -> ChatOptions {
        ChatOptions { add_generation_prompt: true, template: None, variables: Vec::new() }
    }
}

/// Calls `call(buffer, capacity, &mut size)` growing the buffer while the library answers
/// BUFFER_TOO_SMALL; returns the first `size` elements.
fn grow<T: Copy + Default>(
    lib: &Library,
    guess: usize,
    mut call: impl FnMut(*mut T, usize, &mut usize) -> i32,
    extra: usize,
) -> Result<Vec<T>> {
    let mut buf = vec![T::default(); guess.max(1) + extra];
    loop {
        let mut size = 0usize;
        let status = call(buf.as_mut_ptr(), buf.len(), &mut size);
        if status == sys::COLIBRI_ERROR_BUFFER_TOO_SMALL {
            buf = vec![T::default(); size + extra];
            continue;
        }
        lib.check(status)?;
        buf.truncate(size);
        return Ok(buf);
    }
}

impl Model {
    /// Opens an image with the default library ([`Library::load_default`]).
    pub fn open(path: impl AsRef<Path>, options: &ModelOptions) -> Result<Model> {
        Model::open_with(&Library::load_default()?, path, options)
    }

    /// Opens an image with a given library (`colibri_model_open`).
    pub fn open_with(lib: &Arc<Library>, path: impl AsRef<Path>, options: &ModelOptions) -> Result<Model> {
        let f = &lib.functions;
        let cpath = CString::new(path.as_ref().as_os_str().as_bytes())
            .map_err(|_| Error::new(Status::INVALID_ARGUMENT, "model path contains a NUL byte"))?;
        // SAFETY: the options struct is initialised by the library, then plain fields are set.
        unsafe {
            let mut o: sys::colibri_model_options = core::mem::zeroed();
            lib.check((f.model_options_init)(&mut o, core::mem::size_of_val(&o)))?;
            o.populate = options.populate as u32;
            if let Some(a) = options.advice {
                o.advice = match a {
                    Advice::Normal => sys::COLIBRI_ADVICE_NORMAL,
                    Advice::Sequential => sys::COLIBRI_ADVICE_SEQUENTIAL,
                    Advice::WillNeed => sys::COLIBRI_ADVICE_WILLNEED,
                    Advice::Random => sys::COLIBRI_ADVICE_RANDOM,
                    Advice::HugePage => sys::COLIBRI_ADVICE_HUGEPAGE,
                };
            }
            o.lock_memory = options.lock_memory as u32;
            o.verify_checksums = options.verify_checksums as u32;
            if let Some(t) = options.threads {
                o.threads = t;
            }
            if let Some(p) = options.pin_threads {
                o.pin_threads = pin_raw(p);
            }
            if let Some(p) = options.non_finite_policy {
                o.non_finite_policy = p.raw();
            }
            if let Some(n) = options.numa {
                (o.numa_policy, o.numa_node) = n.raw();
            }
            o.warm_up = options.warm_up as u32;
            o.load_into_memory = options.load_into_memory as u32;
            let mut raw = ptr::null_mut();
            lib.check((f.model_open)(cpath.as_ptr(), &o, &mut raw))?;
            let raw = NonNull::new(raw).ok_or_else(|| Error::new(Status::INTERNAL, "model_open returned NULL"))?;
            let mut i: sys::colibri_model_info = core::mem::zeroed();
            i.struct_size = core::mem::size_of_val(&i) as u32;
            if let Err(e) = lib.check((f.model_get_info)(raw.as_ptr(), &mut i)) {
                (f.model_close)(raw.as_ptr());
                return Err(e);
            }
            let info = model_info_from(&i);
            Ok(Model { inner: Arc::new(ModelInner { lib: lib.clone(), raw, info }) })
        }
    }

    fn lib(&self) -> &Library {
        &self.inner.lib
    }

    fn raw(&self) -> *mut sys::colibri_model {
        self.inner.raw.as_ptr()
    }

    /// The library the model was opened with.
    pub fn library(&self) -> &Arc<Library> {
        &self.inner.lib
    }

    /// The model's description (read at open).
    pub fn info(&self) -> &ModelInfo {
        &self.inner.info
    }

    /// The end-of-sequence ids (generation stops at any of them).
    pub fn eos_tokens(&self) -> Result<Vec<i32>> {
        let f = &self.lib().functions;
        grow(self.lib(), self.info().eos_token_count, |buf, cap, size| unsafe {
            // SAFETY: buf has cap elements.
            (f.model_eos_tokens)(self.raw(), buf, cap, size)
        }, 0)
    }

    /// The image's metadata JSON (borrowed from the mapping).
    pub fn metadata(&self) -> Result<&[u8]> {
        let mut json = ptr::null();
        let mut size = 0usize;
        // SAFETY: the pointer is valid while the model's memory is, i.e. while self is.
        unsafe {
            self.lib().check((self.lib().functions.model_metadata)(self.raw(), &mut json, &mut size))?;
            Ok(if size == 0 { &[] } else { core::slice::from_raw_parts(json.cast(), size) })
        }
    }

    /// The image's tensors in directory order.
    pub fn tensors(&self) -> Result<Vec<TensorInfo>> {
        let f = &self.lib().functions;
        let mut count = 0usize;
        // SAFETY: out parameters point at live locals.
        unsafe {
            self.lib().check((f.model_tensor_count)(self.raw(), &mut count))?;
            let mut out = Vec::with_capacity(count);
            for index in 0..count {
                let mut t: sys::colibri_tensor_info = core::mem::zeroed();
                t.struct_size = core::mem::size_of_val(&t) as u32;
                self.lib().check((f.model_tensor_info)(self.raw(), index, &mut t))?;
                let rank = (t.rank as usize).min(t.shape.len());
                out.push(TensorInfo {
                    name: owned_string(t.name),
                    dtype: DType::from_raw(t.dtype),
                    shape: t.shape[..rank].to_vec(),
                    group_size: t.group_size,
                    offset_bytes: t.offset_bytes,
                    size_bytes: t.size_bytes,
                    checksum: t.checksum,
                });
            }
            Ok(out)
        }
    }

    /// The directory index of the tensor called `name`.
    pub fn find_tensor(&self, name: &str) -> Result<usize> {
        let cname = cstring("tensor name", name)?;
        let mut index = 0usize;
        // SAFETY: NUL-terminated name, live out parameter.
        unsafe { self.lib().check((self.lib().functions.model_find_tensor)(self.raw(), cname.as_ptr(), &mut index))? };
        Ok(index)
    }

    /// Encodes UTF-8 text into token ids.
    pub fn tokenize(&self, text: &str, flags: TokenizeFlags) -> Result<Vec<i32>> {
        let f = &self.lib().functions;
        grow(self.lib(), text.len() + 8, |buf, cap, size| unsafe {
            // SAFETY: text is borrowed for the call; buf has cap elements.
            (f.tokenize)(self.raw(), text.as_ptr().cast(), text.len(), flags.0, buf, cap, size)
        }, 0)
    }

    /// Decodes token ids into text (invalid UTF-8 becomes U+FFFD).
    pub fn detokenize(&self, tokens: &[i32], flags: DetokenizeFlags) -> Result<String> {
        let f = &self.lib().functions;
        let bytes = grow(self.lib(), tokens.len() * 8 + 16, |buf: *mut u8, cap, size| unsafe {
            // SAFETY: buf has cap bytes (room for the NUL included).
            (f.detokenize)(self.raw(), tokens.as_ptr(), tokens.len(), flags.0, buf.cast(), cap, size)
        }, 1)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The vocabulary string of one token, as stored in tokenizer.json.
    pub fn token_text(&self, token: i32) -> Result<String> {
        let f = &self.lib().functions;
        let bytes = grow(self.lib(), 32, |buf: *mut u8, cap, size| unsafe {
            // SAFETY: buf has cap bytes.
            (f.token_text)(self.raw(), token, buf.cast(), cap, size)
        }, 1)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Renders a conversation with the model's chat template (tokenize the result with
    /// [`TokenizeFlags::PARSE_SPECIAL`]).
    pub fn chat_render(&self, messages: &[ChatMessage], options: &ChatOptions) -> Result<String> {
        let f = &self.lib().functions;
        let chat = CChat::new(self.lib(), messages, options)?;
        // SAFETY: chat's pointers borrow its own buffers, which outlive the calls.
        unsafe {
            let bytes = grow(self.lib(), 256, |buf: *mut u8, cap, size| {
                (f.chat_render)(self.raw(), chat.messages.as_ptr(), chat.messages.len(), &chat.options, buf.cast(), cap, size)
            }, 1)?;
            Ok(String::from_utf8_lossy(&bytes).into_owned())
        }
    }

    /// The C view of session options: the library's defaults, then the given fields.
    fn session_options_raw(&self, options: &SessionOptions) -> Result<sys::colibri_session_options> {
        let f = &self.lib().functions;
        // SAFETY: the options struct is initialised by the library, then plain fields are set.
        unsafe {
            let mut o: sys::colibri_session_options = core::mem::zeroed();
            self.lib().check((f.session_options_init)(&mut o, core::mem::size_of_val(&o)))?;
            let set = |dst: &mut u32, v: Option<u32>| {
                if let Some(v) = v {
                    *dst = v;
                }
            };
            set(&mut o.context_length, options.context_length);
            set(&mut o.max_sequences, options.max_sequences);
            set(&mut o.max_batch_tokens, options.max_batch_tokens);
            set(&mut o.max_logit_rows, options.max_logit_rows);
            set(&mut o.threads, options.threads);
            set(&mut o.pin_threads, options.pin_threads.map(pin_raw));
            set(&mut o.non_finite_policy, options.non_finite_policy.map(NonFinitePolicy::raw));
            set(&mut o.kv_dtype, options.kv_dtype.map(DType::raw));
            o.force_scalar = options.force_scalar as u32;
            if let Some(seed) = options.seed {
                o.seed = seed;
            }
            if let Some(n) = options.numa {
                (o.numa_policy, o.numa_node) = n.raw();
            }
            set(&mut o.max_isa, options.max_isa.map(Isa::raw));
            if let Some(d) = options.device {
                (o.device_kind, o.device_index) = d.raw();
            }
            Ok(o)
        }
    }

    /// Creates a session (`colibri_session_create`).
    pub fn session(&self, options: &SessionOptions) -> Result<Session> {
        let f = &self.lib().functions;
        let o = self.session_options_raw(options)?;
        // SAFETY: o is a complete options struct; raw is checked below.
        unsafe {
            let mut raw = ptr::null_mut();
            self.lib().check((f.session_create)(self.raw(), &o, &mut raw))?;
            let raw = NonNull::new(raw).ok_or_else(|| Error::new(Status::INTERNAL, "session_create returned NULL"))?;
            Ok(Session { model: self.clone(), raw })
        }
    }
}

impl fmt::Debug for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Model").field("path", &self.info().path).field("family", &self.info().family).finish()
    }
}

unsafe fn model_info_from(i: &sys::colibri_model_info) -> ModelInfo {
    // SAFETY: the strings are NUL-terminated and valid while the model is.
    unsafe {
        ModelInfo {
            format_version: i.format_version,
            path: owned_string(i.path),
            family: owned_string(i.family),
            architecture: owned_string(i.architecture),
            file_size_bytes: i.file_size_bytes,
            parameter_count: i.parameter_count,
            active_parameter_count: i.active_parameter_count,
            active_weight_bytes: i.active_weight_bytes,
            vocab_size: i.vocab_size as usize,
            hidden_size: i.hidden_size as usize,
            layer_count: i.layer_count as usize,
            moe_layer_count: i.moe_layer_count as usize,
            head_count: i.head_count as usize,
            kv_head_count: i.kv_head_count as usize,
            head_dim: i.head_dim as usize,
            max_position_embeddings: i.max_position_embeddings as usize,
            rms_norm_eps: i.rms_norm_eps,
            rope_theta: i.rope_theta,
            clip_qkv: i.clip_qkv,
            tie_word_embeddings: i.tie_word_embeddings != 0,
            attention_bias: i.attention_bias != 0,
            qk_norm: owned_string(i.qk_norm),
            expert_count: i.expert_count as usize,
            expert_ffn_size: i.expert_ffn_size as usize,
            top_k: i.top_k as usize,
            router_score: owned_string(i.router_score),
            norm_topk_prob: i.norm_topk_prob != 0,
            shared_expert_gate: i.shared_expert_gate != 0,
            shared_expert_ffn_size: i.shared_expert_ffn_size as usize,
            dense_ffn_size: i.dense_ffn_size as usize,
            rotary_dim: i.rotary_dim as usize,
            router_select_bias: i.router_select_bias != 0,
            expert_group_count: i.expert_group_count as usize,
            expert_group_top: i.expert_group_top as usize,
            routed_scaling_factor: i.routed_scaling_factor,
            topk_norm_epsilon: i.topk_norm_epsilon,
            rope_scaling: owned_string(i.rope_scaling),
            rope_factor: i.rope_factor,
            rope_attention_factor: i.rope_attention_factor,
            sliding_window: i.sliding_window as usize,
            sliding_layer_count: i.sliding_layer_count as usize,
            attention_sinks: i.attention_sinks != 0,
            attention_output_bias: i.attention_output_bias != 0,
            router_bias: i.router_bias != 0,
            expert_bias: i.expert_bias != 0,
            expert_activation: owned_string(i.expert_activation),
            swiglu_limit: i.swiglu_limit,
            swiglu_alpha: i.swiglu_alpha,
            attention: owned_string(i.attention),
            q_lora_rank: i.q_lora_rank as usize,
            kv_lora_rank: i.kv_lora_rank as usize,
            qk_nope_head_dim: i.qk_nope_head_dim as usize,
            v_head_dim: i.v_head_dim as usize,
            rope_interleave: i.rope_interleave != 0,
            attention_scale: i.attention_scale,
            kv_cache_bytes_per_token: i.kv_cache_bytes_per_token,
            mtp_layer_count: i.mtp_layer_count as usize,
            weight_dtype: Some(DType::from_raw(i.weight_dtype)),
            weight_group_size: i.weight_group_size,
            tensor_count: i.tensor_count as usize,
            bos_token_id: i.bos_token_id,
            eos_token_id: i.eos_token_id,
            pad_token_id: i.pad_token_id,
            eos_token_count: i.eos_token_count as usize,
            add_bos_token: i.add_bos_token != 0,
            add_eos_token: i.add_eos_token != 0,
            has_tokenizer: i.has_tokenizer != 0,
            has_chat_template: i.has_chat_template != 0,
            numa_report: owned_string(i.numa_report),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Session
// ---------------------------------------------------------------------------------------------

/// Options of [`Model::session`]; `None` fields take the library's defaults (the model's for
/// threads and the policies).
#[derive(Clone, Debug, Default)]
pub struct SessionOptions {
    /// Tokens per sequence (default min(max_position_embeddings, 4096)).
    pub context_length: Option<u32>,
    /// KV slots (default 1).
    pub max_sequences: Option<u32>,
    /// Tokens per forward call (default 512).
    pub max_batch_tokens: Option<u32>,
    /// Logit rows one batch call may ask for (default max_sequences).
    pub max_logit_rows: Option<u32>,
    pub threads: Option<u32>,
    pub pin_threads: Option<bool>,
    pub non_finite_policy: Option<NonFinitePolicy>,
    /// [`DType::F32`] (default) or [`DType::F16`].
    pub kv_dtype: Option<DType>,
    /// Portable scalar kernels (debugging).
    pub force_scalar: bool,
    /// Default sampling seed of this session's generations (default 0).
    pub seed: Option<u64>,
    pub numa: Option<Numa>,
    /// Cap on the kernels' instruction set (default: the best the CPU has).
    pub max_isa: Option<Isa>,
    /// Where the forward pass runs (default [`Device::Cpu`]).
    pub device: Option<Device>,
}

/// A KV cache plus the scratch memory and threads to run the model: `Send`, not `Sync`.
/// Calls that run the model take `&mut self`. Holds a reference on its model.
pub struct Session {
    model: Model,
    raw: NonNull<sys::colibri_session>,
}

// SAFETY: a session may move between threads; it is used by one thread at a time, which
// `!Sync` (NonNull) and `&mut self` guarantee.
unsafe impl Send for Session {}

impl Drop for Session {
    fn drop(&mut self) {
        // SAFETY: no stream borrows the session any more (Stream holds &mut Session).
        unsafe { (self.model.lib().functions.session_free)(self.raw.as_ptr()) }
    }
}

/// The effective configuration of a session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionInfo {
    pub context_length: u32,
    pub max_sequences: u32,
    pub max_batch_tokens: u32,
    pub max_logit_rows: u32,
    pub thread_count: u32,
    pub kv_dtype: DType,
    pub pin_threads: bool,
    pub non_finite_policy: NonFinitePolicy,
    pub numa: Numa,
    /// "cpu-avx512", "cpu-avx2", "cpu-scalar"
    pub backend: String,
    pub kv_cache_bytes: u64,
    pub seed: u64,
}

/// One entry of [`Session::batch`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchEntry {
    pub sequence: u32,
    /// `None`: continue the sequence. Either every entry gives a position or none does.
    pub position: Option<u32>,
    pub token: i32,
    /// Compute this entry's logits (rows in entry order).
    pub want_logits: bool,
}

/// Time spent in one stage of the forward pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageTime {
    pub name: &'static str,
    pub time: Duration,
}

/// A session's counters since creation or [`Session::reset_stats`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub stages: Vec<StageTime>,
    pub weight_bytes_read: u64,
    pub tokens: u64,
    pub forward_calls: u64,
    pub non_finite_rows: u64,
    pub expert_activations: u64,
}

impl Session {
    fn lib(&self) -> &Library {
        self.model.lib()
    }
    fn f(&self) -> &sys::Functions {
        &self.model.lib().functions
    }
    fn raw(&self) -> *mut sys::colibri_session {
        self.raw.as_ptr()
    }

    /// The model the session runs.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The effective configuration.
    pub fn info(&self) -> Result<SessionInfo> {
        // SAFETY: live out parameter with struct_size set.
        unsafe {
            let mut i: sys::colibri_session_info = core::mem::zeroed();
            i.struct_size = core::mem::size_of_val(&i) as u32;
            self.lib().check((self.f().session_get_info)(self.raw(), &mut i))?;
            Ok(SessionInfo {
                context_length: i.context_length,
                max_sequences: i.max_sequences,
                max_batch_tokens: i.max_batch_tokens,
                max_logit_rows: i.max_logit_rows,
                thread_count: i.thread_count,
                kv_dtype: DType::from_raw(i.kv_dtype),
                pin_threads: i.pin_threads == sys::COLIBRI_PIN_ON,
                non_finite_policy: if i.non_finite_policy == sys::COLIBRI_NON_FINITE_ZERO {
                    NonFinitePolicy::Zero
                } else {
                    NonFinitePolicy::Error
                },
                numa: match i.numa_policy {
                    sys::COLIBRI_NUMA_BIND => Numa::Bind(i.numa_node),
                    sys::COLIBRI_NUMA_INTERLEAVE => Numa::Interleave,
                    _ => Numa::Off,
                },
                backend: static_str(i.backend).to_string(),
                kv_cache_bytes: i.kv_cache_bytes,
                seed: i.seed,
            })
        }
    }

    /// Forgets every sequence.
    pub fn reset(&mut self) -> Result<()> {
        // SAFETY: exclusive use of the session.
        self.lib().check(unsafe { (self.f().session_reset)(self.raw()) }).map(|_| ())
    }

    /// Forgets one sequence.
    pub fn reset_sequence(&mut self, sequence: u32) -> Result<()> {
        // SAFETY: exclusive use of the session.
        self.lib().check(unsafe { (self.f().session_reset_sequence)(self.raw(), sequence) }).map(|_| ())
    }

    /// The number of tokens a sequence holds.
    pub fn sequence_length(&self, sequence: u32) -> Result<u32> {
        let mut length = 0u32;
        // SAFETY: live out parameter.
        self.lib().check(unsafe { (self.f().session_sequence_length)(self.raw(), sequence, &mut length) })?;
        Ok(length)
    }

    /// Appends tokens to a sequence and runs them; afterwards `logits(0)` are the last token's.
    pub fn prefill(&mut self, sequence: u32, tokens: &[i32]) -> Result<()> {
        // SAFETY: tokens borrowed for the call.
        let status = unsafe { (self.f().session_prefill)(self.raw(), sequence, tokens.as_ptr(), tokens.len()) };
        self.lib().check(status).map(|_| ())
    }

    /// Appends one token to a sequence and computes its logits (row 0).
    pub fn decode(&mut self, sequence: u32, token: i32) -> Result<()> {
        // SAFETY: exclusive use of the session.
        self.lib().check(unsafe { (self.f().session_decode)(self.raw(), sequence, token) }).map(|_| ())
    }

    /// One forward pass over entries of several sequences (`colibri_session_batch`). With no
    /// entry asking for logits, the last entry's are computed.
    pub fn batch(&mut self, entries: &[BatchEntry]) -> Result<()> {
        let with_positions = entries.iter().any(|e| e.position.is_some());
        if with_positions && entries.iter().any(|e| e.position.is_none()) {
            return Err(Error::new(Status::INVALID_ARGUMENT, "either every batch entry gives a position or none does"));
        }
        let sequences: Vec<u32> = entries.iter().map(|e| e.sequence).collect();
        let positions: Vec<u32> = entries.iter().map(|e| e.position.unwrap_or(0)).collect();
        let tokens: Vec<i32> = entries.iter().map(|e| e.token).collect();
        let want: Vec<u32> = entries.iter().map(|e| e.want_logits as u32).collect();
        let any_logits = entries.iter().any(|e| e.want_logits);
        // SAFETY: arrays of entries.len() elements borrowed for the call.
        let status = unsafe {
            (self.f().session_batch)(
                self.raw(),
                sequences.as_ptr(),
                if with_positions { positions.as_ptr() } else { ptr::null() },
                tokens.as_ptr(),
                if any_logits { want.as_ptr() } else { ptr::null() },
                entries.len(),
            )
        };
        self.lib().check(status).map(|_| ())
    }

    /// Row `row` of the last forward pass's logits, borrowed from the session (valid until the
    /// next call that runs it, which needs `&mut self`).
    pub fn logits(&self, row: usize) -> Result<&[f32]> {
        let mut logits = ptr::null();
        let mut vocab = 0usize;
        // SAFETY: the pointer stays valid while self is not mutated.
        unsafe {
            self.lib().check((self.f().session_logits)(self.raw(), row, &mut logits, &mut vocab, ptr::null_mut()))?;
            Ok(core::slice::from_raw_parts(logits, vocab))
        }
    }

    /// The number of logit rows the last forward pass computed.
    pub fn logit_rows(&self) -> Result<usize> {
        let mut logits = ptr::null();
        let mut rows = 0usize;
        // SAFETY: live out parameters.
        unsafe {
            self.lib().check((self.f().session_logits)(self.raw(), 0, &mut logits, ptr::null_mut(), &mut rows))?;
        }
        Ok(rows)
    }

    /// Runs layer `layer`'s MoE block on `hidden` (`[rows, hidden_size]`); `routes` is a static
    /// routing table (`experts`, `weights`, each `[rows, top_k]`) or `None` for the router.
    pub fn moe_layer(&mut self, layer: u32, hidden: &[f32], routes: Option<(&[i32], &[f32])>) -> Result<Vec<f32>> {
        let info = self.model.info();
        let hs = info.hidden_size;
        if hs == 0 || hidden.len() % hs != 0 {
            return Err(Error::new(Status::INVALID_ARGUMENT, "hidden.len() is not a multiple of hidden_size"));
        }
        let rows = hidden.len() / hs;
        if let Some((e, w)) = routes {
            if e.len() != rows * info.top_k || w.len() != rows * info.top_k {
                return Err(Error::new(Status::INVALID_ARGUMENT, "routes must hold rows * top_k entries each"));
            }
        }
        let mut out = vec![0f32; hidden.len()];
        let (e, w) = routes.map_or((ptr::null(), ptr::null()), |(e, w)| (e.as_ptr(), w.as_ptr()));
        // SAFETY: every array has the size the header asks for.
        let status =
            unsafe { (self.f().session_moe_layer)(self.raw(), layer, hidden.as_ptr(), rows, e, w, out.as_mut_ptr()) };
        self.lib().check(status)?;
        Ok(out)
    }

    /// The session's counters.
    pub fn stats(&self) -> Result<Stats> {
        // SAFETY: live out parameter with struct_size set.
        unsafe {
            let mut s: sys::colibri_stats = core::mem::zeroed();
            s.struct_size = core::mem::size_of_val(&s) as u32;
            self.lib().check((self.f().session_get_stats)(self.raw(), &mut s))?;
            let stages = (0..(s.stage_count as usize).min(s.stage_ns.len()))
                .map(|i| StageTime {
                    name: static_str((self.f().stage_name)(i as u32)),
                    time: Duration::from_nanos(s.stage_ns[i]),
                })
                .collect();
            Ok(Stats {
                stages,
                weight_bytes_read: s.weight_bytes_read,
                tokens: s.tokens,
                forward_calls: s.forward_calls,
                non_finite_rows: s.non_finite_rows,
                expert_activations: s.expert_activations,
            })
        }
    }

    /// Zeroes the counters.
    pub fn reset_stats(&mut self) -> Result<()> {
        // SAFETY: exclusive use of the session.
        self.lib().check(unsafe { (self.f().session_reset_stats)(self.raw()) }).map(|_| ())
    }

    /// Generates from token ids, calling `on_piece` with each piece of text (complete UTF-8).
    /// Returning `ControlFlow::Break(())` stops the generation (finish reason
    /// [`FinishReason::Cancelled`], not an error). A panic in `on_piece` stops it too and is
    /// returned as an [`Error`] with [`Status::CALLBACK`].
    pub fn generate<F>(&mut self, prompt: &[i32], options: &GenerateOptions, mut on_piece: F) -> Result<GenerateResult>
    where
        F: FnMut(&str) -> ControlFlow<()>,
    {
        let c = CGenerateOptions::new(self.lib(), options)?;
        let mut state = PieceState { f: &mut on_piece, panic: None };
        // SAFETY: the options and state outlive the call; piece_trampoline matches
        // colibri_piece_fn and is only handed `state`.
        let (status, result) = unsafe {
            let mut result: sys::colibri_generate_result = core::mem::zeroed();
            result.struct_size = core::mem::size_of_val(&result) as u32;
            let status = (self.f().generate)(
                self.raw(),
                prompt.as_ptr(),
                prompt.len(),
                &c.options,
                Some(piece_trampoline),
                &mut state as *mut PieceState as *mut c_void,
                &mut result,
            );
            (status, result)
        };
        let checked = self.lib().check(status);
        if let Some(panic) = state.panic {
            return Err(Error::new(
                Status::CALLBACK,
                format!("the piece callback panicked: {}", panic_message(&*panic)),
            ));
        }
        checked?;
        Ok(GenerateResult::from_raw(&result))
    }

    /// [`Session::generate`] from text, tokenized with the tokenizer's special tokens (BOS).
    pub fn generate_text<F>(&mut self, prompt: &str, options: &GenerateOptions, on_piece: F) -> Result<GenerateResult>
    where
        F: FnMut(&str) -> ControlFlow<()>,
    {
        let ids = self.model.tokenize(prompt, TokenizeFlags::ADD_SPECIAL)?;
        self.generate(&ids, options, on_piece)
    }

    /// The pull form: processes the prompt now; the stream then yields pieces. The session is
    /// borrowed until the stream is dropped (dropping it early cancels the generation).
    pub fn stream(&mut self, prompt: &[i32], options: &GenerateOptions) -> Result<Stream<'_>> {
        let c = CGenerateOptions::new(self.lib(), options)?;
        let mut raw = ptr::null_mut();
        // SAFETY: options are borrowed until stream_open returns (as the header says).
        let status = unsafe { (self.f().stream_open)(self.raw(), prompt.as_ptr(), prompt.len(), &c.options, &mut raw) };
        self.lib().check(status)?;
        let raw = NonNull::new(raw).ok_or_else(|| Error::new(Status::INTERNAL, "stream_open returned NULL"))?;
        Ok(Stream { session: self, raw, done: false })
    }

    /// [`Session::stream`] from text, tokenized with special tokens.
    pub fn stream_text(&mut self, prompt: &str, options: &GenerateOptions) -> Result<Stream<'_>> {
        let ids = self.model.tokenize(prompt, TokenizeFlags::ADD_SPECIAL)?;
        self.stream(&ids, options)
    }
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session").field("model", &self.model).finish()
    }
}

// ---------------------------------------------------------------------------------------------
// Generation
// ---------------------------------------------------------------------------------------------

/// The sampling chain: penalties -> temperature -> top-k -> top-p -> min-p -> seeded draw.
/// `None` fields take the library's defaults (temperature 0.8, top-k 40, top-p 0.95, min-p
/// 0.05, penalties off, seed from the session).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SamplerOptions {
    /// >= 0; 0 = greedy.
    pub temperature: Option<f32>,
    /// 0 = off.
    pub top_k: Option<u32>,
    /// (0, 1]; 1 = off.
    pub top_p: Option<f32>,
    /// [0, 1]; 0 = off.
    pub min_p: Option<f32>,
    /// > 0; 1 = off.
    pub repetition_penalty: Option<f32>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    /// Tokens of history the penalties see; 0 = off.
    pub penalty_last_n: Option<u32>,
    /// `None`: the session's seed.
    pub seed: Option<u64>,
}

impl SamplerOptions {
    /// Always the most likely token (argmax, ties to the lower id).
    pub fn greedy() -> SamplerOptions {
        SamplerOptions { temperature: Some(0.0), ..SamplerOptions::default() }
    }
}

/// Options of [`Session::generate`] and [`Session::stream`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GenerateOptions {
    /// Tokens to generate at most (default 256).
    pub max_tokens: Option<u32>,
    /// Sequence slot to use (reset first).
    pub sequence: u32,
    /// Keep going past EOS tokens.
    pub ignore_eos: bool,
    /// `None`: the library's defaults.
    pub sampler: Option<SamplerOptions>,
    /// `None`: the model's EOS ids.
    pub eos_tokens: Option<Vec<i32>>,
    /// Text that ends generation (not part of the output).
    pub stop_strings: Vec<String>,
}

/// The C view of GenerateOptions; the pointers inside borrow the fields.
struct CGenerateOptions {
    options: sys::colibri_generate_options,
    _sampler: Box<sys::colibri_sampler_options>,
    _eos: Option<Vec<i32>>,
    _stops: Vec<CString>,
    _stop_ptrs: Vec<*const c_char>,
}

impl CGenerateOptions {
    fn new(lib: &Library, o: &GenerateOptions) -> Result<CGenerateOptions> {
        let f = &lib.functions;
        let stops: Vec<CString> = o.stop_strings.iter().map(|s| cstring("stop string", s)).collect::<Result<_>>()?;
        let stop_ptrs: Vec<*const c_char> = stops.iter().map(|s| s.as_ptr()).collect();
        let eos = o.eos_tokens.clone();
        // SAFETY: structs initialised by the library; the pointers borrow heap data owned by
        // the returned value (moving it does not move the heap buffers).
        unsafe {
            let mut sampler: Box<sys::colibri_sampler_options> = Box::new(core::mem::zeroed());
            lib.check((f.sampler_options_init)(&mut *sampler, core::mem::size_of::<sys::colibri_sampler_options>()))?;
            let mut options: sys::colibri_generate_options = core::mem::zeroed();
            lib.check((f.generate_options_init)(&mut options, core::mem::size_of_val(&options)))?;
            if let Some(s) = &o.sampler {
                let c = &mut *sampler;
                macro_rules! set {
                    ($field:ident) => {
                        if let Some(v) = s.$field {
                            c.$field = v;
                        }
                    };
                }
                set!(temperature);
                set!(top_k);
                set!(top_p);
                set!(min_p);
                set!(repetition_penalty);
                set!(presence_penalty);
                set!(frequency_penalty);
                set!(penalty_last_n);
                set!(seed);
                options.sampler = &*sampler;
            }
            if let Some(n) = o.max_tokens {
                options.max_tokens = n;
            }
            options.sequence = o.sequence;
            options.ignore_eos = o.ignore_eos as u32;
            if let Some(e) = &eos {
                options.eos_tokens = e.as_ptr();
                options.eos_token_count = e.len();
            }
            options.stop_strings = if stop_ptrs.is_empty() { ptr::null() } else { stop_ptrs.as_ptr() };
            options.stop_string_count = stop_ptrs.len();
            Ok(CGenerateOptions { options, _sampler: sampler, _eos: eos, _stops: stops, _stop_ptrs: stop_ptrs })
        }
    }
}

/// Why a generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// Still running (a stream's progress).
    None,
    /// max_tokens generated.
    Length,
    /// An end-of-sequence token was sampled.
    Eos,
    /// A stop string was generated.
    Stop,
    /// The callback stopped it; an engine request was cancelled.
    Cancelled,
    /// An engine request's timeout passed.
    Deadline,
    /// An engine request failed ([`Request::next_piece`] returned its error).
    Failed,
    /// A value this crate does not know.
    Other(u32),
}

/// How a generation ended, with counts and times.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenerateResult {
    pub finish_reason: FinishReason,
    pub prompt_tokens: u64,
    /// Sampled tokens, including a final EOS.
    pub generated_tokens: u64,
    pub prefill_time: Duration,
    pub decode_time: Duration,
}

impl FinishReason {
    fn from_raw(v: u32) -> FinishReason {
        match v {
            sys::COLIBRI_FINISH_NONE => FinishReason::None,
            sys::COLIBRI_FINISH_LENGTH => FinishReason::Length,
            sys::COLIBRI_FINISH_EOS => FinishReason::Eos,
            sys::COLIBRI_FINISH_STOP => FinishReason::Stop,
            sys::COLIBRI_FINISH_CANCELLED => FinishReason::Cancelled,
            sys::COLIBRI_FINISH_DEADLINE => FinishReason::Deadline,
            sys::COLIBRI_FINISH_ERROR => FinishReason::Failed,
            v => FinishReason::Other(v),
        }
    }
}

impl GenerateResult {
    fn from_raw(r: &sys::colibri_generate_result) -> GenerateResult {
        GenerateResult {
            finish_reason: FinishReason::from_raw(r.finish_reason),
            prompt_tokens: r.prompt_token_count,
            generated_tokens: r.generated_token_count,
            prefill_time: Duration::from_nanos(r.prefill_ns),
            decode_time: Duration::from_nanos(r.decode_ns),
        }
    }
}

struct PieceState<'a> {
    f: &'a mut dyn FnMut(&str) -> ControlFlow<()>,
    panic: Option<Box<dyn Any + Send>>,
}

unsafe extern "C" fn piece_trampoline(user: *mut c_void, piece: *const c_char, size: usize) -> i32 {
    // SAFETY: user is the PieceState of the running generate call; piece has size bytes.
    let state = unsafe { &mut *(user as *mut PieceState<'_>) };
    let bytes = unsafe { core::slice::from_raw_parts(piece.cast::<u8>(), size) };
    let text = String::from_utf8_lossy(bytes);
    // A panic must not unwind into libcolibri: catch it, stop, report it after the call.
    match catch_unwind(AssertUnwindSafe(|| (state.f)(&text))) {
        Ok(ControlFlow::Continue(())) => 0,
        Ok(ControlFlow::Break(())) => 1,
        Err(panic) => {
            state.panic = Some(panic);
            1
        }
    }
}

fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".to_string()
    }
}

/// A running generation in pull form ([`Session::stream`]). Iterating yields pieces; dropping
/// the stream ends the generation and frees the session.
pub struct Stream<'s> {
    session: &'s mut Session,
    raw: NonNull<sys::colibri_stream>,
    done: bool,
}

// SAFETY: the stream follows its session's discipline (one thread at a time); it holds the
// only (&mut) access to the session.
unsafe impl Send for Stream<'_> {}

impl Stream<'_> {
    fn lib(&self) -> &Library {
        self.session.lib()
    }

    /// The next piece of text, borrowed until the next call on the stream; `Ok(None)` when the
    /// generation has ended. After an error the stream is finished.
    pub fn next_piece(&mut self) -> Result<Option<&str>> {
        if self.done {
            return Ok(None);
        }
        let mut piece = ptr::null();
        let mut size = 0usize;
        // SAFETY: live out parameters; the piece stays valid until the next call on the stream.
        let status = unsafe { (self.session.f().stream_next)(self.raw.as_ptr(), &mut piece, &mut size) };
        if status == sys::COLIBRI_DONE as i32 {
            self.done = true;
            return Ok(None);
        }
        if let Err(e) = self.lib().check(status) {
            self.done = true;
            return Err(e);
        }
        let bytes = unsafe { core::slice::from_raw_parts(piece.cast::<u8>(), size) };
        // Pieces are complete UTF-8 (colibri.h); be defensive anyway.
        Ok(Some(core::str::from_utf8(bytes).unwrap_or("\u{FFFD}")))
    }

    /// The ids generated so far (including a final EOS).
    pub fn tokens(&self) -> Result<Vec<i32>> {
        let f = &self.session.f();
        grow(self.lib(), 64, |buf, cap, size| unsafe {
            // SAFETY: buf has cap elements.
            (f.stream_tokens)(self.raw.as_ptr(), buf, cap, size)
        }, 0)
    }

    /// Progress so far ([`FinishReason::None`] while running).
    pub fn result(&self) -> Result<GenerateResult> {
        // SAFETY: live out parameter with struct_size set.
        unsafe {
            let mut r: sys::colibri_generate_result = core::mem::zeroed();
            r.struct_size = core::mem::size_of_val(&r) as u32;
            self.lib().check((self.session.f().stream_get_result)(self.raw.as_ptr(), &mut r))?;
            Ok(GenerateResult::from_raw(&r))
        }
    }
}

impl Iterator for Stream<'_> {
    type Item = Result<String>;
    fn next(&mut self) -> Option<Result<String>> {
        self.next_piece().map(|p| p.map(str::to_string)).transpose()
    }
}

impl Drop for Stream<'_> {
    fn drop(&mut self) {
        // SAFETY: the stream is closed once; the session is still alive (borrowed).
        unsafe { (self.session.f().stream_close)(self.raw.as_ptr()) }
    }
}


// ---------------------------------------------------------------------------------------------
// Serving engine
// ---------------------------------------------------------------------------------------------

/// Options of [`Model::engine`]; `None` fields take the library's defaults.
#[derive(Clone, Debug, Default)]
pub struct EngineOptions {
    /// Requests running at once (default 8).
    pub max_sequences: Option<u32>,
    /// Tokens per request, prompt + output (default min(max_position_embeddings, 4096)).
    pub context_length: Option<u32>,
    /// Tokens per scheduler step: decode tokens + prefill chunks (default 256).
    pub step_tokens: Option<u32>,
    /// Positions per KV block (default 16).
    pub block_tokens: Option<u32>,
    /// Requests that may wait for admission (default 64).
    pub queue_capacity: Option<u32>,
    /// The KV pool in bytes (default: max_sequences whole contexts).
    pub kv_budget_bytes: Option<u64>,
    /// Do not reuse cached prefix blocks of earlier requests.
    pub disable_prefix_cache: bool,
    /// Threads, kernels, KV dtype, policies, seed (the default of requests whose sampler seed is
    /// `None`); its sizing fields are ignored.
    pub session: SessionOptions,
}

struct EngineInner {
    model: Model,
    raw: NonNull<sys::colibri_engine>,
}

// SAFETY: colibri_request_submit and colibri_engine_get_stats are thread-safe (colibri.h);
// colibri_engine_free runs in Drop, when no other reference exists.
unsafe impl Send for EngineInner {}
unsafe impl Sync for EngineInner {}

impl Drop for EngineInner {
    fn drop(&mut self) {
        // SAFETY: the last reference to the engine; requests hold none (they outlive it).
        unsafe { (self.model.lib().functions.engine_free)(self.raw.as_ptr()) }
    }
}

/// Serves many concurrent requests on one model with continuous batching (`colibri_engine`):
/// each scheduler step runs one forward pass over every running request, so each active
/// expert is read once per step for all of them; full KV blocks of finished requests stay
/// cached, so a request repeating a cached prefix (the next chat turn) prefills only the rest.
/// `Send + Sync` and cheap to clone: submit from any thread. Dropping the last clone cancels
/// what is unfinished; the [`Request`]s stay readable.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<EngineInner>,
}

/// The engine's counters (`colibri_engine_stats`), as of the last scheduler step.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    pub queue_depth: u64,
    pub active_sequences: u64,
    pub submitted: u64,
    pub rejected_busy: u64,
    pub finished: u64,
    pub steps: u64,
    pub decode_tokens: u64,
    pub prefill_tokens: u64,
    pub prefix_hit_tokens: u64,
    pub preemptions: u64,
    pub max_batch_sequences: u64,
    /// Steps by requests in the step: 1, 2, 3-4, 5-8, 9-16, 17-32, 33-64, 65-128, more.
    pub batch_histogram: Vec<u64>,
    pub kv_block_tokens: u32,
    pub kv_blocks: u64,
    pub kv_blocks_in_use: u64,
    pub kv_blocks_cached: u64,
    pub kv_evictions: u64,
}

impl Model {
    /// Creates a serving engine on the model and starts its scheduler thread
    /// (`colibri_engine_create`).
    pub fn engine(&self, options: &EngineOptions) -> Result<Engine> {
        let f = &self.lib().functions;
        let session = self.session_options_raw(&options.session)?;
        // SAFETY: structs initialised by the library, plain fields set; `session` outlives the call.
        unsafe {
            let mut o: sys::colibri_engine_options = core::mem::zeroed();
            self.lib().check((f.engine_options_init)(&mut o, core::mem::size_of_val(&o)))?;
            let set = |dst: &mut u32, v: Option<u32>| {
                if let Some(v) = v {
                    *dst = v;
                }
            };
            set(&mut o.max_sequences, options.max_sequences);
            set(&mut o.context_length, options.context_length);
            set(&mut o.step_tokens, options.step_tokens);
            set(&mut o.block_tokens, options.block_tokens);
            set(&mut o.queue_capacity, options.queue_capacity);
            if let Some(b) = options.kv_budget_bytes {
                o.kv_budget_bytes = b;
            }
            o.prefix_cache = (!options.disable_prefix_cache) as u32;
            o.session = &session;
            let mut raw = ptr::null_mut();
            self.lib().check((f.engine_create)(self.raw(), &o, &mut raw))?;
            let raw = NonNull::new(raw).ok_or_else(|| Error::new(Status::INTERNAL, "engine_create returned NULL"))?;
            Ok(Engine { inner: Arc::new(EngineInner { model: self.clone(), raw }) })
        }
    }
}

/// A conversation and its options in C form; the raw structs point into the owned strings.
struct CChat {
    _strings: Vec<(CString, CString)>,
    _names: Vec<CString>,
    _values: Vec<CString>,
    _name_ptrs: Vec<*const c_char>,
    _value_ptrs: Vec<*const c_char>,
    _template: Option<CString>,
    messages: Vec<sys::colibri_chat_message>,
    options: sys::colibri_chat_options,
}

impl CChat {
    fn new(lib: &Library, messages: &[ChatMessage], options: &ChatOptions) -> Result<CChat> {
        let strings: Vec<(CString, CString)> = messages
            .iter()
            .map(|m| Ok((cstring("chat role", &m.role)?, cstring("chat content", &m.content)?)))
            .collect::<Result<_>>()?;
        let cmessages: Vec<sys::colibri_chat_message> = strings
            .iter()
            .map(|(r, c)| sys::colibri_chat_message { role: r.as_ptr(), content: c.as_ptr() })
            .collect();
        let names: Vec<CString> =
            options.variables.iter().map(|(n, _)| cstring("variable name", n)).collect::<Result<_>>()?;
        let values: Vec<CString> =
            options.variables.iter().map(|(_, v)| cstring("variable value", v)).collect::<Result<_>>()?;
        let name_ptrs: Vec<*const c_char> = names.iter().map(|s| s.as_ptr()).collect();
        let value_ptrs: Vec<*const c_char> = values.iter().map(|s| s.as_ptr()).collect();
        let template = options.template.as_deref().map(|t| cstring("template", t)).transpose()?;
        // SAFETY: a zeroed options struct is what init expects; the pointers set below borrow
        // buffers owned by the returned value (a Vec's or CString's heap data does not move).
        let mut o: sys::colibri_chat_options = unsafe { core::mem::zeroed() };
        lib.check(unsafe { (lib.functions.chat_options_init)(&mut o, core::mem::size_of_val(&o)) })?;
        o.add_generation_prompt = options.add_generation_prompt as u32;
        o.template_text = template.as_ref().map_or(ptr::null(), |t| t.as_ptr());
        o.variable_names = name_ptrs.as_ptr();
        o.variable_values = value_ptrs.as_ptr();
        o.variable_count = name_ptrs.len();
        Ok(CChat {
            _strings: strings,
            _names: names,
            _values: values,
            _name_ptrs: name_ptrs,
            _value_ptrs: value_ptrs,
            _template: template,
            messages: cmessages,
            options: o,
        })
    }
}

/// Options of [`Engine::submit`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RequestOptions {
    /// Tokens to generate at most (default 256).
    pub max_tokens: Option<u32>,
    /// Keep going past EOS tokens.
    pub ignore_eos: bool,
    /// `None`: the library's defaults (the engine's seed).
    pub sampler: Option<SamplerOptions>,
    /// `None`: the model's EOS ids.
    pub eos_tokens: Option<Vec<i32>>,
    /// Text that ends the output (not part of it).
    pub stop_strings: Vec<String>,
    /// The request ends with [`FinishReason::Deadline`] this long after submission.
    pub timeout: Option<Duration>,
    /// Record each sampled token's log-probability ([`Request::logprobs`]).
    pub logprobs: bool,
    /// Also record the most likely tokens of each step (0..=[`MAX_TOP_LOGPROBS`]); implies
    /// `logprobs`.
    pub top_logprobs: u32,
}

/// The most alternatives [`RequestOptions::top_logprobs`] may ask for.
pub const MAX_TOP_LOGPROBS: u32 = sys::COLIBRI_MAX_TOP_LOGPROBS;

/// A token and its log-probability (natural log, <= 0) under the model's raw distribution:
/// log_softmax of the logits before the sampler's penalties, temperature and truncation
/// (vLLM's default "raw logprobs", OpenAI's `logprobs`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TokenLogprob {
    pub token: i32,
    pub logprob: f32,
}

impl Engine {
    fn lib(&self) -> &Library {
        self.inner.model.lib()
    }

    /// The model the engine serves.
    pub fn model(&self) -> &Model {
        &self.inner.model
    }

    /// Queues a generation from token ids (`colibri_request_submit`). A full queue is an error
    /// with [`Status::BUSY`], returned at once.
    pub fn submit(&self, prompt: &[i32], options: &RequestOptions) -> Result<Request> {
        let f = &self.lib().functions;
        // SAFETY: the prompt is borrowed for the call.
        self.submit_with(options, |o, raw| unsafe {
            (f.request_submit)(self.inner.raw.as_ptr(), prompt.as_ptr(), prompt.len(), o, raw)
        })
    }

    /// Renders `messages` with the model's chat template (`chat` as for [`Model::chat_render`]),
    /// tokenizes them as the template expects and queues the generation
    /// (`colibri_request_submit_chat`): the same request as rendering, tokenizing with
    /// [`TokenizeFlags::PARSE_SPECIAL`] and [`Engine::submit`]. Send the whole history each
    /// turn: its cached prefix is not prefilled again.
    pub fn submit_chat(&self, messages: &[ChatMessage], chat: &ChatOptions, options: &RequestOptions) -> Result<Request> {
        let f = &self.lib().functions;
        let c = CChat::new(self.lib(), messages, chat)?;
        // SAFETY: c's pointers borrow its own buffers, which outlive the call.
        self.submit_with(options, |o, raw| unsafe {
            (f.request_submit_chat)(self.inner.raw.as_ptr(), c.messages.as_ptr(), c.messages.len(), &c.options, o, raw)
        })
    }

    /// Converts `options` and runs `call` (a submit function) with them.
    fn submit_with(
        &self,
        options: &RequestOptions,
        call: impl FnOnce(&sys::colibri_request_options, &mut *mut sys::colibri_request) -> i32,
    ) -> Result<Request> {
        let g = CGenerateOptions::new(
            self.lib(),
            &GenerateOptions {
                max_tokens: options.max_tokens,
                sequence: 0,
                ignore_eos: options.ignore_eos,
                sampler: options.sampler.clone(),
                eos_tokens: options.eos_tokens.clone(),
                stop_strings: options.stop_strings.clone(),
            },
        )?;
        let f = &self.lib().functions;
        // SAFETY: the request options borrow g's buffers, which live until the call returns.
        unsafe {
            let mut o: sys::colibri_request_options = core::mem::zeroed();
            self.lib().check((f.request_options_init)(&mut o, core::mem::size_of_val(&o)))?;
            o.max_tokens = g.options.max_tokens;
            o.ignore_eos = g.options.ignore_eos;
            o.sampler = g.options.sampler;
            o.eos_tokens = g.options.eos_tokens;
            o.eos_token_count = g.options.eos_token_count;
            o.stop_strings = g.options.stop_strings;
            o.stop_string_count = g.options.stop_string_count;
            if let Some(t) = options.timeout {
                o.timeout_ns = u64::try_from(t.as_nanos()).unwrap_or(u64::MAX).max(1);
            }
            o.logprobs = u32::from(options.logprobs);
            o.top_logprobs = options.top_logprobs;
            let mut raw = ptr::null_mut();
            self.lib().check(call(&o, &mut raw))?;
            let raw = NonNull::new(raw).ok_or_else(|| Error::new(Status::INTERNAL, "submit returned NULL"))?;
            Ok(Request { inner: Arc::new(RequestInner { lib: self.inner.model.inner.lib.clone(), raw }), done: false })
        }
    }

    /// Tokenizes `prompt` (with the tokenizer's special tokens) and submits it.
    pub fn submit_text(&self, prompt: &str, options: &RequestOptions) -> Result<Request> {
        let ids = self.inner.model.tokenize(prompt, TokenizeFlags::ADD_SPECIAL)?;
        self.submit(&ids, options)
    }

    /// The engine's counters.
    pub fn stats(&self) -> Result<EngineStats> {
        // SAFETY: live out parameter with struct_size set.
        unsafe {
            let mut s: sys::colibri_engine_stats = core::mem::zeroed();
            s.struct_size = core::mem::size_of_val(&s) as u32;
            self.lib().check((self.lib().functions.engine_get_stats)(self.inner.raw.as_ptr(), &mut s))?;
            Ok(EngineStats {
                queue_depth: s.queue_depth,
                active_sequences: s.active_sequences,
                submitted: s.submitted_count,
                rejected_busy: s.rejected_busy_count,
                finished: s.finished_count,
                steps: s.step_count,
                decode_tokens: s.decode_token_count,
                prefill_tokens: s.prefill_token_count,
                prefix_hit_tokens: s.prefix_hit_token_count,
                preemptions: s.preemption_count,
                max_batch_sequences: s.max_batch_sequences,
                batch_histogram: s.batch_histogram.to_vec(),
                kv_block_tokens: s.kv_block_tokens,
                kv_blocks: s.kv_block_count,
                kv_blocks_in_use: s.kv_blocks_in_use,
                kv_blocks_cached: s.kv_blocks_cached,
                kv_evictions: s.kv_eviction_count,
            })
        }
    }
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Engine").field("model", &self.inner.model).finish()
    }
}

struct RequestInner {
    lib: Arc<Library>,
    raw: NonNull<sys::colibri_request>,
}

// SAFETY: colibri_request_cancel, _get_result, _tokens and _logprobs are thread-safe (colibri.h);
// colibri_request_next is only called through `&mut Request` (one thread at a time); the free
// runs in Drop, when no other reference exists.
unsafe impl Send for RequestInner {}
unsafe impl Sync for RequestInner {}

impl Drop for RequestInner {
    fn drop(&mut self) {
        // SAFETY: the last reference; freeing cancels an unfinished request.
        unsafe { (self.lib.functions.request_free)(self.raw.as_ptr()) }
    }
}

/// One submitted generation: iterate it for its pieces (blocking), or poll with
/// [`Request::next_piece`]. `Send + Sync`; [`Request::canceller`] gives a handle that cancels
/// it from another thread while this one waits. Dropping it cancels an unfinished request.
pub struct Request {
    inner: Arc<RequestInner>,
    done: bool,
}

/// Cancels its request from any thread (`colibri_request_cancel`); cheap to clone.
#[derive(Clone)]
pub struct RequestCanceller {
    inner: Arc<RequestInner>,
}

impl RequestCanceller {
    /// Ends the request at the engine's next step (queued, prefilling or decoding).
    pub fn cancel(&self) -> Result<()> {
        // SAFETY: a live request handle; the call is thread-safe.
        let status = unsafe { (self.inner.lib.functions.request_cancel)(self.inner.raw.as_ptr()) };
        self.inner.lib.check(status).map(|_| ())
    }
}

/// A request's progress (`colibri_request_result`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestResult {
    /// [`FinishReason::None`] while it runs.
    pub finish_reason: FinishReason,
    pub prompt_tokens: u64,
    /// Sampled tokens, including a final EOS.
    pub generated_tokens: u64,
    /// Prompt tokens taken from the prefix cache.
    pub prefix_hit_tokens: u64,
    /// Times it gave its KV blocks back and was recomputed.
    pub preemptions: u64,
    pub queue_time: Duration,
    pub time_to_first_token: Duration,
    pub decode_time: Duration,
}

impl Request {
    fn lib(&self) -> &Library {
        &self.inner.lib
    }

    /// Waits up to `timeout` (`None`: without limit) for the next piece of text:
    /// `Ok(Some(piece))`, `Ok(None)` when the request has ended, or an error with
    /// [`Status::PENDING`] when the wait ended first (the request goes on). A failed request
    /// returns its error once, then `Ok(None)`.
    pub fn next_piece(&mut self, timeout: Option<Duration>) -> Result<Option<String>> {
        if self.done {
            return Ok(None);
        }
        let wait = timeout.map_or(-1, |t| i64::try_from(t.as_nanos()).unwrap_or(i64::MAX));
        let mut piece = ptr::null();
        let mut size = 0usize;
        // SAFETY: live out parameters; the piece is copied before the next call on the request.
        let status = unsafe { (self.lib().functions.request_next)(self.inner.raw.as_ptr(), wait, &mut piece, &mut size) };
        if status == sys::COLIBRI_DONE as i32 {
            self.done = true;
            return Ok(None);
        }
        if status == sys::COLIBRI_PENDING as i32 {
            return Err(Error::new(Status::PENDING, "no piece within the timeout"));
        }
        if let Err(e) = self.lib().check(status) {
            self.done = true;
            return Err(e);
        }
        let bytes = unsafe { core::slice::from_raw_parts(piece.cast::<u8>(), size) };
        Ok(Some(String::from_utf8_lossy(bytes).into_owned()))
    }

    /// Ends the request at the engine's next step.
    pub fn cancel(&self) -> Result<()> {
        self.canceller().cancel()
    }

    /// A handle that cancels this request from another thread.
    pub fn canceller(&self) -> RequestCanceller {
        RequestCanceller { inner: self.inner.clone() }
    }

    /// The ids generated so far (including a final EOS).
    pub fn tokens(&self) -> Result<Vec<i32>> {
        let f = &self.lib().functions;
        grow(self.lib(), 64, |buf, cap, size| unsafe {
            // SAFETY: buf has cap elements.
            (f.request_tokens)(self.inner.raw.as_ptr(), buf, cap, size)
        }, 0)
    }

    /// The log-probability of generated token `index` (from 0, below `tokens().len()`) and the
    /// [`RequestOptions::top_logprobs`] most likely tokens of that step, most likely first. A
    /// request submitted without logprobs gives [`Status::BAD_STATE`].
    pub fn logprobs(&self, index: usize) -> Result<(TokenLogprob, Vec<TokenLogprob>)> {
        let mut chosen = sys::colibri_token_logprob { token: -1, logprob: 0.0 };
        let mut top = [sys::colibri_token_logprob { token: -1, logprob: 0.0 }; MAX_TOP_LOGPROBS as usize];
        let mut count = 0usize;
        // SAFETY: live out parameters; top has MAX_TOP_LOGPROBS elements; the call is thread-safe.
        let status = unsafe {
            (self.lib().functions.request_logprobs)(
                self.inner.raw.as_ptr(),
                index,
                &mut chosen,
                top.as_mut_ptr(),
                top.len(),
                &mut count,
            )
        };
        self.lib().check(status)?;
        let convert = |t: &sys::colibri_token_logprob| TokenLogprob { token: t.token, logprob: t.logprob };
        Ok((convert(&chosen), top[..count.min(top.len())].iter().map(convert).collect()))
    }

    /// Progress so far.
    pub fn result(&self) -> Result<RequestResult> {
        // SAFETY: live out parameter with struct_size set.
        unsafe {
            let mut r: sys::colibri_request_result = core::mem::zeroed();
            r.struct_size = core::mem::size_of_val(&r) as u32;
            self.lib().check((self.lib().functions.request_get_result)(self.inner.raw.as_ptr(), &mut r))?;
            Ok(RequestResult {
                finish_reason: FinishReason::from_raw(r.finish_reason),
                prompt_tokens: r.prompt_token_count,
                generated_tokens: r.generated_token_count,
                prefix_hit_tokens: r.prefix_hit_token_count,
                preemptions: r.preemption_count,
                queue_time: Duration::from_nanos(r.queue_ns),
                time_to_first_token: Duration::from_nanos(r.time_to_first_token_ns),
                decode_time: Duration::from_nanos(r.decode_ns),
            })
        }
    }
}

impl fmt::Debug for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Request").field("done", &self.done).finish()
    }
}

impl Iterator for Request {
    type Item = Result<String>;
    /// The next piece, waiting as long as it takes; `None` at the end.
    fn next(&mut self) -> Option<Result<String>> {
        self.next_piece(None).transpose()
    }
}

// ---------------------------------------------------------------------------------------------
// Unit tests that need no library: layouts against capi/abi/layout.txt, statuses.
// ---------------------------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field of every #[repr(C)] struct has the offset and size of capi/abi/layout.txt
    /// (the ABI baseline the C checks hold colibri.h to); bindgen's own layout tests (in sys)
    /// compare the same structs with clang's view of the header.
    #[test]
    fn layouts_match_the_abi_baseline() {
        let path = std::env::var_os("COLIBRI_ABI_LAYOUT")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../capi/abi/layout.txt"));
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(_) => {
                eprintln!("skipped: {} not found (not inside the Colibri tree)", path.display());
                return;
            }
        };
        let rust = sys::layout::layout();
        let mut seen = 0;
        for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let (st, field) = (cols[0], cols[1]);
            let entry = rust.iter().find(|(s, f, _, _)| *s == st && *f == field);
            let &(_, _, offset, size) = entry.unwrap_or_else(|| {
                panic!("{st}.{field} of layout.txt is missing in the Rust declarations (run regen-sys.sh)")
            });
            if field == "sizeof" {
                assert_eq!(offset, cols[2].parse::<usize>().unwrap(), "sizeof {st}");
            } else {
                assert_eq!(offset, cols[2].parse::<usize>().unwrap(), "offset of {st}.{field}");
                assert_eq!(size, cols[3].parse::<usize>().unwrap(), "size of {st}.{field}");
            }
            seen += 1;
        }
        assert_eq!(seen, rust.len(), "the Rust declarations have fields layout.txt does not list");
    }

    #[test]
    fn status_names_and_errors() {
        assert_eq!(Status::NOT_AN_IMAGE.name(), "not a colibri image");
        assert!(Status::CORRUPT.is_error() && !Status::DONE.is_error());
        assert_eq!(Status(-1000).name(), "unknown status");
        let e = Error::new(Status::IO, "no such file");
        assert_eq!(e.to_string(), "colibri: no such file (input/output error)");
    }

    #[test]
    fn thread_traits() {
        fn send_sync<T: Send + Sync>() {}
        fn send<T: Send>() {}
        send_sync::<Model>();
        send_sync::<Library>();
        send::<Session>();
        send::<Stream<'static>>();
        send_sync::<Engine>();
        send_sync::<Request>();
        send_sync::<RequestCanceller>();
    }

    #[test]
    fn function_table_covers_the_exported_symbols() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../capi/abi/symbols.txt");
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(_) => {
                eprintln!("skipped: {} not found", path.display());
                return;
            }
        };
        let exported: Vec<&str> = text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).collect();
        for name in &exported {
            assert!(sys::FUNCTION_NAMES.contains(name), "{name} is exported but not in the table");
        }
        assert_eq!(exported.len(), sys::FUNCTION_NAMES.len());
    }
}
