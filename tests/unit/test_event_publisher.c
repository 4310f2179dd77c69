/* KV events on the wire, through pkv.h only (suite events decodes the messages themselves, in
 * Python): pkv_event_publisher_params' defaults and checks (format among them, and a 0.3 caller's
 * shorter struct getting the default format), an endpoint that cannot be bound, a
 * taken port, pkv_event_publisher_info before and after a workload whose every event is published
 * (the counters against the in-process queue of the same engine), destroy with events queued.
 * A build without libzmq refuses a publisher with PKV_ERR_UNSUPPORTED, and the rest is skipped. */
#define _POSIX_C_SOURCE 200809L
#include <stddef.h>
#include <time.h>

#include "test_util.h"

enum { BS = 4 };

static pkv_status create(const pkv_event_publisher_params *pub, uint32_t num_blocks,
                         uint32_t kv_events, pkv_engine **out) {
  pkv_engine_params p;
  tu_params(&p, BS, num_blocks);
  p.enable_kv_events = kv_events;
  p.event_publisher = pub;
  *out = NULL;
  return pkv_engine_create(&p, out);
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static void test_params_init(void) {
  pkv_event_publisher_params p;
  memset(&p, 0xab, sizeof p);
  CHECK_OK(pkv_event_publisher_params_init(&p, sizeof p));
  CHECK_EQ_INT(p.struct_size, sizeof p);
  CHECK(p.endpoint == NULL && p.replay_endpoint == NULL && p.topic == NULL);
  CHECK_EQ_INT(p.data_parallel_rank, 0);
  CHECK_EQ_INT(p.replay_buffer_batches, 0);
  CHECK_EQ_INT(p.send_hwm, 0);
  CHECK_EQ_INT(p.max_queue_events, 0);
  CHECK_EQ_INT(p.max_batch_events, 0);
  CHECK_EQ_INT(p.format, PKV_EVENT_FORMAT_MAP);
  CHECK_EQ_INT(p.reserved0, 0);
  CHECK_STATUS(pkv_event_publisher_params_init(NULL, sizeof p), PKV_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(pkv_event_publisher_params_init(&p, 8), PKV_ERR_INVALID_ARGUMENT);
}

/* Every refusal of the parameters, before anything is bound. */
static void test_bad_params(void) {
  pkv_event_publisher_params p;
  pkv_engine *e;
  pkv_event_publisher_params_init(&p, sizeof p);
  CHECK_STATUS(create(&p, 16, 0, &e), PKV_ERR_INVALID_ARGUMENT); /* no endpoint */
  CHECK(strstr(pkv_last_error(), "endpoint") != NULL);
  CHECK(e == NULL);
  p.endpoint = "";
  CHECK_STATUS(create(&p, 16, 0, &e), PKV_ERR_INVALID_ARGUMENT);
  static char long_endpoint[PKV_MAX_EVENT_ENDPOINT_BYTES + 2];
  memset(long_endpoint, 'a', sizeof long_endpoint - 1);
  p.endpoint = long_endpoint;
  CHECK_STATUS(create(&p, 16, 0, &e), PKV_ERR_INVALID_ARGUMENT);
  p.endpoint = "tcp://127.0.0.1:*";
  p.replay_endpoint = "";
  CHECK_STATUS(create(&p, 16, 0, &e), PKV_ERR_INVALID_ARGUMENT);
  p.replay_endpoint = NULL;
  p.send_hwm = (1u << 24) + 1;
  CHECK_STATUS(create(&p, 16, 0, &e), PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "send_hwm") != NULL);
  p.send_hwm = 0;
  p.max_queue_events = (1u << 26) + 1;
  CHECK_STATUS(create(&p, 16, 0, &e), PKV_ERR_INVALID_ARGUMENT);
  p.max_queue_events = 0;
  p.format = PKV_EVENT_FORMAT_ARRAY + 1;
  CHECK_STATUS(create(&p, 16, 0, &e), PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "event_publisher->format 2") != NULL);
  CHECK(strstr(pkv_last_error(), "PKV_EVENT_FORMAT_MAP") != NULL);
  CHECK(e == NULL);
  p.format = PKV_EVENT_FORMAT_MAP;
  p.reserved0 = 1;
  CHECK_STATUS(create(&p, 16, 0, &e), PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "reserved0") != NULL);
  p.reserved0 = 0;
  p.struct_size = 8;
  CHECK_STATUS(create(&p, 16, 0, &e), PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "struct_size") != NULL);
}

/* A caller built against 0.3 (its struct ends before format) gets the default, MAP, whatever
 * lies past its struct; a struct that ends inside the 0.3 fields is refused. */
