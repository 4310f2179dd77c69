#include "kv_publisher.h"

#include "status.h"

#if PKV_HAVE_ZMQ

#include <fcntl.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "kv_wire.h"

namespace pkv {

namespace {

// A closing socket waits this long for its peers to take what is still queued, at most.
constexpr int kLingerMs = 100;
// After publishing, the thread gathers the engine's next events this long before it looks again:
// a busy engine then hands over its events with no system call and wakes the thread at most once
// per window (a step of a few microseconds would otherwise wake it every step).
constexpr long kBatchWindowMs = 1;
// vLLM's end-of-replay marker: the seq -1, 8 bytes big-endian.
constexpr unsigned char kEndSeq[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};

struct Message {
  uint64_t seq;
  std::string payload;
};

void put_be64(uint64_t v, unsigned char out[8]) {
  for (int i = 7; i >= 0; --i, v >>= 8) out[i] = static_cast<unsigned char>(v);
}

uint64_t get_be64(const unsigned char in[8]) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = v << 8 | in[i];
  return v;
}

[[noreturn]] void fail_zmq(const char *what, const char *endpoint) {
  fail(PKV_ERR_EVENTS, "event_publisher: %s %s: %s", what, endpoint, zmq_strerror(zmq_errno()));
}

// The socket's endpoint as bound, a '*' port resolved.
std::string last_endpoint(void *socket) {
  char buf[PKV_MAX_EVENT_ENDPOINT_BYTES + 64];
  size_t len = sizeof buf;
  if (zmq_getsockopt(socket, ZMQ_LAST_ENDPOINT, buf, &len) != 0 || len == 0) return std::string();
  return std::string(buf, strnlen(buf, len));
}

}  // namespace

struct KvPublisher::Impl {
  WireShape shape;  // the encoding's format and what it says of the engine
  size_t max_queue = 0, max_batch = 0, replay_batches = 0;
  std::string topic;
  std::string endpoint, replay_endpoint;  // as bound

  void *ctx = nullptr, *pub = nullptr, *replay = nullptr;
  int wake[2] = {-1, -1};  // the engine writes a byte to wake the thread when it is waiting
  std::thread thread;

  // The engine's side: staged during a call, appended to the queue under mu at its end, taken
  // whole by the thread.
  std::vector<WireEvent> staged;
  std::vector<int32_t> staged_tokens;
  std::mutex mu;
  std::vector<WireEvent> queue;
  std::vector<int32_t> queue_tokens;
  bool stopping = false;
  bool waiting = true;  // the thread sleeps until woken (it found the queue empty)

  // The thread's side.
  std::deque<Message> kept;  // the last replay_batches batches
  std::vector<WireEvent> taken;
  std::vector<int32_t> taken_tokens;

  // queued: events in the queue; in_flight: taken by the thread, not yet sent. in_flight is set
  // before queued is cleared and cleared after published grows, so queued + in_flight read in
  // that order is 0 only when everything handed over was sent (or dropped).
  std::atomic<uint64_t> next_seq{0}, published{0}, dropped{0}, replays{0}, queued{0}, in_flight{0};

  ~Impl() { close(); }

  void close() {
    if (pub) zmq_close(pub);
    if (replay) zmq_close(replay);
    if (ctx) zmq_ctx_term(ctx);
    for (int fd : wake)
      if (fd >= 0) ::close(fd);
    pub = replay = ctx = nullptr;
    wake[0] = wake[1] = -1;
  }

  void *bind(int type, const char *endpoint, int hwm, std::string *bound) {
    void *s = zmq_socket(ctx, type);
    if (!s) fail_zmq("cannot make a socket for", endpoint);
    const int linger = kLingerMs;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
    if (zmq_bind(s, endpoint) != 0) {
      const int err = zmq_errno();
      zmq_close(s);
      errno = err;
      fail(PKV_ERR_EVENTS, "event_publisher: cannot bind %s: %s", endpoint, zmq_strerror(err));
    }
    *bound = last_endpoint(s);
    return s;
  }

