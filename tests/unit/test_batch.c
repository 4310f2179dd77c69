/* Step planning: the batch view of a mixed batch (a decode, a chunk of a long prompt, a prefill
 * after a prefix hit), chunked prefill, abort, and in_batch. */
#include "test_util.h"

enum { BS = 4 };

typedef struct {
  uint64_t seq;
  uint32_t first; /* first new position */
  uint32_t count; /* new tokens */
  int32_t table[16];
  uint32_t nblk;
} member;

/* The view's rows for member i, given its first row and first listed block. */
static void check_member(const pkv_batch_view *v, uint32_t i, const member *m, int32_t row,
                         int32_t blk) {
  uint32_t ctx = m->first + m->count, listed = (ctx + BS - 1) / BS;
  CHECK_EQ_INT(v->seq_ids[i], m->seq);
  CHECK_EQ_INT(v->query_start[i], row);
  CHECK_EQ_INT(v->query_start[i + 1], row + (int32_t)m->count);
  CHECK_EQ_INT(v->context_lens[i], ctx);
  CHECK_EQ_INT(v->block_indptr[i], blk);
  CHECK_EQ_INT(v->block_indptr[i + 1], blk + (int32_t)listed);
  CHECK_EQ_INT(v->last_block_len[i], ctx - (listed - 1) * BS);
  for (uint32_t k = 0; k < m->count; k++) {
    uint32_t pos = m->first + k;
    CHECK_EQ_INT(v->positions[row + k], pos);
    CHECK_EQ_INT(v->slot_mapping[row + k], (int64_t)m->table[pos / BS] * BS + pos % BS);
  }
  for (uint32_t k = 0; k < listed; k++) CHECK_EQ_INT(v->block_indices[blk + k], m->table[k]);
  for (uint32_t k = 0; k < v->max_blocks_per_seq; k++)
    CHECK_EQ_INT(v->block_tables[i * v->max_blocks_per_seq + k], k < listed ? m->table[k] : -1);
}

/* d: 6 computed + 1 appended (decode); l: 30-token prompt, 8 computed, next chunk 10;
 * h: 13-token prompt whose first 8 tokens hit q's blocks. */
static void make_members(pkv_engine *e, member *m) {
  int32_t t[64];
  tu_fill(t, 64, 1);
  m[0].seq = tu_alloc(e, t, 6, NULL);
  tu_compute1(e, m[0].seq);
  CHECK_OK(pkv_append(e, m[0].seq, t + 6, 1));
  m[0].first = 6, m[0].count = 1;

  m[1].seq = tu_alloc(e, t + 20, 30, NULL);
  uint32_t eight = 8;
  pkv_batch *b = NULL;
  if (CHECK_OK(pkv_batch_begin(e, &m[1].seq, &eight, 1, &b))) CHECK_OK(pkv_batch_end(b));
  CHECK_EQ_INT(tu_info(e, m[1].seq).num_computed_tokens, 8);
  m[1].first = 8, m[1].count = 10;

  int32_t q[9], h[13];
  tu_fill(q, 9, 500);
  uint64_t qs = tu_alloc(e, q, 9, NULL);
  tu_compute1(e, qs);
  memcpy(h, q, 8 * sizeof q[0]);
  tu_fill(h + 8, 5, 900);
  uint32_t cached = 0;
  m[2].seq = tu_alloc(e, h, 13, &cached);
  CHECK_EQ_INT(cached, 8);
  m[2].first = 8, m[2].count = 5;
  for (int i = 0; i < 3; i++) m[i].nblk = tu_table(e, m[i].seq, m[i].table, 16);
}

