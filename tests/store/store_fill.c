/* store_fill - writes a few blocks into a store for the tool's tests (test_store_tool.sh):
 *   store_fill dir DIR            a file store in DIR
 *   store_fill redis PORT PREFIX  a Redis store on 127.0.0.1:PORT under PREFIX
 * An engine writing through computes two prompts of 13 tokens in blocks of 4 (the second under a
 * salt): 6 blocks, in two chains of 3. Destroying the engine finishes the writes. Exit 0 or 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pkv/pkv.h>

static int ok(pkv_status s, const char *what) {
  if (s == PKV_OK) return 1;
  fprintf(stderr, "store_fill: %s: %s (%s)\n", what, pkv_last_error(), pkv_status_string(s));
  return 0;
}

int main(int argc, char **argv) {
  pkv_store_params sp;
  pkv_store_params_init(&sp, sizeof sp);
  if (argc == 3 && strcmp(argv[1], "dir") == 0) {
    sp.kind = PKV_STORE_FILE;
    sp.path = argv[2];
  } else if (argc == 4 && strcmp(argv[1], "redis") == 0) {
    sp.kind = PKV_STORE_REDIS;
    sp.port = (uint32_t)strtoul(argv[2], NULL, 10);
    sp.key_prefix = argv[3];
  } else {
    fprintf(stderr, "usage: store_fill dir DIR | store_fill redis PORT PREFIX\n");
    return 2;
  }
  pkv_engine_params p;
  pkv_engine_params_init(&p, sizeof p);
  p.num_layers = 2;
  p.num_q_heads = 4;
  p.num_kv_heads = 2;
  p.head_dim = 8;
  p.dtype = PKV_DTYPE_F32;
  p.device = PKV_DEVICE_CPU;
  p.block_size = 4;
  p.num_blocks = 16;
  p.num_threads = 1;
  p.host_num_blocks = 8;
  p.store = &sp;
  pkv_engine *e = NULL;
  if (!ok(pkv_engine_create(&p, &e), "engine")) return 1;
  int32_t t[13];
  for (int i = 0; i < 13; i++) t[i] = 100 + i;
  int good = 1;
  for (int i = 0; i < 2 && good; i++) {
    pkv_seq_params q;
    pkv_seq_params_init(&q, sizeof q);
    q.cache_salt = "tenant";
    q.cache_salt_len = i ? 6 : 0;
    uint64_t seq = 0;
    pkv_batch *b = NULL;
    good = ok(pkv_allocate(e, t, 13, &q, &seq, NULL), "allocate") &&
           ok(pkv_batch_begin(e, &seq, NULL, 1, &b), "batch") &&
           ok(pkv_batch_end(b), "batch end") && ok(pkv_release(e, seq), "release");
  }
  pkv_engine_destroy(e);
  return good ? 0 : 1;
}
