//! Loading libpkv (dlopen through libloading), the ABI check, and the helpers every call uses.
use std::ffi::{CStr, OsStr};
use std::os::raw::c_char;
use std::sync::Mutex;

use pkv_sys as sys;

use crate::error::{Error, Result, Status};

/// A loaded libpkv whose ABI matched. Loaded libraries stay loaded until the process exits
/// (`&'static`): pkv's worker threads and the engines' handles must never outlive the code.
pub struct Library {
    raw: sys::PkvLib,
}

static DEFAULT: Mutex<Option<Result<&'static Library>>> = Mutex::new(None);

/// The environment variable naming the library `library()` loads (a full path).
pub const LIBRARY_ENV: &str = "PKV_LIBRARY";

/// The library named by the environment variable `PKV_LIBRARY` (a full path), else
/// `libpkv.so.1` found by the dynamic loader (`LD_LIBRARY_PATH`, then the system's library
/// directories: where `meson install` puts it), loaded on first use. Every later call returns
/// the same result. A failure is `Status::Load`, naming the library and `PKV_LIBRARY`.
pub fn library() -> Result<&'static Library> {
    let mut slot = DEFAULT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    slot.get_or_insert_with(|| match std::env::var_os(LIBRARY_ENV) {
        Some(path) if !path.is_empty() => Library::open(&path).map_err(|e| {
            Error::new(
                Status::Load,
                format!(
                    "{} (the path in ${}; unset it to search the dynamic loader's path)",
                    e.message(),
                    LIBRARY_ENV
                ),
            )
        }),
        _ => Library::open(sys::DEFAULT_LIBRARY).map_err(|e| {
            Error::new(
                Status::Load,
                format!(
                    "{}. Install libpkv (meson install, then ldconfig), or set {} to its full \
                     path, or add its directory to LD_LIBRARY_PATH",
                    e.message(),
                    LIBRARY_ENV
                ),
            )
        }),
    })
    .clone()
}

impl std::fmt::Debug for Library {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Library {{ version: {}, abi: {} }}", self.version(), self.abi_version())
    }
}

impl Library {
    /// Loads the library at `path` and checks `pkv_abi_version() == PKV_ABI_VERSION` right away.
    pub fn open(path: impl AsRef<OsStr>) -> Result<&'static Library> {
        let path = path.as_ref();
        let shown = path.to_string_lossy();
        // SAFETY: loading runs the library's initializers; libpkv's do no CUDA or I/O work.
        let raw = unsafe { sys::PkvLib::new(path) }.map_err(|e| {
            let detail = e.to_string(); // dlerror(): "PATH: why", usually
            let why = detail.strip_prefix(&format!("{}: ", shown)).unwrap_or(&detail);
            Error::new(Status::Load, format!("cannot load {}: {}", shown, why))
        })?;
        let abi = match &raw.pkv_abi_version {
            Ok(f) => unsafe { f() },
            Err(e) => return Err(Error::new(Status::Load, format!("{} is not libpkv: {}", shown, e))),
        };
        if abi != sys::PKV_ABI_VERSION {
            return Err(Error::new(
                Status::Load,
                format!("{} has ABI {}, this binding needs {}", shown, abi, sys::PKV_ABI_VERSION),
            ));
        }
        for (name, found) in [
            ("pkv_version", raw.pkv_version.is_ok()),
            ("pkv_status_string", raw.pkv_status_string.is_ok()),
            ("pkv_last_error", raw.pkv_last_error.is_ok()),
        ] {
            if !found {
                return Err(Error::new(Status::Load, format!("{} lacks {}", shown, name)));
            }
        }
        Ok(Box::leak(Box::new(Library { raw })))
    }

    /// The raw function table (`pkv-sys`), for calls this crate does not wrap.
    pub fn raw(&self) -> &sys::PkvLib {
        &self.raw
    }

    /// `pkv_version()`: MAJOR*10000 + MINOR*100 + PATCH.
    pub fn version(&self) -> u32 {
        unsafe { self.raw.pkv_version() }
    }

    /// `pkv_abi_version()`, checked at load time to equal `PKV_ABI_VERSION`.
    pub fn abi_version(&self) -> u32 {
        unsafe { self.raw.pkv_abi_version() }
    }

    /// `pkv_status_string(code)`: "unknown status" for a value pkv does not know.
    pub fn status_string(&self, code: i32) -> String {
        unsafe { text(self.raw.pkv_status_string(code)) }
    }

    /// `Ok(())` for `PKV_OK`, else the status with this thread's `pkv_last_error()`. Call it
    /// right after the failed call, before any other pkv call on this thread.
    pub fn check(&self, code: i32) -> Result<()> {
        match Status::from_code(code) {
            None => Ok(()),
            Some(status) => Err(Error::new(status, unsafe { text(self.raw.pkv_last_error()) })),
        }
    }
}

/// Copies a C string pkv returned (never NULL by contract; "" if it were).
pub(crate) unsafe fn text(s: *const c_char) -> String {
    if s.is_null() {
        return String::new();
    }
    CStr::from_ptr(s).to_string_lossy().into_owned()
}

/// A length as the `uint32_t` count pkv takes.
pub(crate) fn count(len: usize, what: &str) -> Result<u32> {
    u32::try_from(len).map_err(|_| {
        Error::new(Status::InvalidArgument, format!("{}: {} elements do not fit in u32", what, len))
    })
}

/// An all-zero struct of pkv-sys with `struct_size` set: the versioned structs' initial state.
macro_rules! sized {
    ($t:ty) => {{
        // SAFETY: pkv's structs are integers, floats and raw pointers: all-zero is valid.
        let mut s: $t = unsafe { std::mem::zeroed() };
        s.struct_size = std::mem::size_of::<$t>() as u32;
        s
    }};
}

/// Calls `pkv_*` through the library's table and turns its status into a `Result<()>`; a symbol
/// the loaded library lacks (older than the header) is `Status::Unsupported`. The call is
/// unsafe: use it inside `unsafe { }` with the reason its pointers are valid.
macro_rules! call {
    ($lib:expr, $name:ident($($arg:expr),* $(,)?)) => {{
        let lib: &$crate::library::Library = $lib;
        match lib.raw().$name.as_ref() {
            Ok(f) => {
                let code = f($($arg),*);
                lib.check(code)
            }
            Err(_) => Err($crate::error::Error::new(
                $crate::error::Status::Unsupported,
                concat!("the loaded libpkv has no ", stringify!($name)),
            )),
        }
    }};
}

/// An enum over some of pkv.h's codes, with `code()` and `from_code()` (`None` for another).
macro_rules! codes {
    ($(#[$doc:meta])* $name:ident: $t:ty { $($(#[$vdoc:meta])* $variant:ident = $code:path,)* }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vdoc])* $variant,)* }
        impl $name {
            pub fn code(self) -> $t {
                (match self { $($name::$variant => $code,)* }) as $t
            }
            pub fn from_code(code: $t) -> Option<$name> {
                [$($name::$variant,)*].into_iter().find(|v| v.code() == code)
            }
        }
    };
}

pub(crate) use {call, codes, sized};