static void test_mixed_batch_view(void) {
  pkv_engine *e = tu_engine(BS, 64, 0);
  if (!e) return;
  member m[3];
  memset(m, 0, sizeof m);
  make_members(e, m);
  uint64_t seqs[3] = {m[0].seq, m[1].seq, m[2].seq};
  uint32_t counts[3] = {1, 10, 5};
  pkv_batch *b = NULL;
  if (!CHECK_OK(pkv_batch_begin(e, seqs, counts, 3, &b))) return;
  pkv_batch_view v = tu_view(b);
  CHECK_EQ_INT(v.num_seqs, 3);
  CHECK_EQ_INT(v.num_tokens, 16);
  CHECK_EQ_INT(v.block_size, BS);
  CHECK_EQ_INT(v.num_copies, 0);
  CHECK_EQ_INT(v.max_query_len, 10);
  CHECK_EQ_INT(v.max_context_len, 18);
  CHECK_EQ_INT(v.max_blocks_per_seq, 5); /* l lists ceil(18/4) blocks */
  CHECK_EQ_INT(v.query_start[0], 0);
  check_member(&v, 0, &m[0], 0, 0);
  check_member(&v, 1, &m[1], 1, 2);
  check_member(&v, 2, &m[2], 11, 7);
  CHECK_EQ_INT(v.block_indptr[3], 11);
  CHECK_EQ_INT(tu_info(e, m[1].seq).in_batch, 1);
  CHECK_OK(pkv_batch_end(b));
  CHECK_EQ_INT(tu_info(e, m[0].seq).num_computed_tokens, 7);
  CHECK_EQ_INT(tu_info(e, m[1].seq).num_computed_tokens, 18);
  CHECK_EQ_INT(tu_info(e, m[2].seq).num_computed_tokens, 13);
  CHECK_EQ_INT(tu_info(e, m[1].seq).in_batch, 0);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* A long prompt computed in chunks: positions continue, blocks are sealed as they fill. */
static void test_chunked_prefill(void) {
  pkv_engine *e = tu_engine(BS, 32, 0);
  if (!e) return;
  int32_t t[23];
  tu_fill(t, 23, 40);
  uint64_t a = tu_alloc(e, t, 23, NULL);
  const uint32_t chunks[3] = {5, 9, 9};
  uint32_t done = 0;
  for (int c = 0; c < 3; c++) {
    pkv_batch *b = NULL;
    if (!CHECK_OK(pkv_batch_begin(e, &a, &chunks[c], 1, &b))) break;
    pkv_batch_view v = tu_view(b);
    CHECK_EQ_INT(v.num_tokens, chunks[c]);
    CHECK_EQ_INT(v.positions[0], done);
    CHECK_EQ_INT(v.context_lens[0], done + chunks[c]);
    CHECK_OK(pkv_batch_end(b));
    done += chunks[c];
    CHECK_EQ_INT(tu_stats(e).num_prefix_nodes, done / BS);
    CHECK_EQ_INT(tu_info(e, a).num_computed_tokens, done);
  }
  /* all computed: a batch over it with NULL counts has nothing to do */
  pkv_batch *b = NULL;
  CHECK_ERR(e, pkv_batch_begin(e, &a, NULL, 1, &b), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* Abort computes nothing and seals nothing; the same plan can be begun again. */
static void test_abort(void) {
  pkv_engine *e = tu_engine(BS, 32, 0);
  if (!e) return;
  int32_t t[9];
  tu_fill(t, 9, 1);
  uint64_t a = tu_alloc(e, t, 9, NULL);
  pkv_batch *b = NULL;
  if (CHECK_OK(pkv_batch_begin(e, &a, NULL, 1, &b))) pkv_batch_abort(b);
  struct pkv_seq_info info = tu_info(e, a);
  CHECK_EQ_INT(info.num_computed_tokens, 0);
  CHECK_EQ_INT(info.in_batch, 0);
  CHECK_EQ_INT(tu_stats(e).num_prefix_nodes, 0);
  uint32_t cached = 99;
  CHECK_OK(pkv_allocate_query(e, t, 9, NULL, NULL, &cached));
  CHECK_EQ_INT(cached, 0);
  if (CHECK_OK(pkv_batch_begin(e, &a, NULL, 1, &b))) {
    CHECK_EQ_INT(tu_view(b).num_tokens, 9);
    CHECK_OK(pkv_batch_end(b));
  }
  CHECK_OK(pkv_allocate_query(e, t, 9, NULL, NULL, &cached));
  CHECK_EQ_INT(cached, 8);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* Same-step duplicates: two identical prompts in one batch get separate blocks (no hit on KV that
 * is not written yet), and both are sealed afterwards. */
static void test_same_step_duplicates(void) {
  pkv_engine *e = tu_engine(BS, 32, 0);
  if (!e) return;
  int32_t t[9];
  tu_fill(t, 9, 1);
  uint32_t c1 = 99, c2 = 99;
  uint64_t s[2];
  s[0] = tu_alloc(e, t, 9, &c1);
  s[1] = tu_alloc(e, t, 9, &c2);
  CHECK_EQ_INT(c1, 0);
  CHECK_EQ_INT(c2, 0);
  int32_t t1[3], t2[3];
  tu_table(e, s[0], t1, 3);
  tu_table(e, s[1], t2, 3);
  for (int i = 0; i < 3; i++) CHECK(t1[i] != t2[i]);
  tu_compute(e, s, 2);
  CHECK_OK(pkv_release(e, s[0]));
  CHECK_OK(pkv_release(e, s[1]));
  CHECK_EQ_INT(tu_stats(e).num_cached_blocks, 4); /* two copies of each of 2 nodes */
  CHECK_EQ_INT(tu_stats(e).num_prefix_nodes, 2);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

int main(void) {
  TU_RUN(test_mixed_batch_view);
  TU_RUN(test_chunked_prefill);
  TU_RUN(test_abort);
  TU_RUN(test_same_step_duplicates);
  return tu_summary();
}
