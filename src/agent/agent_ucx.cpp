// The transfer agent over UCX (agent.h, DESIGN.md §10). One UCP context and worker per agent,
// single-threaded (the agent's lock serializes its calls); the connection is UCX's client-server
// sockaddr one (TCP), the bytes go by one-sided reads (ucp_get_nbx) over whatever UCX picks
// between the two processes (shared memory, cma, TCP, RDMA). The messages (agent_wire.h) are
// active messages; each carries its header, and the callbacks only queue what arrived: the
// agent acts on it after ucp_worker_progress returns, outside UCX's callbacks.
//
// A pull, from the consumer's side: request (the producer answers with its held sequence's
// segments), reads (at most max_inflight_bytes in flight), end (every read completed), and the
// producer's acknowledgement that the sequence was held through them - only then is the fill
// DONE. Anything else fails it, once no read of it is in flight.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <ucp/api/ucp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <thread>
#include <unordered_map>
#include <vector>

#include "agent/agent.h"
#include "agent/agent_wire.h"
#include "engine.h"
#include "status.h"

namespace pkv {
namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void ucx_fail(ucs_status_t st, const char *what) {
  fail(PKV_ERR_DEVICE, "%s: UCX: %s", what, ucs_status_string(st));
}

sockaddr_in sockaddr_of(const AgentAddress &a) {
  sockaddr_in sin;
  std::memset(&sin, 0, sizeof sin);
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = a.ip;
  sin.sin_port = htons(a.port);
  return sin;
}

struct Peer {
  ucp_ep_h ep = nullptr;
  bool ready = false;  // the handshake is done and the fingerprints agree
  bool dead = false;   // lost, refused or closed: nothing more goes to it
  bool hello_sent = false;
  std::string why;  // dead: why
  std::vector<std::pair<AgentRegion, ucp_rkey_h>> regions;
};

struct Read {
  void *to;
  uint64_t from, bytes;
  ucp_rkey_h rkey;
};

struct Pull {
  enum State { kRequested, kReading, kEnding, kFailing } state = kRequested;
  uint64_t id = 0, local_seq = 0, remote_seq = 0;
  uint32_t peer = 0;
  std::vector<pkv_segment> local;
  pkv_segment local_state{nullptr, 0};
  std::vector<Read> reads;
  size_t next = 0, outstanding = 0;
  uint64_t bytes = 0, total = 0;
  std::string why;
  Clock::time_point deadline;
};

struct Served {
  uint32_t peer;
  uint64_t seq, bytes;
};

struct Message {
  AgentHeader header;
  ucp_ep_h ep;
  std::vector<uint8_t> data;
};

class UcxAgent;

struct ReadCtx {
  UcxAgent *agent;
  uint64_t pull, bytes;
};

struct SendCtx {
  AgentHeader header;
  std::vector<uint8_t> data;
};

struct RecvCtx {
  UcxAgent *agent;
  Message msg;
};

class UcxAgent final : public Agent {
 public:
  UcxAgent(Engine &e, const pkv_agent_params &p);
  ~UcxAgent() override;

  std::string address() const override;
  uint32_t connect(const char *address) override;
  void pull(uint32_t peer, uint64_t remote_seq, uint64_t local_seq) override;
  size_t progress(uint32_t wait_ms, pkv_agent_completion *out, size_t cap) override;
  pkv_agent_stats stats() const override { return stats_; }

  // UCX's callbacks: they queue, nothing more.
  void arrived(Message m) { inbox_.push_back(std::move(m)); }
  void read_done(uint64_t pull, uint64_t bytes, ucs_status_t st);
  void ep_error(ucp_ep_h ep, ucs_status_t st);
  void conn_request(ucp_conn_request_h req) { conn_requests_.push_back(req); }
  ucp_worker_h worker() const { return worker_; }

 private:
  void register_pool();
  uint32_t add_peer(ucp_ep_h ep);
  Peer *peer_of(ucp_ep_h ep, uint32_t *id);
  void send(Peer &peer, AgentMsg type, uint64_t id, std::vector<uint8_t> data);
  void send_hello(Peer &peer);
  // The peer is lost to this agent: dead, its pulls failing. force: its connection closes at
  // once (reads in flight end in errors); else after what was sent to it went out.
  void kill(uint32_t id, const std::string &why, bool force = true);
  // One round: UCX progress, then what it queued, reads to issue, timeouts, ends. Returns
  // whether anything happened.
  bool step();
  void run();  // the progress thread's loop
  void handle(Message &m);
  void on_hello(uint32_t id, Peer &peer, const AgentHello &h);
  void on_pull_request(uint32_t id, Peer &peer, uint64_t pull, const AgentPullRequest &r);
  void on_pull_reply(Pull &p, const AgentPullReply &r);
  void on_pull_end(uint64_t key, const AgentPullEnd &r);
  void on_pull_ack(Pull &p, const AgentPullAck &r);
  void issue_reads();
  void fail(Pull &p, const std::string &why);
  void finish(Pull &p, uint32_t outcome);
  void end_served(uint64_t key, uint32_t outcome);
  template <class F> auto with_engine(F &&f) -> decltype(f());
  void close_all();

