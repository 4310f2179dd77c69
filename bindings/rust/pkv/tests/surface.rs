//! Issue 26 item 9: the binding's surface against pkv.h's. Every `PKV_API` function of
//! include/pkv/pkv.h is either wrapped - named below with the Rust items that call it (the
//! compiler checks they exist; the test checks the crate's source calls the C function) - or
//! listed as deliberately unwrapped with the reason. A call added to pkv.h and not named here
//! fails the test. Also: the crate's version is pkv.h's.
use std::collections::BTreeMap;
use std::path::Path;

/// `C function => Rust items, ...;`: each item is referenced (so it must exist) and the list
/// is returned as (C name, "item, item").
macro_rules! wrapped {
    ($($c:ident => $($rust:path),+;)*) => {{
        $($(let _ = $rust;)+)*
        vec![$((stringify!($c), vec![$(stringify!($rust)),+].join(", ")),)*]
    }};
}

fn wrapped() -> Vec<(&'static str, String)> {
    use pkv::{
        Agent, AgentParams, Batch, Engine, EventPublisherParams, Library, OpenBatch, Params, StepBatch,
        StoreAdmin, StoreParams,
    };
    wrapped! {
        pkv_version => Library::version;
        pkv_abi_version => Library::abi_version, pkv::library;
        pkv_status_string => Library::status_string;
        pkv_last_error => Library::check, pkv::Error::message;
        pkv_store_params_init => StoreParams::new, StoreParams::with_library;
        pkv_event_publisher_params_init => EventPublisherParams::new, EventPublisherParams::with_library;
        pkv_engine_params_init => Params::new, Params::with_library;
        pkv_engine_params_from_hf_config => Params::from_hf_config, Params::hf_config;
        pkv_hf_config_layer_windows => pkv::hf_config_layer_windows, Params::from_hf_config;
        pkv_hf_config_digest => pkv::hf_config_digest;
        pkv_kv_groups => Params::kv_groups, Engine::kv_groups;
        pkv_profile => Params::profile, Params::profile_detailed, pkv::profile;
        pkv_engine_create => Engine::new, Engine::with_store;
        pkv_engine_destroy => Engine::close;
        pkv_engine_params_get => Engine::params;
        pkv_engine_budget => Engine::budget;
        pkv_engine_stats => Engine::stats;
        pkv_engine_store_error => Engine::store_error;
        pkv_seq_params_init => Engine::allocate, Engine::allocate_query;
        pkv_allocate => Engine::allocate, Engine::allocate_keyed;
        pkv_allocate_query => Engine::allocate_query;
        pkv_append => Engine::append;
        pkv_fork => Engine::fork;
        pkv_release => Engine::release;
        pkv_truncate => Engine::truncate;
        pkv_preempt => Engine::preempt;
        pkv_resume => Engine::resume;
        pkv_swap_out => Engine::swap_out;
        pkv_swap_in => Engine::swap_in;
        pkv_seq_info => Engine::seq_info;
        pkv_seq_block_table => Engine::block_table;
        pkv_seq_group_block_table => Engine::group_block_table;
        pkv_seq_tokens => Engine::tokens;
        pkv_batch_begin => Engine::batch;
        pkv_batch_info => OpenBatch::view, OpenBatch::num_tokens;
        pkv_batch_copy => OpenBatch::copy;
        pkv_batch_end => Batch::end;
        pkv_batch_abort => Batch::abort, StepBatch::abort;
        pkv_request_params_init => Engine::submit;
        pkv_submit => Engine::submit, pkv::Request::default;
        pkv_step => Engine::step;
        pkv_commit => StepBatch::commit;
        pkv_drain_finished => Engine::drain_finished;
        pkv_drain_kv_events_sized => Engine::drain_kv_events;
        pkv_event_publisher_info => Engine::event_publisher_info;
        pkv_reset_prefix_cache => Engine::reset_prefix_cache;
        pkv_attention => OpenBatch::attention::<f32>, OpenBatch::attention_mla::<pkv::Bf16>, OpenBatch::attention_raw;
        pkv_pool_info => Engine::pool_info;
        pkv_set_kv_scales => Engine::set_kv_scales, Engine::set_mla_scales, Engine::set_k_scales;
        pkv_engine_set_stream => Engine::set_stream;
        pkv_block_hash_root => pkv::block_hash_root;
        pkv_block_hash => pkv::block_hash;
        pkv_store_open => StoreAdmin::open;
        pkv_store_close => StoreAdmin::close;
        pkv_store_info => StoreAdmin::info;
        pkv_store_list => StoreAdmin::list, StoreAdmin::list_keys;
        pkv_store_verify => StoreAdmin::verify;
        pkv_store_clear => StoreAdmin::clear;
        pkv_engine_check => Engine::check;
        pkv_engine_params_from_hf_config_layers => Params::from_hf_config_layers, Params::hf_config_layers;
        pkv_kv_group_info => Params::kv_group_info, Params::kv_group_infos;
        pkv_layer_info => Engine::layer_info;
        pkv_set_attention_sinks => Engine::set_attention_sinks;
        pkv_block_hash_root_lora => pkv::block_hash_root_lora;
        pkv_block_hash_extra => pkv::block_hash_extra;
        pkv_indexer_write => OpenBatch::indexer_write::<f32>, OpenBatch::indexer_write_raw;
        pkv_indexer_topk => OpenBatch::indexer_topk::<f32>, OpenBatch::indexer_topk_raw;
        pkv_sparse_mla_attention => OpenBatch::sparse_mla_attention::<f32>, OpenBatch::sparse_mla_attention_raw;
        pkv_cache_set_priority => Engine::cache_set_priority;
        pkv_cache_pin => Engine::cache_pin;
        pkv_cache_unpin => Engine::cache_unpin, pkv::CachePin::unpin;
        pkv_batch_plan_graph => OpenBatch::plan_graph;
        pkv_batch_rank => OpenBatch::rank;
        pkv_rank_pool_info => Engine::rank_pool_info;
        pkv_engine_set_rank_stream => Engine::set_rank_stream;
        pkv_batch_export_plan => OpenBatch::export_plan;
        pkv_plan_import => Engine::import_plan;
        pkv_block_segments => Engine::block_segments;
        pkv_seq_segments => Engine::seq_segments;
        pkv_layout_fingerprint => Engine::layout_fingerprint;
        pkv_hold => Engine::hold;
        pkv_hold_end => Engine::hold_end;
        pkv_drain_receiving => Engine::drain_receiving;
        pkv_receive_end => Engine::receive_end;
        pkv_seq_state_segment => Engine::seq_state_segment;
        pkv_agent_params_init => AgentParams::new, AgentParams::with_library;
        pkv_agent_create => Agent::new, Engine::agent;
        pkv_agent_destroy => Agent::close;
        pkv_agent_address => Agent::address;
        pkv_agent_connect => Agent::connect;
        pkv_agent_pull => Agent::pull;
        pkv_agent_progress => Agent::progress;
        pkv_agent_stats_get => Agent::stats;
    }
}

