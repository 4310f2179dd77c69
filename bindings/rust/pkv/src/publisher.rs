//! KV events on the wire (pkv 0.3): `EventPublisherParams` (`pkv_event_publisher_params`), given
//! to an engine through `Params::event_publisher`, and `EventPublisherInfo`, what the publisher
//! did (`Engine::event_publisher_info`). pkv publishes the engine's KV events over ZeroMQ in
//! vLLM's protocol (msgpack `KVEventBatch`es, an optional replay socket), on its own thread.
use std::ffi::CString;
use std::ptr;
use std::sync::Arc;

use pkv_sys as sys;

use crate::error::{Error, Result, Status};
use crate::library::{call, codes, library, sized, text, Library};

codes! {
    /// How KV event batches are encoded on the wire (`PKV_EVENT_FORMAT_*`, pkv 0.4; pkv.h says
    /// which routers read which).
    EventFormat: u32 {
        /// msgpack maps of named fields, as vLLM 0.26 and later publish: the default.
        Map = sys::PKV_EVENT_FORMAT_MAP,
        /// msgpack arrays, fields by position, as vLLM before 0.26 published.
        Array = sys::PKV_EVENT_FORMAT_ARRAY,
    }
}

/// An engine's event publisher: `pkv_event_publisher_params` with the library's defaults
/// (`pkv_event_publisher_params_init`), then the setters; see pkv.h for each field.
///
/// ```no_run
/// let publisher = pkv::EventPublisherParams::new("tcp://127.0.0.1:*")?   // a free port
///     .replay_endpoint("tcp://127.0.0.1:*")?
///     .topic("kv-events")?;
/// let params = pkv::Params::new()?.event_publisher(&publisher);
/// let engine = pkv::Engine::new(&params)?;
/// println!("{}", engine.event_publisher_info()?.endpoint); // as bound: tcp://127.0.0.1:40123
/// # Ok::<(), pkv::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct EventPublisherParams {
    raw: sys::pkv_event_publisher_params,
    endpoint: CString,
    replay_endpoint: Option<CString>,
    topic: Option<CString>,
}

