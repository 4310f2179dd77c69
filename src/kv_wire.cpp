#include "kv_wire.h"

// Only a build with libzmq (PKV_HAVE_ZMQ) publishes: meson leaves this file out without it, and
// builds that compile every source on their own (tests/fuzz) get it empty. kv_publisher.cpp then
// refuses every publisher with PKV_ERR_UNSUPPORTED.
#if PKV_HAVE_ZMQ

#include <msgpack.h>

#include <cstring>
#include <utility>

#include "pkv/pkv.h"
#include "prefix_keys.h"

namespace pkv {

namespace {

// msgpack's packers are inline functions compiled here as C++: std::bad_alloc from the append
// passes through them to encode_batch's caller, which counts the batch as dropped.
int append(void *out, const char *buf, size_t len) {
  static_cast<std::string *>(out)->append(buf, len);
  return 0;
}

// Writes vLLM's msgspec structs: named (PKV_EVENT_FORMAT_MAP) as maps keyed by field name, else
// (ARRAY, vLLM's array_like) as arrays by position. An object is begun with its field count and
// tag, then each field is its name (maps only) and its value, in vLLM's declaration order.
class Writer {
 public:
  Writer(std::string *out, bool named) : named_(named) { msgpack_packer_init(&pk_, out, append); }

  // A struct of `fields` fields; tag: an event's class name (vLLM's tagged union), or null. msgspec
  // writes the tag first: under the key "type" (its default tag_field) in a map, as the first
  // element of an array.
  void begin(uint32_t fields, const char *tag) {
    const uint32_t n = fields + (tag ? 1 : 0);
    if (named_)
      msgpack_pack_map(&pk_, n);
    else
      msgpack_pack_array(&pk_, n);
    if (!tag) return;
    field("type");
    str(tag);
  }
  void field(const char *name) {
    if (named_) str(name);
  }
  void str(const char *s) { str(s, std::strlen(s)); }
  void str(const std::string &s) { str(s.data(), s.size()); }
  void str(const char *s, size_t n) {
    msgpack_pack_str(&pk_, n);
    msgpack_pack_str_body(&pk_, s, n);
  }
  void nil() { msgpack_pack_nil(&pk_); }
  void u64(uint64_t v) { msgpack_pack_uint64(&pk_, v); }
  void array(size_t n) { msgpack_pack_array(&pk_, n); }
  void i32(int32_t v) { msgpack_pack_int32(&pk_, v); }
  void f64(double v) { msgpack_pack_double(&pk_, v); }
  void bin(const char *b, size_t n) {
    msgpack_pack_bin(&pk_, n);
    msgpack_pack_bin_body(&pk_, b, n);
  }