/// pkv.h's calls this crate does not wrap, each with the reason.
const UNWRAPPED: &[(&str, &str)] = &[
    (
        "pkv_engine_last_error",
        "every failed call's Error carries the calling thread's pkv_last_error(), read right after \
         the call; the engine's copy is overwritten by any thread's next call on the engine",
    ),
    (
        "pkv_drain_kv_events",
        "the 0.1 symbol, writing 32-byte events; Engine::drain_kv_events calls \
         pkv_drain_kv_events_sized, as pkv.h's macro of this name does",
    ),
];

fn repo_file(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..").join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {}", path.display(), e))
}

/// The names of pkv.h's `PKV_API` functions (the name is the identifier before the first `(`).
fn header_functions() -> Vec<String> {
    let header = repo_file("include/pkv/pkv.h");
    let mut names = Vec::new();
    for line in header.lines().filter(|l| l.starts_with("PKV_API ")) {
        let before = line.split('(').next().unwrap();
        let name = before.rsplit(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).next().unwrap();
        assert!(name.starts_with("pkv_"), "cannot read a function name in {:?}", line);
        names.push(name.to_string());
    }
    assert!(names.len() > 50, "pkv.h's functions were not found ({} read)", names.len());
    names
}

/// The crate's sources, to check that a wrapped function is called by its C name.
fn crate_source() -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = String::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        all += &std::fs::read_to_string(entry.unwrap().path()).unwrap();
    }
    all
}