  Engine &engine_;
  pkv_agent_params params_;
  std::array<uint8_t, 32> fingerprint_{};
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_listener_h listener_ = nullptr;
  std::string address_;
  std::vector<ucp_mem_h> memh_;
  std::vector<AgentRegion> regions_;
  std::vector<Peer> peers_;
  std::map<uint64_t, Pull> pulls_;     // this agent's, by id
  std::map<uint64_t, Served> served_;  // peers' pulls: (peer << 48) | their id
  std::deque<Message> inbox_;
  std::vector<ucp_conn_request_h> conn_requests_;
  std::vector<std::pair<ucp_ep_h, ucs_status_t>> errors_;
  std::deque<pkv_agent_completion> done_;
  std::vector<ucs_status_ptr_t> closing_;  // graceful closes under way
  uint64_t next_pull_ = 1, inflight_ = 0;  // inflight_: bytes of reads in flight
  Clock::time_point reading_since_;        // when inflight_ last became non-zero
  pkv_agent_stats stats_{};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// ---------------------------------------------------------------- UCX's callbacks

void on_send(void *request, ucs_status_t, void *user) {
  delete static_cast<SendCtx *>(user);
  ucp_request_free(request);
}

void on_read(void *request, ucs_status_t st, void *user) {
  auto *ctx = static_cast<ReadCtx *>(user);
  ctx->agent->read_done(ctx->pull, ctx->bytes, st);
  delete ctx;
  ucp_request_free(request);
}

void on_rndv(void *request, ucs_status_t st, size_t, void *user) {
  auto *ctx = static_cast<RecvCtx *>(user);
  if (st == UCS_OK) ctx->agent->arrived(std::move(ctx->msg));
  delete ctx;
  ucp_request_free(request);
}

ucs_status_t on_am(void *arg, const void *header, size_t header_length, void *data, size_t length,
                   const ucp_am_recv_param_t *param) {
  auto *agent = static_cast<UcxAgent *>(arg);
  Message m;
  try {
    m.header = decode_header(header, header_length);
  } catch (...) {
    return UCS_OK;  // not a pkv agent's message (or not this version's): dropped
  }
  m.ep = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? param->reply_ep : nullptr;
  if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
    auto *ctx = new RecvCtx{agent, std::move(m)};
    ctx->msg.data.resize(length);
    ucp_request_param_t rp;
    std::memset(&rp, 0, sizeof rp);
    rp.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    rp.cb.recv_am = on_rndv;
    rp.user_data = ctx;
    ucs_status_ptr_t r =
        ucp_am_recv_data_nbx(agent->worker(), data, ctx->msg.data.data(), length, &rp);
    if (UCS_PTR_IS_ERR(r)) delete ctx;  // lost: the pull it belongs to times out
    return UCS_OK;
  }
  const uint8_t *bytes = static_cast<const uint8_t *>(data);
  m.data.assign(bytes, bytes + length);
  agent->arrived(std::move(m));
  return UCS_OK;
}

void on_ep_error(void *arg, ucp_ep_h ep, ucs_status_t st) {
  static_cast<UcxAgent *>(arg)->ep_error(ep, st);
}

void on_conn(ucp_conn_request_h req, void *arg) { static_cast<UcxAgent *>(arg)->conn_request(req); }

// ---------------------------------------------------------------- setup

UcxAgent::UcxAgent(Engine &e, const pkv_agent_params &p) : engine_(e), params_(p) {
  stats_.struct_size = sizeof stats_;
  {
    std::lock_guard<std::mutex> lock(engine_.mutex());
    fingerprint_ = engine_.layout_fingerprint(p.rank);
  }
  ucp_config_t *config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) ucx_fail(st, "pkv_agent_create: reading UCX's configuration");
  ucp_params_t up;
  std::memset(&up, 0, sizeof up);
  up.field_mask = UCP_PARAM_FIELD_FEATURES;
  up.features = UCP_FEATURE_AM | UCP_FEATURE_RMA;
  st = ucp_init(&up, config, &context_);
  ucp_config_release(config);
  if (st != UCS_OK) ucx_fail(st, "pkv_agent_create: ucp_init");
  try {
    ucp_worker_params_t wp;
    std::memset(&wp, 0, sizeof wp);
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // the agent's lock serializes every use
    st = ucp_worker_create(context_, &wp, &worker_);
    if (st != UCS_OK) ucx_fail(st, "pkv_agent_create: ucp_worker_create");
    for (uint16_t id = uint16_t(AgentMsg::kHello); id <= uint16_t(AgentMsg::kPullAck); ++id) {
      ucp_am_handler_param_t hp;
      std::memset(&hp, 0, sizeof hp);
      hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                      UCP_AM_HANDLER_PARAM_FIELD_ARG;
      hp.id = id;
      hp.cb = on_am;
      hp.arg = this;
      st = ucp_worker_set_am_recv_handler(worker_, &hp);
      if (st != UCS_OK) ucx_fail(st, "pkv_agent_create: an active message handler");
    }
    register_pool();
    if (p.listen_address) {
      const sockaddr_in sin = sockaddr_of(parse_agent_address(p.listen_address, "listen_address"));
      ucp_listener_params_t lp;
      std::memset(&lp, 0, sizeof lp);
      lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
      lp.sockaddr.addr = reinterpret_cast<const sockaddr *>(&sin);
      lp.sockaddr.addrlen = sizeof sin;
      lp.conn_handler.cb = on_conn;
      lp.conn_handler.arg = this;
      st = ucp_listener_create(worker_, &lp, &listener_);
      if (st != UCS_OK) {
        pkv::fail(PKV_ERR_DEVICE, "pkv_agent_create: cannot listen on %s: UCX: %s",
                  p.listen_address, ucs_status_string(st));
      }
      ucp_listener_attr_t attr;
      std::memset(&attr, 0, sizeof attr);
      attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
      st = ucp_listener_query(listener_, &attr);
      if (st != UCS_OK) ucx_fail(st, "pkv_agent_create: ucp_listener_query");
      const sockaddr_in *bound = reinterpret_cast<const sockaddr_in *>(&attr.sockaddr);
      char ip[INET_ADDRSTRLEN] = {0};
      inet_ntop(AF_INET, &sin.sin_addr, ip, sizeof ip);
      address_ = std::string(ip) + ":" + std::to_string(ntohs(bound->sin_port));
      params_.listen_address = nullptr;  // the caller's string is not kept
    }
    if (p.progress_thread) thread_ = std::thread([this] { run(); });
  } catch (...) {
    close_all();
    throw;
  }
}