 private:
  msgpack_packer pk_;
  bool named_;
};

// vLLM's KVCacheSpecKind of a group. An MLA cache with a window would be "sliding_window_mla",
// but engine create refuses MLA with windows.
// The recurrent state's checkpoints are one more group after the KV groups (DESIGN.md §13):
// vLLM's kind for a state spec is "mamba".
const char *spec_kind(uint32_t window, bool latent, bool state) {
  if (state) return "mamba";
  if (window) return "sliding_window";
  return latent ? "mla_attention" : "full_attention";
}

void block_hashes(Writer &w, const WireEvent *run, size_t n) {
  w.field("block_hashes");
  w.array(n);
  for (size_t i = 0; i < n; ++i) w.u64(run[i].hash);
}

// extra_keys: nil when no block of the run has extra keys, else per block nil or its items, each
// [key (bin), start, end, item_start] (pkv_block_hash_extra's fields).
void extra_keys(Writer &w, const WireEvent *run, size_t n) {
  w.field("extra_keys");
  bool any = false;
  for (size_t i = 0; i < n; ++i) any = any || !run[i].extra.empty();
  if (!any) return w.nil();
  w.array(n);
  for (size_t i = 0; i < n; ++i) {
    if (run[i].extra.empty()) {
      w.nil();
      continue;
    }
    const std::vector<ExtraItem> items = parse_block_extra(run[i].extra);
    w.array(items.size());
    for (const ExtraItem &it : items) {
      w.array(4);
      w.bin(it.key, it.key_len);
      w.u64(it.start);
      w.u64(it.end);
      w.u64(it.item_start);
    }
  }
}

// BlockStored's 11 fields.
void block_stored(Writer &w, const WireShape &s, const WireEvent *run, size_t n,
                  const int32_t *tokens) {
  const WireEvent &e = run[0];
  const bool state = e.group == s.group_windows.size();
  const uint32_t window = state ? 0 : s.group_windows.at(e.group);
  w.begin(11, "BlockStored");
  block_hashes(w, run, n);
  w.field("parent_block_hash");
  if (e.has_parent)
    w.u64(e.parent_hash);
  else
    w.nil();
  w.field("token_ids");
  w.array(n * s.block_size);
  for (size_t i = 0; i < n; ++i)
    for (uint32_t t = 0; t < s.block_size; ++t) w.i32(tokens[run[i].tokens + t]);
  w.field("block_size");
  w.u64(s.block_size);
  w.field("lora_id");  // the run's adapter: one chain, one root, one adapter
  if (e.lora_id)
    w.u64(e.lora_id);
  else
    w.nil();
  w.field("medium");
  w.str(s.medium[e.medium]);
  w.field("lora_name");  // pkv knows adapters by id only
  w.nil();
  extra_keys(w, run, n);
  w.field("group_idx");
  w.u64(e.group);
  w.field("kv_cache_spec_kind");
  w.str(spec_kind(window, s.latent, state));
  w.field("kv_cache_spec_sliding_window");
  if (window)
    w.u64(window);
  else
    w.nil();
}

// BlockRemoved's 3 fields.
void block_removed(Writer &w, const WireShape &s, const WireEvent *run, size_t n) {
  w.begin(3, "BlockRemoved");
  block_hashes(w, run, n);
  w.field("medium");
  w.str(s.medium[run[0].medium]);
  w.field("group_idx");
  w.u64(run[0].group);
}

// Whether event b continues the run event a is in (one BlockStored / BlockRemoved on the wire).
bool continues(const WireEvent &a, const WireEvent &b) {
  if (a.type != b.type || a.medium != b.medium || a.group != b.group || a.lora_id != b.lora_id)
    return false;
  if (b.type == PKV_EVENT_BLOCK_STORED) return b.has_parent && b.parent_hash == a.hash;
  return b.type == PKV_EVENT_BLOCK_REMOVED;
}

}  // namespace

std::string encode_batch(const WireShape &shape, double ts, const WireEvent *events, size_t n,
                         const int32_t *tokens) {
  std::vector<std::pair<size_t, size_t>> runs;  // [first, last)
  for (size_t i = 0; i < n; ++i) {
    if (i > 0 && continues(events[i - 1], events[i]))
      runs.back().second = i + 1;
    else
      runs.emplace_back(i, i + 1);
  }
  std::string out;
  Writer w(&out, shape.format == PKV_EVENT_FORMAT_MAP);
  w.begin(3, nullptr);  // KVEventBatch
  w.field("ts");
  w.f64(ts);
  w.field("events");
  w.array(runs.size());
  for (const auto &[first, last] : runs) {
    switch (events[first].type) {
      case PKV_EVENT_BLOCK_STORED:
        block_stored(w, shape, events + first, last - first, tokens);
        break;
      case PKV_EVENT_BLOCK_REMOVED:
        block_removed(w, shape, events + first, last - first);
        break;
      default:
        w.begin(0, "AllBlocksCleared");
        break;
    }
  }
  w.field("data_parallel_rank");
  w.u64(shape.rank);
  return out;
}

}  // namespace pkv

#endif  // PKV_HAVE_ZMQ