static void test_old_caller(void) {
  struct {
    pkv_event_publisher_params p;
    uint32_t garbage[4];
  } in;
  memset(&in, 0xff, sizeof in);
  pkv_event_publisher_params_init(&in.p, sizeof in.p);
  in.p.struct_size = (uint32_t)offsetof(pkv_event_publisher_params, format);
  in.p.format = 7;
  in.p.reserved0 = 7;
  in.p.endpoint = "tcp://127.0.0.1:*";
  pkv_engine *e;
  if (!CHECK_OK(create(&in.p, 16, 0, &e))) return;
  pkv_engine_params got;
  pkv_engine_params_init(&got, sizeof got);
  CHECK_OK(pkv_engine_params_get(e, &got));
  CHECK(got.event_publisher != NULL && got.event_publisher->format == PKV_EVENT_FORMAT_MAP);
  pkv_engine_destroy(e);
  in.p.struct_size = (uint32_t)offsetof(pkv_event_publisher_params, format) - 8;
  CHECK_STATUS(create(&in.p, 16, 0, &e), PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "struct_size") != NULL);
}

/* Whether this build publishes at all (UNSUPPORTED, with a message that says why, when not). */
static int publisher_built(void) {
  pkv_event_publisher_params p;
  pkv_event_publisher_params_init(&p, sizeof p);
  p.endpoint = "tcp://127.0.0.1:*";
  pkv_engine *e;
  pkv_status s = create(&p, 16, 0, &e);
  if (s == PKV_ERR_UNSUPPORTED) {
    CHECK(strstr(pkv_last_error(), "libzmq") != NULL);
    printf("built without libzmq: the publisher is refused (checked); skipping the rest\n");
    return 0;
  }
  CHECK_OK(s);
  pkv_engine_destroy(e);
  return s == PKV_OK;
}

static void test_bind_errors(void) {
  pkv_event_publisher_params p;
  pkv_event_publisher_params_init(&p, sizeof p);
  pkv_engine *e, *other;
  p.endpoint = "nonsense";
  CHECK_STATUS(create(&p, 16, 0, &e), PKV_ERR_EVENTS);
  CHECK(strstr(pkv_last_error(), "nonsense") != NULL);
  CHECK(e == NULL);
  p.endpoint = "tcp://127.0.0.1:*";
  p.replay_endpoint = "tcp://256.0.0.1:1"; /* the PUB socket binds, the ROUTER cannot */
  CHECK_STATUS(create(&p, 16, 0, &e), PKV_ERR_EVENTS);
  CHECK(strstr(pkv_last_error(), "256.0.0.1") != NULL);

  /* A taken port: the second engine is refused and the first keeps publishing. */
  p.replay_endpoint = "tcp://127.0.0.1:*";
  if (!CHECK_OK(create(&p, 16, 0, &e))) return;
  struct pkv_event_publisher_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK_OK(pkv_event_publisher_info(e, &info));
  CHECK(strncmp(info.endpoint, "tcp://127.0.0.1:", 16) == 0 &&
        strcmp(info.endpoint, "tcp://127.0.0.1:*") != 0);
  CHECK(strncmp(info.replay_endpoint, "tcp://127.0.0.1:", 16) == 0);
  CHECK(strcmp(info.endpoint, info.replay_endpoint) != 0);
  char taken[PKV_MAX_EVENT_ENDPOINT_BYTES];
  snprintf(taken, sizeof taken, "%s", info.endpoint);
  p.endpoint = taken;
  p.replay_endpoint = NULL;
  CHECK_STATUS(create(&p, 16, 0, &other), PKV_ERR_EVENTS);
  CHECK(strstr(pkv_last_error(), taken) != NULL);
  CHECK(other == NULL);
  int32_t t[8];
  tu_fill(t, 8, 1);
  uint64_t s = tu_alloc(e, t, 8, NULL);
  tu_compute1(e, s);
  for (int i = 0; i < 200 && info.events_published < 2; i++) {
    sleep_ms(10);
    CHECK_OK(pkv_event_publisher_info(e, &info));
  }
  CHECK_EQ_INT(info.events_published, 2);
  CHECK_EQ_INT(info.next_seq, 1);
  pkv_engine_destroy(e);
}