  // Engine side (serialized by the engine's lock): an event is staged without a lock; flush()
  // hands a call's events to the thread at once.
  void stage(const WireEvent &e, const int32_t *tokens) {
    WireEvent q = e;
    q.tokens = staged_tokens.size();
    if (tokens) staged_tokens.insert(staged_tokens.end(), tokens, tokens + shape.block_size);
    staged.push_back(std::move(q));
  }

  // The staged events join the queue; a queue they would overfill is dropped (counted) for one
  // AllBlocksCleared, and so are the oldest staged ones if they alone do not fit.
  void flush() noexcept {
    if (staged.empty()) return;
    bool wake_up;
    {
      std::lock_guard<std::mutex> lock(mu);
      wake_up = waiting;
      waiting = false;
      try {
        append_staged();
      } catch (...) {
        // Out of memory: what was queued and staged is lost; the router is told to forget (clear
        // keeps the capacity, so the one push_back does not allocate).
        dropped += queue.size() + staged.size();
        queue.clear();
        queue_tokens.clear();
        queue.push_back(WireEvent{PKV_EVENT_ALL_CLEARED, PKV_TIER_NONE, 0, false, 0, 0, 0, 0, {}});
      }
      queued = queue.size();
    }
    staged.clear();
    staged_tokens.clear();
    if (wake_up) {
      const char byte = 1;
      // Non-blocking: a full pipe already holds a wake-up.
      [[maybe_unused]] ssize_t n = ::write(wake[1], &byte, 1);
    }
  }

  // Under mu.
  void append_staged() {
    size_t skip = 0;
    if (queue.size() + staged.size() > max_queue) {
      skip = staged.size() > max_queue - 1 ? staged.size() - (max_queue - 1) : 0;
      dropped += queue.size() + skip;
      queue.clear();
      queue_tokens.clear();
      queue.push_back(WireEvent{PKV_EVENT_ALL_CLEARED, PKV_TIER_NONE, 0, false, 0, 0, 0, 0, {}});
    }
    if (queue.empty()) {  // the usual case: the thread has taken everything before
      queue.swap(staged);
      queue_tokens.swap(staged_tokens);
      if (skip) queue.erase(queue.begin(), queue.begin() + static_cast<std::ptrdiff_t>(skip));
      return;
    }
    const size_t base = queue_tokens.size();
    queue_tokens.insert(queue_tokens.end(), staged_tokens.begin(), staged_tokens.end());
    for (size_t i = skip; i < staged.size(); ++i) {
      queue.push_back(staged[i]);
      queue.back().tokens += base;
    }
  }

  // ------------------------------------------------------------------ the thread
  void run() {
    zmq_pollitem_t items[2] = {{nullptr, wake[0], ZMQ_POLLIN, 0}, {replay, 0, ZMQ_POLLIN, 0}};
    long timeout_ms = -1;
    for (;;) {
      if (zmq_poll(items, replay ? 2 : 1, timeout_ms) < 0) {
        if (zmq_errno() == EINTR) continue;
        return;
      }
      if (items[0].revents & ZMQ_POLLIN) {
        char buf[64];
        while (::read(wake[0], buf, sizeof buf) > 0) {
        }
      }
      if (replay && (items[1].revents & ZMQ_POLLIN)) serve_replays();
      bool stop;
      {
        std::lock_guard<std::mutex> lock(mu);
        taken.swap(queue);
        taken_tokens.swap(queue_tokens);
        queue.clear();
        queue_tokens.clear();
        in_flight = taken.size();
        queued = 0;
        stop = stopping;
        // Nothing new: sleep until the engine's next events wake us. Else the engine does not
        // wake us (no system call on its side) and we come back after a batch window.
        waiting = taken.empty();
      }
      timeout_ms = taken.empty() ? -1 : kBatchWindowMs;
      size_t sent = 0;
      try {
        for (; sent < taken.size(); sent = std::min(taken.size(), sent + max_batch)) {
          publish(sent, std::min(taken.size(), sent + max_batch));
          in_flight -= std::min(taken.size(), sent + max_batch) - sent;
        }
      } catch (...) {
        // Out of memory while encoding: the events not yet sent are lost, like a dropped queue.
        dropped += taken.size() - sent;
        in_flight = 0;
      }
      if (stop) return;
    }
  }

