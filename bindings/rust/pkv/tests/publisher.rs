//! KV events on the wire (pkv 0.3): an engine given an `EventPublisherParams` binds its
//! endpoints and reports them, as bound, through `Engine::event_publisher_info`.
mod common;

use pkv::{EventFormat, EventPublisherParams, Status};

#[test]
fn a_cpu_engine_binds_a_free_port_and_reports_it() {
    let publisher = EventPublisherParams::new("tcp://127.0.0.1:*")
        .unwrap()
        .replay_endpoint("tcp://127.0.0.1:*")
        .unwrap()
        .topic("kv-events-test")
        .unwrap()
        .data_parallel_rank(3)
        .replay_buffer_batches(16)
        .send_hwm(1000)
        .max_queue_events(4096)
        .max_batch_events(64);
    assert_eq!(publisher.get_endpoint(), "tcp://127.0.0.1:*");
    assert_eq!(publisher.get_format(), Some(EventFormat::Map), "vLLM's current format by default");
    assert_eq!(publisher.raw().data_parallel_rank, 3);
    let params = common::params(4, 16).event_publisher(&publisher);
    let engine = pkv::Engine::new(&params).expect("a CPU engine with an event publisher");

    let info = engine.event_publisher_info().unwrap();
    for endpoint in [&info.endpoint, &info.replay_endpoint] {
        let port =
            endpoint.strip_prefix("tcp://127.0.0.1:").unwrap_or_else(|| panic!("bound {:?}", endpoint));
        assert!(port.parse::<u16>().map_or(false, |p| p > 0), "bound {:?}: no port", endpoint);
    }
    assert_ne!(info.endpoint, info.replay_endpoint);
    assert_eq!(info.events_dropped, 0);
    // The engine's own params hold no pointer to the publisher (it was read at create).
    assert!(engine.params().raw().event_publisher.is_null());

    // Sealing blocks queues stored events; they are published (or still queued), never lost.
    let a = engine.allocate(&common::tokens(1, 9), None).unwrap();
    common::compute(&engine, &[a.seq]);
    let after = engine.event_publisher_info().unwrap();
    assert_eq!(after.endpoint, info.endpoint);
    assert_eq!(after.events_dropped, 0);
}

#[test]
fn publisher_errors_name_their_cause() {
    // An engine without a publisher has no info.
    let engine = common::engine(4, 16);
    let err = engine.event_publisher_info().unwrap_err();
    assert_eq!(err.status(), Status::State, "{}", err);

    // An endpoint ZeroMQ cannot bind refuses the engine, naming it.
    let bad = EventPublisherParams::new("nonsense://nowhere").unwrap();
    let err = pkv::Engine::new(&common::params(4, 16).event_publisher(&bad)).err().expect("refused");
    assert_eq!(err.status(), Status::Events, "{}", err);
    assert!(err.message().contains("nonsense://nowhere"), "{}", err);

    // A string with a NUL is refused before pkv sees it; dropping the publisher works.
    assert_eq!(EventPublisherParams::new("tcp://\0").unwrap_err().status(), Status::InvalidArgument);
    let params = common::params(4, 16).event_publisher(&bad).without_event_publisher();
    assert!(pkv::Engine::new(&params).is_ok());
}

/// pkv 0.4: the array format of vLLM before 0.26, on request.
#[test]
fn the_array_format_on_request() {
    let publisher = EventPublisherParams::new("tcp://127.0.0.1:*").unwrap().format(EventFormat::Array);
    assert_eq!(publisher.get_format(), Some(EventFormat::Array));
    assert_eq!(publisher.raw().format, pkv::sys::PKV_EVENT_FORMAT_ARRAY as u32);
    let engine = pkv::Engine::new(&common::params(4, 16).event_publisher(&publisher)).unwrap();
    let a = engine.allocate(&common::tokens(1, 9), None).unwrap();
    common::compute(&engine, &[a.seq]);
    assert_eq!(engine.event_publisher_info().unwrap().events_dropped, 0);
}