void UcxAgent::register_pool() {
  struct pkv_pool_info info;
  {
    std::lock_guard<std::mutex> lock(engine_.mutex());
    info = engine_.rank_pool_info(params_.rank);
  }
  std::vector<std::pair<void *, uint64_t>> parts = {{info.k_base, info.bytes_per_pool}};
  if (info.v_base && info.v_base != info.k_base)
    parts.push_back({info.v_base, info.bytes_per_pool});
  if (info.state_base && info.state_slot_bytes)
    parts.push_back({info.state_base, info.state_slot_bytes * uint64_t(info.num_state_slots)});
  for (const auto &[base, bytes] : parts) {
    if (!base || !bytes) continue;
    ucp_mem_map_params_t mp;
    std::memset(&mp, 0, sizeof mp);
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address = base;
    mp.length = bytes;
    ucp_mem_h memh = nullptr;
    ucs_status_t st = ucp_mem_map(context_, &mp, &memh);
    if (st != UCS_OK) ucx_fail(st, "pkv_agent_create: registering the pool");
    memh_.push_back(memh);
    void *key = nullptr;
    size_t key_bytes = 0;
    st = ucp_rkey_pack(context_, memh, &key, &key_bytes);
    if (st != UCS_OK) ucx_fail(st, "pkv_agent_create: packing the pool's key");
    AgentRegion r;
    r.base = reinterpret_cast<uintptr_t>(base);
    r.bytes = bytes;
    r.rkey.assign(static_cast<uint8_t *>(key), static_cast<uint8_t *>(key) + key_bytes);
    ucp_rkey_buffer_release(key);
    regions_.push_back(std::move(r));
  }
}

// Waits (progressing) until request r ends or `until`, cancels it if it has not, then frees it:
// a request that still does not end is left to UCX (freed, its callback never called).
void finish_request(ucp_worker_h worker, ucs_status_ptr_t r, Clock::time_point until) {
  while (ucp_request_check_status(r) == UCS_INPROGRESS && Clock::now() < until)
    ucp_worker_progress(worker);
  if (ucp_request_check_status(r) == UCS_INPROGRESS) {
    ucp_request_cancel(worker, r);
    for (int i = 0; i < 1000 && ucp_request_check_status(r) == UCS_INPROGRESS; ++i)
      ucp_worker_progress(worker);
  }
  ucp_request_free(r);
}