fn calls(source: &str, name: &str) -> bool {
    source.match_indices(name).any(|(at, _)| {
        let next = source[at + name.len()..].chars().next();
        let prev = source[..at].chars().last();
        !matches!(next, Some(c) if c.is_ascii_alphanumeric() || c == '_')
            && matches!(prev, Some('.') | Some(' ') | Some('('))
    })
}

#[test]
fn every_pkv_h_function_is_wrapped_or_listed_with_a_reason() {
    let header = header_functions();
    let mut known: BTreeMap<&str, String> = BTreeMap::new();
    for (c, rust) in wrapped() {
        assert!(known.insert(c, rust).is_none(), "{} is named twice", c);
    }
    for (c, why) in UNWRAPPED {
        assert!(!why.is_empty());
        assert!(
            known.insert(c, format!("unwrapped: {}", why)).is_none(),
            "{} is both wrapped and unwrapped",
            c
        );
    }
    let unknown: Vec<&String> = header.iter().filter(|n| !known.contains_key(n.as_str())).collect();
    assert!(
        unknown.is_empty(),
        "pkv.h has calls the Rust binding does not know: {:?}. Wrap each (and name it in wrapped() of \
         tests/surface.rs) or list it in UNWRAPPED with the reason",
        unknown
    );
    let stale: Vec<&&str> = known.keys().filter(|n| !header.iter().any(|h| h == *n)).collect();
    assert!(stale.is_empty(), "tests/surface.rs names calls pkv.h no longer has: {:?}", stale);
    let source = crate_source();
    for (c, rust) in wrapped() {
        assert!(calls(&source, c), "{} is said to be wrapped by {}, but src/ never calls it", c, rust);
    }
    for (c, _) in UNWRAPPED {
        assert!(!calls(&source, c), "{} is listed as unwrapped, but src/ calls it", c);
    }
}

#[test]
fn the_crate_version_is_pkv_h_s() {
    let header = format!(
        "{}.{}.{}",
        pkv::sys::PKV_VERSION_MAJOR,
        pkv::sys::PKV_VERSION_MINOR,
        pkv::sys::PKV_VERSION_PATCH
    );
    assert_eq!(pkv::VERSION, header, "run bindings/rust/gen.sh: it writes pkv.h's version into Cargo.toml");
    // pkv-sys is generated from the same header, so its constants are today's pkv.h's: the check
    // against the text keeps this test honest while bindings.rs is stale too.
    let text = repo_file("include/pkv/pkv.h");
    let part = |p: &str| {
        let prefix = format!("#define PKV_VERSION_{} ", p);
        text.lines().find_map(|l| l.strip_prefix(prefix.as_str())).expect("a version line").trim().to_string()
    };
    assert_eq!(pkv::VERSION, format!("{}.{}.{}", part("MAJOR"), part("MINOR"), part("PATCH")));
}

/// `Stats` copies pkv_stats's counters by hand (types.rs): a counter pkv.h appends and the list
/// leaves out fails here. Every counter is a u64; the raw struct has struct_size and reserved0
/// (two u32) more. (0.6's recurrent-state counters were left out once.)
#[test]
fn stats_holds_every_counter_of_pkv_stats() {
    let raw = std::mem::size_of::<pkv::sys::pkv_stats>();
    assert_eq!(std::mem::size_of::<pkv::Stats>(), raw - 8, "a counter of pkv_stats is not in pkv::Stats");
}
