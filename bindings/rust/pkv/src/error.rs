//! `Status` (every `pkv_status` error) and `Error` (a status plus pkv's message).
use std::fmt;

use pkv_sys as sys;

/// A failed pkv call's status: one variant per `PKV_ERR_*` of `pkv.h`, plus `Unknown` for a
/// value this binding does not know (a newer library) and `Load` for a library that could not be
/// loaded (not a pkv status: nothing was called).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Status {
    InvalidArgument,
    NoSpace,
    NotFound,
    State,
    Unsupported,
    NoDevice,
    OutOfMemory,
    Device,
    Internal,
    Store,
    Events,
    Unknown(i32),
    Load,
}

impl Status {
    /// Every pkv error status, in the header's order.
    pub const ALL: [Status; 11] = [
        Status::InvalidArgument,
        Status::NoSpace,
        Status::NotFound,
        Status::State,
        Status::Unsupported,
        Status::NoDevice,
        Status::OutOfMemory,
        Status::Device,
        Status::Internal,
        Status::Store,
        Status::Events,
    ];

    /// The status of a `pkv_status` value; `None` for `PKV_OK`.
    pub fn from_code(code: i32) -> Option<Status> {
        Some(match code {
            sys::PKV_OK => return None,
            sys::PKV_ERR_INVALID_ARGUMENT => Status::InvalidArgument,
            sys::PKV_ERR_NO_SPACE => Status::NoSpace,
            sys::PKV_ERR_NOT_FOUND => Status::NotFound,
            sys::PKV_ERR_STATE => Status::State,
            sys::PKV_ERR_UNSUPPORTED => Status::Unsupported,
            sys::PKV_ERR_NO_DEVICE => Status::NoDevice,
            sys::PKV_ERR_OUT_OF_MEMORY => Status::OutOfMemory,
            sys::PKV_ERR_DEVICE => Status::Device,
            sys::PKV_ERR_INTERNAL => Status::Internal,
            sys::PKV_ERR_STORE => Status::Store,
            sys::PKV_ERR_EVENTS => Status::Events,
            other => Status::Unknown(other),
        })
    }

    /// The `pkv_status` value; `None` for `Load`, which is not one.
    pub fn code(self) -> Option<i32> {
        Some(match self {
            Status::InvalidArgument => sys::PKV_ERR_INVALID_ARGUMENT,
            Status::NoSpace => sys::PKV_ERR_NO_SPACE,
            Status::NotFound => sys::PKV_ERR_NOT_FOUND,
            Status::State => sys::PKV_ERR_STATE,
            Status::Unsupported => sys::PKV_ERR_UNSUPPORTED,
            Status::NoDevice => sys::PKV_ERR_NO_DEVICE,
            Status::OutOfMemory => sys::PKV_ERR_OUT_OF_MEMORY,
            Status::Device => sys::PKV_ERR_DEVICE,
            Status::Internal => sys::PKV_ERR_INTERNAL,
            Status::Store => sys::PKV_ERR_STORE,
            Status::Events => sys::PKV_ERR_EVENTS,
            Status::Unknown(code) => code,
            Status::Load => return None,
        })
    }
}

/// A failed call: its status and the message pkv left (`pkv_last_error`), or the binding's own
/// message for what it refuses before calling pkv (a slice too short, a missing symbol).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    status: Status,
    message: String,
}

impl Error {
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
        match self.status.code() {
            Some(code) => write!(f, "pkv error {} ({:?}): {}", code, self.status, self.message),
            None => write!(f, "pkv: {}", self.message),
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T, E = Error> = std::result::Result<T, E>;