void UcxAgent::close_all() {
  // Live peers are closed after what was sent to them went out (an acknowledgement that ends a
  // pull on the other side), for at most a second; the lost or refused ones at once.
  const Clock::time_point stop = Clock::now() + std::chrono::seconds(1);
  for (Peer &p : peers_) {
    for (auto &r : p.regions)
      if (r.second) ucp_rkey_destroy(r.second);
    p.regions.clear();
    if (p.ep) {
      ucp_request_param_t rp;
      std::memset(&rp, 0, sizeof rp);
      rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      rp.flags = p.dead ? UCP_EP_CLOSE_FLAG_FORCE : 0;
      ucs_status_ptr_t r = ucp_ep_close_nbx(p.ep, &rp);
      if (r && !UCS_PTR_IS_ERR(r)) finish_request(worker_, r, stop);
      p.ep = nullptr;
    }
  }
  for (ucs_status_ptr_t r : closing_) finish_request(worker_, r, stop);
  closing_.clear();
  for (ucp_conn_request_h req : conn_requests_) ucp_listener_reject(listener_, req);
  conn_requests_.clear();
  if (listener_) ucp_listener_destroy(listener_), listener_ = nullptr;
  if (worker_) {
    while (ucp_worker_progress(worker_)) {
    }
  }
  for (ucp_mem_h m : memh_) ucp_mem_unmap(context_, m);
  memh_.clear();
  if (worker_) ucp_worker_destroy(worker_), worker_ = nullptr;
  if (context_) ucp_cleanup(context_), context_ = nullptr;
}

UcxAgent::~UcxAgent() {
  if (thread_.joinable()) {
    stop_ = true;
    thread_.join();
  }
  // Every pull in flight fails: its reads first cancelled (the peers closed), then it ends.
  for (auto &[id, p] : pulls_)
    if (p.state != Pull::kFailing) fail(p, "the agent was destroyed");
  // Peers with reads of ours in flight are closed at once (their reads end in errors); the
  // others after what was sent to them (close_all).
  for (auto &[id, p] : pulls_)
    if (p.outstanding > 0 && !peers_[p.peer].dead) kill(p.peer, "the agent was destroyed");
  const Clock::time_point stop = Clock::now() + std::chrono::seconds(5);
  while (inflight_ > 0 && Clock::now() < stop) ucp_worker_progress(worker_);
  try {
    step();
  } catch (...) {
  }
  for (auto it = served_.begin(); it != served_.end();)
    end_served((it++)->first, PKV_TRANSFER_FAILED);
  close_all();
}

// ---------------------------------------------------------------- peers and messages

uint32_t UcxAgent::add_peer(ucp_ep_h ep) {
  Peer p;
  p.ep = ep;
  peers_.push_back(std::move(p));
  return static_cast<uint32_t>(peers_.size() - 1);
}

Peer *UcxAgent::peer_of(ucp_ep_h ep, uint32_t *id) {
  for (uint32_t i = 0; i < peers_.size(); ++i)
    if (peers_[i].ep == ep && ep) {
      *id = i;
      return &peers_[i];
    }
  return nullptr;
}

void UcxAgent::send(Peer &peer, AgentMsg type, uint64_t id, std::vector<uint8_t> data) {
  if (peer.dead) return;
  auto *ctx = new SendCtx;
  ctx->header.type = uint16_t(type);
  ctx->header.id = id;
  ctx->data = std::move(data);
  ucp_request_param_t rp;
  std::memset(&rp, 0, sizeof rp);
  rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                    UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  rp.flags = UCP_AM_SEND_FLAG_REPLY;
  rp.cb.send = on_send;
  rp.user_data = ctx;
  ucs_status_ptr_t r = ucp_am_send_nbx(peer.ep, uint16_t(type), &ctx->header, sizeof ctx->header,
                                       ctx->data.data(), ctx->data.size(), &rp);
  if (UCS_PTR_IS_ERR(r)) {  // the peer is lost: its pulls fail (no more sends to it)
    delete ctx;
    kill(static_cast<uint32_t>(&peer - peers_.data()),
         std::string("sending failed: ") + ucs_status_string(UCS_PTR_STATUS(r)));
  }
}

void UcxAgent::send_hello(Peer &peer) {
  AgentHello h;
  h.fingerprint = fingerprint_;
  h.regions = regions_;
  send(peer, AgentMsg::kHello, 0, encode(h));
  peer.hello_sent = true;
}

void UcxAgent::kill(uint32_t id, const std::string &why, bool force) {
  Peer &p = peers_[id];
  if (!p.dead) {
    p.dead = true;
    p.why = why;
    if (p.ready) stats_.num_peers--;
  }
  if (p.ep) {
    ucp_request_param_t rp;
    std::memset(&rp, 0, sizeof rp);
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    rp.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    ucs_status_ptr_t r = ucp_ep_close_nbx(p.ep, &rp);
    if (r && !UCS_PTR_IS_ERR(r)) {
      if (force) {  // its reads in flight complete with an error, now
        finish_request(worker_, r, Clock::now() + std::chrono::seconds(1));
      } else {  // what was sent to it goes out first (a refusal's hello); step() frees it
        closing_.push_back(r);
      }
    }
    p.ep = nullptr;
  }
  for (auto &[pid, pull] : pulls_)
    if (pull.peer == id && pull.state != Pull::kFailing) fail(pull, "the peer is gone: " + p.why);
}

