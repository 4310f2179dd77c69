/* Block sizes 1, 7 and 16: allocation, slot mapping, sealing and hits, with any block size. */
#include "test_util.h"

static uint32_t ceil_div(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

/* One step computing everything seq has reserved; checks positions and slots from first on. */
static void compute_checked(pkv_engine *e, uint64_t seq, uint32_t bs, uint32_t first,
                            uint32_t total) {
  int32_t table[64];
  uint32_t nblk = tu_table(e, seq, table, 64);
  CHECK_EQ_INT(nblk, ceil_div(total, bs));
  pkv_batch *b = NULL;
  if (!CHECK_OK(pkv_batch_begin(e, &seq, NULL, 1, &b))) return;
  pkv_batch_view v = tu_view(b);
  CHECK_EQ_INT(v.block_size, bs);
  CHECK_EQ_INT(v.num_tokens, total - first);
  CHECK_EQ_INT(v.context_lens[0], total);
  CHECK_EQ_INT(v.last_block_len[0], total - (nblk - 1) * bs);
  CHECK_EQ_INT(v.block_indptr[1], nblk);
  for (uint32_t i = 0; i < v.num_tokens && i < total; i++) {
    uint32_t pos = first + i;
    CHECK_EQ_INT(v.positions[i], pos);
    CHECK_EQ_INT(v.slot_mapping[i], (int64_t)table[pos / bs] * bs + pos % bs);
  }
  for (uint32_t i = 0; i < nblk; i++) CHECK_EQ_INT(v.block_indices[i], table[i]);
  CHECK_OK(pkv_batch_end(b));
}

static void run(uint32_t bs) {
  printf("block_size %u\n", bs);
  pkv_engine *e = tu_engine(bs, 64, 0);
  if (!e) return;
  int32_t t[128], tb[128];
  tu_fill(t, 128, 1);
  uint32_t len = 3 * bs + 2, cached = 99;
  uint64_t a = tu_alloc(e, t, len, &cached);
  CHECK_EQ_INT(cached, 0);
  CHECK_EQ_INT(tu_info(e, a).num_blocks, ceil_div(len, bs));
  CHECK_EQ_INT(tu_stats(e).num_prefix_nodes, 0); /* nothing sealed at allocate */
  compute_checked(e, a, bs, 0, len);
  CHECK_EQ_INT(tu_stats(e).num_prefix_nodes, len / bs);

  memcpy(tb, t, 3 * bs * sizeof t[0]);
  tb[3 * bs] = 999;
  uint64_t b = tu_alloc(e, tb, 3 * bs + 1, &cached);
  CHECK_EQ_INT(cached, 3 * bs);
  int32_t ta_[64], tb_[64];
  tu_table(e, a, ta_, 64);
  tu_table(e, b, tb_, 64);
  CHECK(memcmp(ta_, tb_, 3 * sizeof ta_[0]) == 0);
  CHECK(tb_[3] != ta_[3]);

  /* append a block's worth: crosses a block boundary; the block it fills is sealed */
  CHECK_OK(pkv_append(e, a, t + len, bs));
  CHECK_EQ_INT(tu_info(e, a).num_blocks, ceil_div(len + bs, bs));
  compute_checked(e, a, bs, len, len + bs);
  uint64_t c = tu_alloc(e, t, 4 * bs + 1, &cached);
  CHECK_EQ_INT(cached, 4 * bs);
  CHECK_EQ_INT(tu_info(e, c).num_computed_tokens, 4 * bs);

  /* whole-block prompts recompute their last block */
  tu_alloc(e, t, 2 * bs, &cached);
  CHECK_EQ_INT(cached, bs);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

static void test_block_size_1(void) { run(1); }

static void test_block_size_7(void) { run(7); }

static void test_block_size_16(void) { run(16); }

int main(void) {
  TU_RUN(test_block_size_1);
  TU_RUN(test_block_size_7);
  TU_RUN(test_block_size_16);
  return tu_summary();
}