  // Publishes taken[begin, end) as one KVEventBatch.
  void publish(size_t begin, size_t end) {
    const double ts =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    Message m{next_seq.load(),
              encode_batch(shape, ts, taken.data() + begin, end - begin, taken_tokens.data())};
    unsigned char seq[8];
    put_be64(m.seq, seq);
    // A PUB socket never blocks: a subscriber past its high-water mark loses the message.
    zmq_send(pub, topic.data(), topic.size(), ZMQ_SNDMORE);
    zmq_send(pub, seq, sizeof seq, ZMQ_SNDMORE);
    zmq_send(pub, m.payload.data(), m.payload.size(), 0);
    published += end - begin;
    next_seq = m.seq + 1;
    if (replay) {
      if (kept.size() == replay_batches) kept.pop_front();
      kept.push_back(std::move(m));
    }
  }

  // Answers every waiting request: [id, (empty,) start_seq] -> a [id, (empty,) seq, payload]
  // per kept batch from start_seq on, then [id, (empty,) -1, empty].
  void serve_replays() {
    for (;;) {
      std::vector<zmq_msg_t> frames;
      int more = 1;
      while (more) {
        frames.emplace_back();
        zmq_msg_init(&frames.back());
        if (zmq_msg_recv(&frames.back(), replay, ZMQ_DONTWAIT) < 0) {
          zmq_msg_close(&frames.back());
          frames.pop_back();
          break;
        }
        more = zmq_msg_more(&frames.back());
      }
      if (frames.empty()) return;
      const bool delimited = frames.size() == 3 && zmq_msg_size(&frames[1]) == 0;
      const bool valid = (frames.size() == 2 || delimited) && zmq_msg_size(&frames.back()) == 8;
      if (valid) {
        ++replays;
        const uint64_t start =
            get_be64(static_cast<const unsigned char *>(zmq_msg_data(&frames.back())));
        const std::string id(static_cast<const char *>(zmq_msg_data(&frames[0])),
                             zmq_msg_size(&frames[0]));
        auto send = [&](const void *seq, const std::string &payload) {
          zmq_send(replay, id.data(), id.size(), ZMQ_SNDMORE);
          if (delimited) zmq_send(replay, "", 0, ZMQ_SNDMORE);
          zmq_send(replay, seq, 8, ZMQ_SNDMORE);
          zmq_send(replay, payload.data(), payload.size(), 0);
        };
        for (const Message &m : kept) {
          if (m.seq < start) continue;
          unsigned char seq[8];
          put_be64(m.seq, seq);
          send(seq, m.payload);
        }
        send(kEndSeq, std::string());
      }
      for (zmq_msg_t &f : frames) zmq_msg_close(&f);
    }
  }
};