void UcxAgent::ep_error(ucp_ep_h ep, ucs_status_t st) { errors_.push_back({ep, st}); }

template <class F> auto UcxAgent::with_engine(F &&f) -> decltype(f()) {
  std::lock_guard<std::mutex> lock(engine_.mutex());
  engine_.tick();
  struct Publish {
    Engine &e;
    ~Publish() { e.publish_events(); }
  } publish{engine_};
  return f();
}

bool UcxAgent::step() {
  unsigned events = 0;
  for (unsigned n; (n = ucp_worker_progress(worker_)) != 0;) events += n;
  const size_t done_before = done_.size();
  events += unsigned(inbox_.size() + conn_requests_.size() + errors_.size());
  for (auto it = closing_.begin(); it != closing_.end();)
    if (ucp_request_check_status(*it) != UCS_INPROGRESS) {
      ucp_request_free(*it);
      it = closing_.erase(it);
    } else {
      ++it;
    }
  for (ucp_conn_request_h req : conn_requests_) {
    ucp_ep_params_t ep;
    std::memset(&ep, 0, sizeof ep);
    ep.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.conn_request = req;
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = on_ep_error;
    ep.err_handler.arg = this;
    ucp_ep_h h = nullptr;
    if (ucp_ep_create(worker_, &ep, &h) == UCS_OK) add_peer(h);
  }
  conn_requests_.clear();
  // What arrived before a connection's loss first: a refusal's hello, an acknowledgement.
  while (!inbox_.empty()) {
    Message m = std::move(inbox_.front());
    inbox_.pop_front();
    handle(m);
  }
  for (auto [ep, st] : errors_) {
    uint32_t id = 0;
    if (peer_of(ep, &id)) kill(id, std::string("connection lost: ") + ucs_status_string(st));
  }
  errors_.clear();
  // Peers that died: the holds they were reading end.
  for (auto it = served_.begin(); it != served_.end();) {
    const auto key = (it++)->first;
    if (peers_[served_[key].peer].dead) end_served(key, PKV_TRANSFER_FAILED);
  }
  const Clock::time_point now = Clock::now();
  for (auto &[id, p] : pulls_)
    if (p.state != Pull::kFailing && now >= p.deadline) {
      const bool reading = p.outstanding > 0;
      fail(p, "timed out (timeout_ms " + std::to_string(params_.timeout_ms) + ")");
      if (reading) kill(p.peer, "a pull from it timed out");  // cancels its reads
    }
  issue_reads();
  for (auto it = pulls_.begin(); it != pulls_.end();) {
    Pull &p = (it++)->second;
    if (p.state == Pull::kFailing && p.outstanding == 0) finish(p, params_.on_failure);
  }
  return events > 0 || done_.size() != done_before;
}

void UcxAgent::run() {
  // Polls with a backoff: 20 us after activity, doubling to 1 ms while nothing happens.
  std::chrono::microseconds idle(20);
  while (!stop_.load(std::memory_order_relaxed)) {
    bool busy = false;
    {
      std::lock_guard<std::mutex> lock(mutex());
      try {
        busy = step();
      } catch (...) {  // no memory: the next round tries again
      }
    }
    if (busy) {
      idle = std::chrono::microseconds(20);
      continue;
    }
    std::this_thread::sleep_for(idle);
    idle = std::min(idle * 2, std::chrono::microseconds(1000));
  }
}

void UcxAgent::handle(Message &m) {
  uint32_t id = 0;
  Peer *peer = peer_of(m.ep, &id);
  if (!peer || peer->dead) return;
  try {
    switch (AgentMsg(m.header.type)) {
      case AgentMsg::kHello:
        on_hello(id, *peer, decode_hello(m.data.data(), m.data.size()));
        break;
      case AgentMsg::kPullRequest:
        on_pull_request(id, *peer, m.header.id, decode_pull_request(m.data.data(), m.data.size()));
        break;
      case AgentMsg::kPullReply: {
        auto it = pulls_.find(m.header.id);
        if (it != pulls_.end() && it->second.peer == id && it->second.state == Pull::kRequested)
          on_pull_reply(it->second, decode_pull_reply(m.data.data(), m.data.size()));
        break;
      }
      case AgentMsg::kPullEnd:
        on_pull_end((uint64_t(id) << 48) | m.header.id,
                    decode_pull_end(m.data.data(), m.data.size()));
        break;
      case AgentMsg::kPullAck: {
        auto it = pulls_.find(m.header.id);
        if (it != pulls_.end() && it->second.peer == id && it->second.state == Pull::kEnding)
          on_pull_ack(it->second, decode_pull_ack(m.data.data(), m.data.size()));
        break;
      }
    }
  } catch (const Error &err) {  // a damaged message: that peer is not to be trusted
    kill(id, std::string("a bad message: ") + err.what());
  }
}

