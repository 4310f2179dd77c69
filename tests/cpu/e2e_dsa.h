/* e2e_dsa.h - the DSA model's end-to-end stories (e2e_dsa.c tells them): the pieces the batches
 * the test plans (e2e_dsa.c) and the scheduler's run (e2e_dsa_sched.c) share. */
#ifndef PKV_TESTS_E2E_DSA_H
#define PKV_TESTS_E2E_DSA_H

#include "e2e_model.h"

/* Every prompt starts with the same SYS_LEN tokens (three full blocks of BS and three tokens). */
enum { SYS_LEN = 24 };

/* One sequence as the test knows it. */
typedef struct dsa_seq {
  uint64_t id;
  int32_t tokens[MAX_TOKENS];
  uint32_t num_tokens, prompt_len, cached, ngen;
  int second_at;   /* the generated token that took the second best (-1: none) */
  int32_t pending; /* sampled by the last batch, not appended yet (-1: none) */
  float logits[GEN][VOCAB];
} dsa_seq;

extern const kv_mode dsa_mode; /* kv_mode.mla E2E_DSA, an f32 latent cache */

/* A CPU engine of the DSA model: every layer MLA with an indexer (fp8 keys), prefix caching,
 * num_blocks pool blocks and host_blocks host-tier ones; the scheduler's budget of new tokens a
 * step (0: the default) and its preemption_mode. Sets e2e_mode and e2e_engine. */
int dsa_engine(uint32_t num_blocks, uint32_t host_blocks, uint32_t budget, uint32_t preemption,
               pkv_engine **out);
/* s's prompt: the shared system prompt, then own_len tokens of user prompt u. */
void dsa_prompt(dsa_seq *s, int u, uint32_t own_len);
/* Runs the open batch b through the model (its sequences among seqs[n]). Each sequence whose
 * rows reach its last token takes its next token: logits kept, pending its pick, and
 * sampled[i] (i its index in the batch) when sampled is not NULL. */
int dsa_forward(const model *m, pkv_batch *b, dsa_seq *seqs, int n, int32_t *sampled);
/* s's generated tokens and logits against the naive side's for its prompt (its second_at and
 * GEN tokens); story names the run in messages. 1 when they agree. */
int dsa_compare(const model *m, const dsa_seq *s, const char *story, int i);
/* The scheduler's story (e2e_dsa_sched.c) under preemption PKV_PREEMPT_RECOMPUTE or _SWAP. */
int dsa_sched_story(const model *m, uint32_t preemption);

#endif