macro_rules! publisher_setters {
    ($($(#[$doc:meta])* $name:ident => $field:ident;)*) => {$(
        $(#[$doc])*
        pub fn $name(mut self, value: u32) -> EventPublisherParams {
            self.raw.$field = value;
            self
        }
    )*};
}

impl EventPublisherParams {
    /// A publisher whose PUB socket binds `endpoint` (e.g. `"tcp://127.0.0.1:5557"`; a `*` port
    /// takes a free one, read back from `Engine::event_publisher_info`), with the defaults of
    /// the default library (`pkv::library()`).
    pub fn new(endpoint: &str) -> Result<EventPublisherParams> {
        EventPublisherParams::with_library(library()?, endpoint)
    }

    /// As `new`, with the defaults of `lib`.
    pub fn with_library(lib: &'static Library, endpoint: &str) -> Result<EventPublisherParams> {
        let mut raw = sized!(sys::pkv_event_publisher_params);
        // SAFETY: raw is a pkv_event_publisher_params of the size passed.
        unsafe { call!(lib, pkv_event_publisher_params_init(&mut raw, raw.struct_size))? };
        Ok(EventPublisherParams { raw, endpoint: c_text(endpoint)?, replay_endpoint: None, topic: None })
    }

    /// The ROUTER socket that answers replay requests (none by default).
    pub fn replay_endpoint(mut self, endpoint: &str) -> Result<EventPublisherParams> {
        self.replay_endpoint = Some(c_text(endpoint)?);
        Ok(self)
    }

    /// Every message's first frame (`"kv-events"` by default).
    pub fn topic(mut self, topic: &str) -> Result<EventPublisherParams> {
        self.topic = Some(c_text(topic)?);
        Ok(self)
    }

    publisher_setters! {
        /// `KVEventBatch.data_parallel_rank` of every batch (0 by default).
        data_parallel_rank => data_parallel_rank;
        /// Batches kept for replay (0: `PKV_DEFAULT_EVENT_REPLAY_BATCHES`).
        replay_buffer_batches => replay_buffer_batches;
        /// Messages queued per subscriber before it loses them, ZeroMQ's SNDHWM (0:
        /// `PKV_DEFAULT_EVENT_SEND_HWM`).
        send_hwm => send_hwm;
        /// Events waiting for the publishing thread (0: `PKV_DEFAULT_EVENT_QUEUE_EVENTS`).
        max_queue_events => max_queue_events;
        /// Events in one batch at most (0: `PKV_DEFAULT_EVENT_BATCH_EVENTS`).
        max_batch_events => max_batch_events;
    }

    /// How batches are encoded (`EventFormat::Map` by default).
    pub fn format(mut self, format: EventFormat) -> EventPublisherParams {
        self.raw.format = format.code();
        self
    }

    pub fn get_format(&self) -> Option<EventFormat> {
        EventFormat::from_code(self.raw.format)
    }

    pub fn get_endpoint(&self) -> &str {
        self.endpoint.to_str().unwrap_or("")
    }

    /// The C struct's numbers (its string pointers are set only for `pkv_engine_create`).
    pub fn raw(&self) -> &sys::pkv_event_publisher_params {
        &self.raw
    }

    /// The struct pkv reads, its strings pointing into `self` (valid while `self` lives).
    pub(crate) fn c_params(&self) -> sys::pkv_event_publisher_params {
        let mut raw = self.raw;
        raw.endpoint = self.endpoint.as_ptr();
        raw.replay_endpoint = self.replay_endpoint.as_ref().map_or(ptr::null(), |s| s.as_ptr());
        raw.topic = self.topic.as_ref().map_or(ptr::null(), |s| s.as_ptr());
        raw
    }
}

/// A publisher's C struct at a stable address, as `Params` keeps it for `pkv_engine_create`
/// (which copies it): the strings it points at are the `EventPublisherParams`' own.
#[derive(Debug)]
pub(crate) struct PublisherStruct {
    raw: sys::pkv_event_publisher_params,
    _params: EventPublisherParams,
}

// SAFETY: the pointers in raw point at the CStrings of _params, owned and never mutated.
unsafe impl Send for PublisherStruct {}
unsafe impl Sync for PublisherStruct {}

impl PublisherStruct {
    pub(crate) fn new(params: &EventPublisherParams) -> Arc<PublisherStruct> {
        let params = params.clone();
        Arc::new(PublisherStruct { raw: params.c_params(), _params: params })
    }
    pub(crate) fn as_ptr(&self) -> *const sys::pkv_event_publisher_params {
        &self.raw
    }
}

/// What an engine's publisher did (`pkv_event_publisher_info`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventPublisherInfo {
    /// As bound: a `*` port resolved, e.g. `"tcp://127.0.0.1:40123"`.
    pub endpoint: String,
    /// As bound; `""` without replay.
    pub replay_endpoint: String,
    /// The seq the next batch gets (batches sent so far).
    pub next_seq: u64,
    /// Events sent, in batches.
    pub events_published: u64,
    /// Events lost to a full queue (each loss sent AllBlocksCleared).
    pub events_dropped: u64,
    /// Replay requests answered.
    pub replay_requests: u64,
    /// Events waiting for the publishing thread now.
    pub events_queued: u64,
}

impl EventPublisherInfo {
    /// # Safety
    /// The strings of `raw` are NULL or valid C strings.
    pub(crate) unsafe fn from_raw(raw: &sys::pkv_event_publisher_info) -> EventPublisherInfo {
        EventPublisherInfo {
            endpoint: text(raw.endpoint),
            replay_endpoint: text(raw.replay_endpoint),
            next_seq: raw.next_seq,
            events_published: raw.events_published,
            events_dropped: raw.events_dropped,
            replay_requests: raw.replay_requests,
            events_queued: raw.events_queued,
        }
    }
}

fn c_text(s: &str) -> Result<CString> {
    CString::new(s)
        .map_err(|_| Error::new(Status::InvalidArgument, format!("{:?}: not a C string (no NUL)", s)))
}