void UcxAgent::on_hello(uint32_t id, Peer &peer, const AgentHello &h) {
  if (!peer.hello_sent) send_hello(peer);  // the accepting side answers
  if (h.fingerprint != fingerprint_) {
    stats_.fingerprint_mismatches++;
    kill(id,
         "the layout fingerprints differ (the engines' models, dtypes, block sizes, layer specs "
         "or ranks are not the same): refused",
         false);
    return;
  }
  for (const AgentRegion &r : h.regions) {
    ucp_rkey_h rkey = nullptr;
    const ucs_status_t st = ucp_ep_rkey_unpack(peer.ep, r.rkey.data(), &rkey);
    if (st != UCS_OK) {
      kill(id, std::string("its memory key: UCX: ") + ucs_status_string(st));
      return;
    }
    peer.regions.push_back({r, rkey});
  }
  peer.ready = true;
  stats_.num_peers++;
}

void UcxAgent::on_pull_request(uint32_t id, Peer &peer, uint64_t pull, const AgentPullRequest &r) {
  AgentPullReply reply;
  if (!peer.ready) {
    reply.status = PKV_ERR_STATE;
    reply.message = "no handshake yet";
  } else {
    try {
      with_engine([&] {
        const Sequence &s = engine_.seq(r.seq);
        if (s.state != SeqState::kHeld)
          pkv::fail(PKV_ERR_STATE, "sequence %llu is %s, not held for a transfer",
                    (unsigned long long)r.seq, state_name(s.state));
        reply.segments = engine_.seq_segments(params_.rank, r.seq, r.first_block, r.num_blocks);
        reply.state = engine_.state_segment(params_.rank, r.seq);
      });
      uint64_t bytes = reply.state.bytes;
      for (const pkv_segment &seg : reply.segments) bytes += seg.bytes;
      served_[(uint64_t(id) << 48) | pull] = Served{id, r.seq, bytes};
    } catch (const Error &err) {
      reply = AgentPullReply{};
      reply.status = err.status();
      reply.message = err.what();
    }
  }
  send(peer, AgentMsg::kPullReply, pull, encode(reply));
}

void UcxAgent::on_pull_reply(Pull &p, const AgentPullReply &r) {
  if (r.status != PKV_OK) return fail(p, "the producer refused: " + r.message);
  if (r.segments.size() != p.local.size())
    return fail(p, "the producer gave " + std::to_string(r.segments.size()) + " segments, " +
                       std::to_string(p.local.size()) + " expected");
  const Peer &peer = peers_[p.peer];
  auto rkey_of = [&](const pkv_segment &s) -> ucp_rkey_h {
    const uint64_t at = reinterpret_cast<uintptr_t>(s.base);
    for (const auto &[region, rkey] : peer.regions)
      if (at >= region.base && s.bytes <= region.bytes &&
          at - region.base <= region.bytes - s.bytes)
        return rkey;
    return nullptr;
  };
  std::vector<std::pair<pkv_segment, pkv_segment>> pairs;
  for (size_t i = 0; i < p.local.size(); ++i) pairs.push_back({p.local[i], r.segments[i]});
  if (p.local_state.bytes || r.state.bytes) pairs.push_back({p.local_state, r.state});
  for (const auto &[to, from] : pairs) {
    if (!to.base) continue;  // a block this engine's window does not need
    if (!from.base)
      return fail(p, "the producer holds no block where this engine needs one (its window gave "
                     "it back)");
    if (from.bytes != to.bytes) return fail(p, "a segment's bytes differ between the engines");
    ucp_rkey_h rkey = rkey_of(from);
    if (!rkey) return fail(p, "a segment lies outside the producer's registered memory");
    p.reads.push_back(Read{to.base, reinterpret_cast<uintptr_t>(from.base), to.bytes, rkey});
    p.total += to.bytes;
  }
  // Reads that are contiguous on both sides become one (consecutive blocks of a layer often are
  // in both pools): fewer, larger reads.
  std::sort(p.reads.begin(), p.reads.end(),
            [](const Read &a, const Read &b) { return a.to < b.to; });
  std::vector<Read> merged;
  for (const Read &r : p.reads) {
    Read *last = merged.empty() ? nullptr : &merged.back();
    if (last && last->rkey == r.rkey && static_cast<char *>(last->to) + last->bytes == r.to &&
        last->from + last->bytes == r.from)
      last->bytes += r.bytes;
    else
      merged.push_back(r);
  }
  p.reads.swap(merged);
  p.state = Pull::kReading;
}

