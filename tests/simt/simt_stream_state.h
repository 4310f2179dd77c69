// Internal to the emulator's streams (simt_stream.cpp) and captures and graphs (simt_graph.cpp):
// the state both share, under one lock.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "simt_stream.h"

namespace simt {

struct Stream;

// Satisfied once `stream` has run everything it queued up to and including `seq`.
struct Dep {
  Stream *stream;
  uint64_t seq;
};

// One queued item of a stream (deferred mode). Sequence numbers are global and increase, so a
// dependency always points at an earlier item and running them cannot cycle.
struct Work {
  uint64_t seq = 0;
  bool marker = false;  // an event record or a wait: no work of its own
  std::vector<Dep> deps;
  std::function<void()> run;
};

// What a capture recorded, in the order it was submitted (an order every dependency between the
// captured streams allows); a graph replays it in that order.
using Nodes = std::vector<std::function<void()>>;

struct Capture {
  Nodes nodes;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id thread;
  unsigned long long id = 0;
  bool active = true;  // until cudaStreamEndCapture
  bool invalidated = false;
  Stream *origin = nullptr;
  std::vector<Stream *> members;      // origin first, then the streams that joined
  std::map<Stream *, size_t> joined;  // per member: how many of its nodes others waited on
};

struct Stream {
  bool blocking = true;  // syncs with the legacy null stream (not cudaStreamNonBlocking)
  bool live = true;      // kept after cudaStreamDestroy so old dependencies stay valid
  std::deque<Work> queue;
  uint64_t last_seq = 0;             // of the last item it queued
  std::shared_ptr<Capture> capture;  // set while it captures (the origin or a joined stream)
  size_t captured = 0;               // nodes it added to `capture`
};

struct Event {
  Stream *stream = nullptr;  // of the last record; nullptr before any
  uint64_t seq = 0;
  std::shared_ptr<Capture> capture;  // the record was captured, not run
  size_t capture_pos = 0;            // stream->captured at that record
};

std::recursive_mutex &stream_mutex();
StreamCounters &counters();  // under stream_mutex()
bool deferred();

// The stream a handle names (0, cudaStreamLegacy and cudaStreamPerThread: the null stream);
// nullptr for a destroyed or unknown one.
Stream *find_stream(cudaStream_t handle);
cudaStream_t handle_of(Stream *s);
Stream *null_stream();
// Every stream ever created (destroyed ones stay, drained and marked).
const std::vector<std::unique_ptr<Stream>> &all_streams();

// Runs `run` on `s` now (immediate mode) or queues it after `deps` and the null stream's
// implicit syncs (deferred). Returns the item's sequence number.
uint64_t enqueue(Stream *s, std::function<void()> run, bool marker, std::vector<Dep> deps = {});
void run_through(Stream *s, uint64_t seq);
void run_all();

// Stream work as the API calls submit it: recorded when the stream captures (refused when
// `pageable`: an async copy with pageable host memory), else enqueued. `api` names the call.
cudaError_t submit_work(const char *api, cudaStream_t handle, std::function<void()> run,
                        bool pageable);

// The refusal of `api` during a capture: counted and named; `cap` (when given) invalidated.
cudaError_t refuse(const char *api, Capture *cap, cudaError_t err);
// Non-success when this thread may not make a potentially unsafe call now (a capture in the
// global or thread-local mode): the refusal, counted, the captures that forbid it invalidated.
cudaError_t unsafe_call(const char *api);
// cudaErrorStreamCaptureImplicit when work on the null stream would sync with a capturing
// blocking stream (that capture is invalidated); else success.
cudaError_t null_stream_conflict(const char *api);

}  // namespace simt
