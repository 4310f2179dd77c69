/* e2e_recurrent.h - the recurrent model's prefix hits from state checkpoints, end to end: the
 * pieces e2e_recurrent.c (batches the test plans: pkv_allocate, pkv_batch_begin, fork and
 * preemption) and e2e_recurrent_sched.c (pkv_submit / pkv_step) share. */
#ifndef PKV_TESTS_E2E_RECURRENT_H
#define PKV_TESTS_E2E_RECURRENT_H

#include "e2e_model.h"

/* The prompts (block size BS = 7): A = P + a (30 tokens), B = P + b (30), C = P + c (27),
 * D = A's first 29 tokens + d (32): B and C share P's 3 full blocks (21 tokens) with A, D shares
 * 4 (28 tokens). */
enum { P_LEN = 24, A_LEN = 30, B_LEN = 30, C_LEN = 27, D_LEN = 32 };

/* A checkpoint policy and the hits its checkpoints must give. With chunks ending on boundaries,
 * A leaves checkpoints at 28 (its prompt's last boundary; EVERY 2 also at 14), B at 21 (where
 * its cached KV ended: a branch point) and 28. So B's admission finds the KV of 21 tokens but a
 * checkpoint at 14 at most; C hits B's 21; D hits A's 28. */
typedef struct rec_policy {
  const char *name;
  uint32_t policy, interval;    /* pkv_engine_params.state_checkpoint_policy, _interval */
  uint32_t num_checkpoints;     /* pkv_engine_params.num_state_checkpoints (0: the default) */
  uint32_t hit_b, hit_c, hit_d; /* tokens each admission must serve */
  uint32_t hit_c_resumed;       /* C preempted with 29 of 30 tokens computed (the KV of 28) */
  uint32_t checkpoints_taken;   /* by the whole story of batches the test plans */
  /* The host tier (0: none). With one, the batches swap D out and back in by hand (its state
   * leaves by STATE_OUT, returns by STATE_IN), pkv_step preempts by preemption_mode, and device
   * checkpoints evicted for room go to host state slots, later hits restoring from there. */
  uint32_t host_blocks, preemption_mode;
  uint32_t offloaded_min; /* batches: checkpoints offloaded, at least */
  uint32_t host_restores; /* batches: of the restores, from host state slots */
  const char *store_dir;  /* a FILE store there (write-through; needs host_blocks), or NULL */
} rec_policy;

/* One sequence as the test knows it. */
typedef struct rec_seq {
  uint64_t id;
  int32_t tokens[MAX_TOKENS];
  uint32_t num_tokens, prompt_len, ngen;
  int second_at;   /* the generated token that takes the second best (-1: none) */
  int32_t pending; /* sampled by the last batch, not appended yet (-1: none) */
  float logits[GEN][VOCAB];
} rec_seq;

extern const kv_mode rec_mode; /* the recurrent hybrid: layer 1 a STATE layer */

/* Fills s with a prompt: P (or A's tokens for D) and its own tokens. which: 'A' .. 'D', or
 * 'E' + i for the scheduler's longer prompts (P + 16 own tokens). */
void rec_prompt(rec_seq *s, char which);
/* A CPU engine of the recurrent model with prefix caching and policy p. */
int rec_engine(const rec_policy *p, uint32_t num_blocks, uint32_t max_num_batched_tokens,
               pkv_engine **out);
pkv_stats rec_stats(pkv_engine *e);
/* A run's checkpoint counters, printed under run ("batches", "pkv_step"): held (device and host)
 * is taken less evicted. 1 when it is. */
int rec_counters(const rec_policy *p, const char *run, const pkv_stats *st);
/* Runs the open batch b through the model (its sequences among seqs[n]). Each sequence whose rows
 * reach its last token takes its next token: logits kept, pending = the pick, sampled[i] (its
 * index in the batch) too when sampled is not NULL. */
int rec_forward(const model *m, pkv_batch *b, rec_seq *seqs, int n, int32_t *sampled);
/* Admissions under p served hit tokens (cached: what pkv said) while the KV of kv tokens was
 * cached: the counters grew by `restores` restores, hit tokens and kv - hit fallback tokens
 * (NONE: 0, as it looks nothing up: no hit can be served). */
int rec_check_admission(const rec_policy *p, const char *label, const pkv_stats *before,
                        const pkv_stats *after, uint32_t cached, uint32_t hit, uint32_t kv,
                        uint32_t restores);
/* pkv's tokens of s are the test's, and its tokens and logits are the naive contiguous run's. */
int rec_check_seq(const model *m, pkv_engine *e, const rec_seq *s, const char *label);

/* A fresh store directory under /tmp (1, or 0 when none could be made), and its removal
 * (e2e_recurrent_store.c). */
int rec_store_dir(char out[64]);
void rec_store_remove(const char *dir);

/* The story through pkv_step (e2e_recurrent_sched.c). */
int rec_sched_story(const model *m, const rec_policy *p);

#endif