void UcxAgent::issue_reads() {
  for (auto &[id, p] : pulls_) {
    if (p.state != Pull::kReading) continue;
    Peer &peer = peers_[p.peer];
    while (p.next < p.reads.size() &&
           (inflight_ == 0 || inflight_ + p.reads[p.next].bytes <= params_.max_inflight_bytes)) {
      const Read &r = p.reads[p.next];
      auto *ctx = new ReadCtx{this, id, r.bytes};
      ucp_request_param_t rp;
      std::memset(&rp, 0, sizeof rp);
      rp.op_attr_mask =
          UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
      rp.cb.send = on_read;
      rp.user_data = ctx;
      ucs_status_ptr_t q = ucp_get_nbx(peer.ep, r.to, r.bytes, r.from, r.rkey, &rp);
      if (UCS_PTR_IS_ERR(q)) {
        delete ctx;
        fail(p,
             std::string("a read could not start: UCX: ") + ucs_status_string(UCS_PTR_STATUS(q)));
        break;
      }
      p.next++;
      p.outstanding++;
      if (inflight_ == 0) reading_since_ = Clock::now();
      inflight_ += r.bytes;
    }
    if (p.state == Pull::kReading && p.next == p.reads.size() && p.outstanding == 0) {
      // Every read landed: the producer says whether its sequence was held through them.
      AgentPullEnd end;
      end.read = 1;
      send(peer, AgentMsg::kPullEnd, id, encode(end));
      p.state = Pull::kEnding;
    }
  }
}

void UcxAgent::read_done(uint64_t pull, uint64_t bytes, ucs_status_t st) {
  inflight_ -= bytes;
  if (inflight_ == 0)
    stats_.read_ns +=
        uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - reading_since_)
                     .count());
  auto it = pulls_.find(pull);
  if (it == pulls_.end()) return;
  Pull &p = it->second;
  p.outstanding--;
  if (st != UCS_OK) {
    if (p.state != Pull::kFailing)
      fail(p, std::string("a read failed: UCX: ") + ucs_status_string(st));
    return;
  }
  p.bytes += bytes;
  stats_.bytes_pulled += bytes;
}

void UcxAgent::on_pull_end(uint64_t key, const AgentPullEnd &r) {
  auto it = served_.find(key);
  if (it == served_.end()) return;
  Served &s = it->second;
  Peer &peer = peers_[s.peer];
  if (!r.read) return end_served(key, PKV_TRANSFER_FAILED);
  bool held = false;
  try {
    with_engine([&] { held = engine_.seq(s.seq).state == SeqState::kHeld; });
  } catch (const Error &) {
  }
  AgentPullAck ack;
  ack.held = held;
  send(peer, AgentMsg::kPullAck, key & ((uint64_t(1) << 48) - 1), encode(ack));
  end_served(key, held ? PKV_TRANSFER_DONE : PKV_TRANSFER_FAILED);
}

void UcxAgent::end_served(uint64_t key, uint32_t outcome) {
  auto it = served_.find(key);
  if (it == served_.end()) return;
  const Served s = it->second;
  served_.erase(it);
  try {
    with_engine([&] {
      const Sequence *seq = nullptr;
      try {
        seq = &engine_.seq(s.seq);
      } catch (const Error &) {
      }
      if (seq && seq->state == SeqState::kHeld) engine_.hold_end(s.seq, outcome);
    });
  } catch (const Error &) {
  }
  (outcome == PKV_TRANSFER_DONE ? stats_.served_done : stats_.served_failed)++;
  if (outcome == PKV_TRANSFER_DONE) stats_.bytes_served += s.bytes;
  done_.push_back(
      pkv_agent_completion{s.seq, outcome, 1, outcome == PKV_TRANSFER_DONE ? s.bytes : 0});
}

void UcxAgent::on_pull_ack(Pull &p, const AgentPullAck &r) {
  if (!r.held)
    return fail(p, "the producer's hold ended while this engine read it (its timeout, or its "
                   "host): the bytes cannot be trusted");
  finish(p, PKV_TRANSFER_DONE);
}

void UcxAgent::fail(Pull &p, const std::string &why) {
  if (p.state == Pull::kFailing) return;
  // The producer ends its hold (when it still hears): this engine computes the prompt itself.
  AgentPullEnd end;
  end.read = 0;
  send(peers_[p.peer], AgentMsg::kPullEnd, p.id, encode(end));
  p.state = Pull::kFailing;
  p.why = why;
}