KvPublisher::KvPublisher(const pkv_event_publisher_params &p, uint32_t block_size,
                         std::array<std::string, 4> medium_names,
                         std::vector<uint32_t> group_windows, bool latent)
    : impl_(std::make_unique<Impl>()) {
  Impl &m = *impl_;
  m.shape.format = p.format;
  m.shape.block_size = block_size;
  m.shape.rank = p.data_parallel_rank;
  m.shape.medium = std::move(medium_names);
  m.shape.group_windows = std::move(group_windows);
  m.shape.latent = latent;
  m.max_queue = p.max_queue_events;
  m.max_batch = p.max_batch_events;
  m.replay_batches = p.replay_buffer_batches;
  m.topic = p.topic;
  // The queue and the thread's copy swap: both keep room for the one event flush() pushes when
  // out of memory.
  m.queue.reserve(1024);
  m.taken.reserve(1024);
  if (::pipe2(m.wake, O_NONBLOCK | O_CLOEXEC) != 0)
    fail(PKV_ERR_EVENTS, "event_publisher: pipe: %s", strerror(errno));
  m.ctx = zmq_ctx_new();
  if (!m.ctx) fail(PKV_ERR_EVENTS, "event_publisher: zmq_ctx_new: %s", zmq_strerror(zmq_errno()));
  zmq_ctx_set(m.ctx, ZMQ_IO_THREADS, 1);
  m.pub = m.bind(ZMQ_PUB, p.endpoint, static_cast<int>(p.send_hwm), &m.endpoint);
  // A replay's reply is every kept batch and the end marker: room for one whole reply per peer
  // (a ROUTER drops what finds its peer's queue full; send_hwm is for live subscribers).
  if (p.replay_endpoint)
    m.replay = m.bind(ZMQ_ROUTER, p.replay_endpoint, static_cast<int>(p.replay_buffer_batches) + 1,
                      &m.replay_endpoint);
  // The sockets move to the thread here (its start is the memory barrier ZeroMQ asks for).
  m.thread = std::thread([&m] { m.run(); });
}

KvPublisher::~KvPublisher() {
  impl_->flush();
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
  }
  const char byte = 1;
  [[maybe_unused]] ssize_t n = ::write(impl_->wake[1], &byte, 1);
  if (impl_->thread.joinable()) impl_->thread.join();
}

void KvPublisher::stored(uint64_t hash, bool has_parent, uint64_t parent_hash,
                         const int32_t *tokens, uint32_t medium, uint32_t group, uint64_t lora_id,
                         const std::string &extra) {
  impl_->stage(WireEvent{PKV_EVENT_BLOCK_STORED, medium, group, has_parent, hash, parent_hash, 0,
                         lora_id, extra},
               tokens);
}

void KvPublisher::removed(uint64_t hash, uint32_t medium, uint32_t group) {
  impl_->stage(WireEvent{PKV_EVENT_BLOCK_REMOVED, medium, group, false, hash, 0, 0, 0, {}},
               nullptr);
}

void KvPublisher::all_cleared() {
  impl_->stage(WireEvent{PKV_EVENT_ALL_CLEARED, PKV_TIER_NONE, 0, false, 0, 0, 0, 0, {}}, nullptr);
}

void KvPublisher::flush() { impl_->flush(); }

void KvPublisher::info(struct pkv_event_publisher_info *out) const {
  out->endpoint = impl_->endpoint.c_str();
  out->replay_endpoint = impl_->replay_endpoint.c_str();
  out->next_seq = impl_->next_seq;
  out->events_published = impl_->published;
  out->events_dropped = impl_->dropped;
  out->replay_requests = impl_->replays;
  out->events_queued = impl_->queued;
  out->events_queued += impl_->in_flight;
}

}  // namespace pkv

#else  // a build without libzmq

namespace pkv {

struct KvPublisher::Impl {};

KvPublisher::KvPublisher(const pkv_event_publisher_params &, uint32_t, std::array<std::string, 4>,
                         std::vector<uint32_t>, bool) {
  fail(PKV_ERR_UNSUPPORTED,
       "event_publisher: this libpkv was built without libzmq (Debian libzmq3-dev and "
       "libmsgpack-dev): KV events can only be drained (pkv_drain_kv_events)");
}

KvPublisher::~KvPublisher() = default;
void KvPublisher::stored(uint64_t, bool, uint64_t, const int32_t *, uint32_t, uint32_t, uint64_t,
                         const std::string &) {}
void KvPublisher::removed(uint64_t, uint32_t, uint32_t) {}
void KvPublisher::all_cleared() {}
void KvPublisher::flush() {}
void KvPublisher::info(struct pkv_event_publisher_info *) const {}

}  // namespace pkv

#endif