static void test_info_calls(void) {
  pkv_engine *e;
  CHECK_OK(create(NULL, 16, 0, &e));
  struct pkv_event_publisher_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK_ERR(e, pkv_event_publisher_info(e, &info), PKV_ERR_STATE);
  pkv_engine_destroy(e);

  pkv_event_publisher_params p;
  pkv_event_publisher_params_init(&p, sizeof p);
  p.endpoint = "tcp://127.0.0.1:*";
  p.topic = "";
  CHECK_OK(create(&p, 16, 0, &e));
  CHECK_ERR(e, pkv_event_publisher_info(e, NULL), PKV_ERR_INVALID_ARGUMENT);
  info.struct_size = 4;
  CHECK_ERR(e, pkv_event_publisher_info(e, &info), PKV_ERR_INVALID_ARGUMENT);
  info.struct_size = sizeof info;
  CHECK_OK(pkv_event_publisher_info(e, &info));
  CHECK_EQ_INT(info.next_seq, 0);
  CHECK_EQ_INT(info.events_published, 0);
  CHECK_EQ_INT(info.events_dropped, 0);
  CHECK_EQ_INT(info.replay_requests, 0);
  CHECK(info.replay_endpoint != NULL && info.replay_endpoint[0] == '\0');
  CHECK_STATUS(pkv_event_publisher_info(NULL, &info), PKV_ERR_INVALID_ARGUMENT);
  pkv_engine_destroy(e);
}

/* A workload with sharing, eviction and a reset: every event the in-process queue gets is
 * published, none dropped; batches are at most max_batch_events events. */
static void test_everything_published(void) {
  pkv_event_publisher_params p;
  pkv_event_publisher_params_init(&p, sizeof p);
  p.endpoint = "tcp://127.0.0.1:*";
  p.max_batch_events = 3;
  pkv_engine *e;
  if (!CHECK_OK(create(&p, 24, 1, &e))) return;
  uint64_t in_process = 0;
  pkv_kv_event ev[64];
  uint32_t got;
  uint32_t seed = 12345;
  for (int round = 0; round < 60; round++) {
    int32_t t[40];
    for (uint32_t i = 0; i < 40; i++) {
      seed = seed * 1103515245u + 12345u;
      t[i] = i < 8 ? (int32_t)i : (int32_t)(seed >> 20 & 7); /* a shared first 2 blocks */
    }
    uint32_t n = 9 + (uint32_t)round % 30;
    uint64_t s = 0;
    if (pkv_allocate(e, t, n, NULL, &s, NULL) == PKV_OK) {
      tu_compute1(e, s);
      CHECK_OK(pkv_release(e, s));
    }
    if (round == 40) CHECK_OK(pkv_reset_prefix_cache(e));
    do {
      CHECK_OK(pkv_drain_kv_events(e, ev, 64, &got));
      for (uint32_t i = 0; i < got; i++) in_process += ev[i].type != PKV_EVENT_OVERFLOW;
    } while (got == 64);
  }
  CHECK(in_process > 60);
  struct pkv_event_publisher_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  for (int i = 0; i < 500; i++) {
    CHECK_OK(pkv_event_publisher_info(e, &info));
    if (info.events_published == in_process) break;
    sleep_ms(10);
  }
  CHECK_EQ_INT(info.events_published, in_process);
  CHECK_EQ_INT(info.events_dropped, 0);
  CHECK_EQ_INT(info.events_queued, 0);
  CHECK(info.next_seq >= (in_process + 2) / 3);
  /* Queued events at destroy: sent (no subscriber: dropped by ZeroMQ), and destroy returns. */
  int32_t t[16];
  tu_fill(t, 16, 100);
  uint64_t s = tu_alloc(e, t, 16, NULL);
  tu_compute1(e, s);
  pkv_engine_destroy(e);
}

/* A queue of one event: a call staging two drops both, and an AllBlocksCleared goes instead. */
static void test_overflow(void) {
  pkv_event_publisher_params p;
  pkv_event_publisher_params_init(&p, sizeof p);
  p.endpoint = "tcp://127.0.0.1:*";
  p.max_queue_events = 1;
  pkv_engine *e;
  if (!CHECK_OK(create(&p, 16, 1, &e))) return;
  int32_t t[9];
  tu_fill(t, 9, 1);
  uint64_t s = tu_alloc(e, t, 9, NULL);
  tu_compute1(e, s); /* seals 2 blocks in one call: 2 STORED */
  struct pkv_event_publisher_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  for (int i = 0; i < 200; i++) {
    CHECK_OK(pkv_event_publisher_info(e, &info));
    if (info.events_published == 1) break;
    sleep_ms(10);
  }
  CHECK_EQ_INT(info.events_dropped, 2);
  CHECK_EQ_INT(info.events_published, 1); /* the AllBlocksCleared */
  /* The in-process queue is its own: both events are there. */
  pkv_kv_event ev[4];
  uint32_t n = 0;
  CHECK_OK(pkv_drain_kv_events(e, ev, 4, &n));
  CHECK_EQ_INT(n, 2);
  pkv_engine_destroy(e);
}

int main(void) {
  TU_RUN(test_params_init);
  TU_RUN(test_bad_params);
  if (publisher_built()) {
    TU_RUN(test_bind_errors);
    TU_RUN(test_old_caller);
    TU_RUN(test_info_calls);
    TU_RUN(test_everything_published);
    TU_RUN(test_overflow);
  }
  return tu_summary();
}