void UcxAgent::finish(Pull &p, uint32_t outcome) {
  try {
    with_engine([&] { engine_.receive_end(p.local_seq, outcome); });
  } catch (const Error &) {  // the host ended it itself meanwhile: nothing left to end
  }
  (outcome == PKV_TRANSFER_DONE ? stats_.pulls_done : stats_.pulls_failed)++;
  stats_.pulls_in_flight--;
  done_.push_back(pkv_agent_completion{p.local_seq, outcome, 0, p.bytes});
  pulls_.erase(p.id);
}

// ---------------------------------------------------------------- the calls

std::string UcxAgent::address() const {
  if (address_.empty())
    pkv::fail(PKV_ERR_STATE, "pkv_agent_address: this agent does not listen (listen_address NULL)");
  return address_;
}

uint32_t UcxAgent::connect(const char *text) {
  const sockaddr_in sin = sockaddr_of(parse_agent_address(text, "address"));
  ucp_ep_params_t ep;
  std::memset(&ep, 0, sizeof ep);
  ep.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  ep.sockaddr.addr = reinterpret_cast<const sockaddr *>(&sin);
  ep.sockaddr.addrlen = sizeof sin;
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = on_ep_error;
  ep.err_handler.arg = this;
  ucp_ep_h h = nullptr;
  const ucs_status_t st = ucp_ep_create(worker_, &ep, &h);
  if (st != UCS_OK)
    pkv::fail(PKV_ERR_DEVICE, "pkv_agent_connect %s: UCX: %s", text, ucs_status_string(st));
  const uint32_t id = add_peer(h);
  send_hello(peers_[id]);
  const Clock::time_point stop = Clock::now() + std::chrono::milliseconds(params_.timeout_ms);
  while (!peers_[id].ready && !peers_[id].dead && Clock::now() < stop) {
    step();
    if (!peers_[id].ready && !peers_[id].dead)
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  if (peers_[id].ready) return id;
  const bool mismatch = peers_[id].why.find("fingerprints differ") != std::string::npos;
  const std::string why = peers_[id].dead ? peers_[id].why : "the handshake timed out";
  if (!peers_[id].dead) kill(id, why);
  pkv::fail(mismatch ? PKV_ERR_INVALID_ARGUMENT : PKV_ERR_DEVICE, "pkv_agent_connect %s: %s", text,
            why.c_str());
}

void UcxAgent::pull(uint32_t peer, uint64_t remote_seq, uint64_t local_seq) {
  PKV_REQUIRE(peer < peers_.size(), "peer %u: this agent has %zu peers", peer, peers_.size());
  if (peers_[peer].dead || !peers_[peer].ready)
    pkv::fail(PKV_ERR_STATE, "peer %u is gone: %s", peer,
              peers_[peer].why.empty() ? "no handshake" : peers_[peer].why.c_str());
  for (const auto &[id, p] : pulls_)
    if (p.local_seq == local_seq)
      pkv::fail(PKV_ERR_STATE, "a pull into sequence %llu is in flight already",
                (unsigned long long)local_seq);
  Pull p;
  with_engine([&] {
    const Sequence &s = engine_.seq(local_seq);
    if (s.state != SeqState::kReceiving)
      pkv::fail(PKV_ERR_STATE, "sequence %llu is %s, not receiving its remote KV",
                (unsigned long long)local_seq, state_name(s.state));
    const struct pkv_seq_info info = engine_.seq_info(local_seq);
    p.local = engine_.seq_segments(params_.rank, local_seq, info.remote_first_block,
                                   info.remote_num_blocks);
    p.local_state = engine_.state_segment(params_.rank, local_seq);
    AgentPullRequest r;
    r.seq = remote_seq;
    r.first_block = info.remote_first_block;
    r.num_blocks = info.remote_num_blocks;
    p.id = next_pull_++;
    p.peer = peer;
    p.local_seq = local_seq;
    p.remote_seq = remote_seq;
    p.deadline = Clock::now() + std::chrono::milliseconds(params_.timeout_ms);
    send(peers_[peer], AgentMsg::kPullRequest, p.id, encode(r));
  });
  stats_.pulls_in_flight++;
  pulls_.emplace(p.id, std::move(p));
}

size_t UcxAgent::progress(uint32_t wait_ms, pkv_agent_completion *out, size_t cap) {
  const Clock::time_point stop = Clock::now() + std::chrono::milliseconds(wait_ms);
  for (;;) {
    step();
    if (!done_.empty() || Clock::now() >= stop) break;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  size_t n = 0;
  for (; n < cap && !done_.empty(); ++n) {
    out[n] = done_.front();
    done_.pop_front();
  }
  return n;
}

}  // namespace

std::unique_ptr<Agent> make_ucx_agent(Engine &e, const pkv_agent_params &params) {
  return std::make_unique<UcxAgent>(e, params);
}

}  // namespace pkv
