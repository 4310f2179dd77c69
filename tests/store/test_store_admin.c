/* The store's administration through pkv.h (pkv_store_*) on a file store: an engine writes its
 * sealed prefix blocks into a directory (destroying it finishes the writes); an admin handle
 * counts them (info), lists them in pages with what each value's header says (parents, tokens,
 * payload, fingerprint), finds a damaged value and a stray file named like a block (verify),
 * removes them on request, then clears the rest. A read-only handle refuses removals; bad
 * arguments change nothing. */
#define _POSIX_C_SOURCE 200809L /* pread, pwrite, mkdtemp under -std=c11 */

#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <unistd.h>

#include "../unit/test_util.h"

enum { BS = 4, BLOCKS = 16, HOST = 8, MAX_ENTRIES = 32 };

static char dir[256];

static void hex(const uint8_t *b, char out[65]) {
  for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", b[i]);
}

/* <dir>/<hh>/<key hex>.blk (the file store's layout). */
static void block_path(const pkv_store_key *k, char *out, size_t cap) {
  char h[65];
  hex(k->bytes, h);
  snprintf(out, cap, "%s/%.2s/%s.blk", dir, h, h);
}

static pkv_store_params file_params(uint32_t write_mode) {
  pkv_store_params sp;
  pkv_store_params_init(&sp, sizeof sp);
  sp.kind = PKV_STORE_FILE;
  sp.path = dir;
  sp.write_mode = write_mode;
  return sp;
}

/* An engine writing through to the directory computes two prompts of 13 tokens (3 full blocks
 * each; the second under a salt); *block_bytes = the payload of one block. */
static int write_blocks(uint64_t *block_bytes) {
  pkv_store_params sp = file_params(PKV_STORE_WRITE_THROUGH);
  pkv_engine_params p;
  tu_params(&p, BS, BLOCKS);
  p.host_num_blocks = HOST;
  p.store = &sp;
  pkv_engine *e = tu_engine_p(&p);
  if (!e) return 0;
  pkv_kv_budget b;
  memset(&b, 0, sizeof b);
  b.struct_size = sizeof b;
  CHECK_OK(pkv_engine_budget(e, &b));
  *block_bytes = b.block_bytes;
  int32_t t[13];
  tu_fill(t, 13, 1);
  for (int i = 0; i < 2; i++) {
    const uint64_t s = tu_alloc_salt(e, t, 13, i ? "tenant" : NULL, NULL);
    pkv_batch *bt = NULL;
    if (CHECK_OK(pkv_batch_begin(e, &s, NULL, 1, &bt))) CHECK_OK(pkv_batch_end(bt));
    CHECK_OK(pkv_release(e, s));
  }
  pkv_engine_destroy(e); /* the writer thread finishes its queue */
  return 1;
}

static pkv_store *open_store(uint32_t write_mode) {
  pkv_store_params sp = file_params(write_mode);
  pkv_store *s = NULL;
  if (!CHECK_OK(pkv_store_open(&sp, &s))) return NULL;
  CHECK(s != NULL);
  return s;
}

static struct pkv_store_info info(pkv_store *s) {
  struct pkv_store_info in;
  memset(&in, 0, sizeof in);
  in.struct_size = sizeof in;
  CHECK_OK(pkv_store_info(s, &in));
  return in;
}

/* The whole listing in pages of cap; returns the number of entries (at most MAX_ENTRIES). */
static uint32_t list_all(pkv_store *s, uint32_t flags, uint32_t cap, pkv_store_entry *out,
                         uint32_t *pages) {
  uint64_t cursor = 0;
  uint32_t n = 0;
  *pages = 0;
  do {
    uint32_t len = 0;
    if (!CHECK(n + cap <= MAX_ENTRIES) ||
        !CHECK_OK(pkv_store_list(s, &cursor, flags, out + n, sizeof *out, cap, &len)))
      break;
    CHECK(len <= cap);
    n += len;
    ++*pages;
  } while (cursor != 0);
  return n;
}

static pkv_store_verify_result verify(pkv_store *s, uint32_t remove_bad) {
  pkv_store_verify_result r;
  memset(&r, 0, sizeof r);
  r.struct_size = sizeof r;
  CHECK_OK(pkv_store_verify(s, remove_bad, &r));
  return r;
}

static int listed(const pkv_store_entry *e, uint32_t n, const pkv_store_key *k) {
  for (uint32_t i = 0; i < n; i++)
    if (memcmp(e[i].key.bytes, k->bytes, 32) == 0) return 1;
  return 0;
}

static void test_admin(void) {
  uint64_t payload = 0;
  if (!write_blocks(&payload)) return;
  pkv_store *s = open_store(PKV_STORE_WRITE_THROUGH);
  if (!s) return;
  struct pkv_store_info in = info(s);
  CHECK_EQ_INT(in.kind, PKV_STORE_FILE);
  CHECK_EQ_INT(in.num_blocks, 6);

  /* Pages of 2: every block once, whole, with its header's fields; two chains of three. */
  pkv_store_entry e[MAX_ENTRIES];
  uint32_t pages = 0;
  const uint32_t n = list_all(s, 0, 2, e, &pages);
  CHECK_EQ_INT(n, 6);
  CHECK_EQ_INT(pages, 3);
  uint32_t roots = 0;
  for (uint32_t i = 0; i < n; i++) {
    CHECK_EQ_INT(e[i].state, PKV_STORE_VALUE_GOOD);
    CHECK_EQ_INT(e[i].num_tokens, BS);
    CHECK_EQ_INT(e[i].payload_bytes, payload);
    CHECK(e[i].value_bytes > payload && in.total_bytes == n * e[i].value_bytes);
    CHECK(e[i].problem[0] == '\0');
    CHECK(memcmp(e[i].fingerprint, e[0].fingerprint, 32) == 0); /* one model */
    roots += !listed(e, n, &e[i].parent);
  }
  CHECK_EQ_INT(roots, 2);

  /* Keys only, in one page of 16; a larger entry_size gets zeros past the fields. */
  pkv_store_entry k[MAX_ENTRIES];
  CHECK_EQ_INT(list_all(s, PKV_STORE_LIST_KEYS_ONLY, 16, k, &pages), 6);
  CHECK_EQ_INT(pages, 1);
  CHECK(k[0].state == PKV_STORE_VALUE_UNREAD && k[0].num_tokens == 0 &&
        k[0].value_bytes == e[0].value_bytes);
  unsigned char wide[2 * (sizeof(pkv_store_entry) + 16)];
  memset(wide, 0xee, sizeof wide);
  uint64_t cursor = 0;
  uint32_t len = 0;
  CHECK_OK(pkv_store_list(s, &cursor, 0, (pkv_store_entry *)wide, sizeof(pkv_store_entry) + 16, 2,
                          &len));
  CHECK_EQ_INT(len, 2);
  CHECK(cursor != 0 && wide[sizeof(pkv_store_entry)] == 0 &&
        wide[2 * sizeof(pkv_store_entry) + 31] == 0);
  CHECK(wide[sizeof(pkv_store_entry) + 16] != 0xee); /* the second entry where entry_size puts it */

  /* Bad arguments change nothing: the listing goes on from the same cursor. */
  uint64_t wrong = cursor + 1, kept = cursor;
  CHECK_STATUS(pkv_store_list(s, &wrong, 0, e, sizeof *e, 2, &len), PKV_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(pkv_store_list(s, &cursor, 0, e, sizeof *e - 8, 2, &len), PKV_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(pkv_store_list(s, &cursor, 0, e, sizeof *e, 0, &len), PKV_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(pkv_store_list(s, &cursor, 8, e, sizeof *e, 2, &len), PKV_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(pkv_store_list(NULL, &cursor, 0, e, sizeof *e, 2, &len), PKV_ERR_INVALID_ARGUMENT);
  CHECK(cursor == kept && wrong == kept + 1);
  CHECK_OK(pkv_store_list(s, &cursor, 0, e + 2, sizeof *e, 16, &len));
  CHECK_EQ_INT(len, 4);
  CHECK_EQ_INT(cursor, 0);

  /* Damage one value (a flipped payload byte) and add a stray file named like a block. */
  char path[512];
  block_path(&k[3].key, path, sizeof path);
  int fd = open(path, O_RDWR);
  if (CHECK(fd >= 0)) {
    unsigned char byte = 0;
    const off_t at = (off_t)k[3].value_bytes - 7;
    CHECK(pread(fd, &byte, 1, at) == 1);
    byte ^= 0x20;
    CHECK(pwrite(fd, &byte, 1, at) == 1);
    close(fd);
  }
  pkv_store_key stray = k[0].key;
  stray.bytes[31] ^= 1;
  block_path(&stray, path, sizeof path);
  FILE *f = fopen(path, "w");
  if (CHECK(f != NULL)) {
    fputs("not a block", f);
    fclose(f);
  }
  CHECK_EQ_INT(info(s).num_blocks, 7);

  pkv_store_verify_result r = verify(s, 0);
  CHECK_EQ_INT(r.num_blocks, 7);
  CHECK_EQ_INT(r.num_good, 5);
  CHECK_EQ_INT(r.num_bad, 2);
  CHECK_EQ_INT(r.num_removed, 0);
  CHECK_EQ_INT(r.num_gone, 0);
  CHECK_EQ_INT(r.bad_bytes, k[3].value_bytes + 11);
  CHECK(r.first_bad_problem[0] != '\0');
  const uint32_t listed_n = list_all(s, 0, 16, e, &pages);
  uint32_t bad = 0;
  for (uint32_t i = 0; i < listed_n; i++) {
    if (e[i].state != PKV_STORE_VALUE_BAD) continue;
    bad++;
    const int damaged = memcmp(e[i].key.bytes, k[3].key.bytes, 32) == 0;
    CHECK(strstr(e[i].problem, damaged ? "payload checksum" : "shorter than a header") != NULL);
    CHECK(e[i].num_tokens == 0 && e[i].payload_bytes == 0);
  }
  CHECK_EQ_INT(bad, 2);

  /* A read-only handle reads but removes nothing. */
  pkv_store *ro = open_store(PKV_STORE_READ_ONLY);
  if (ro) {
    uint64_t removed = 99;
    pkv_store_verify_result rr;
    memset(&rr, 0, sizeof rr);
    rr.struct_size = sizeof rr;
    CHECK_STATUS(pkv_store_verify(ro, 1, &rr), PKV_ERR_STATE);
    CHECK_STATUS(pkv_store_clear(ro, &removed), PKV_ERR_STATE);
    CHECK_EQ_INT(verify(ro, 0).num_bad, 2);
    pkv_store_close(ro);
  }

  r = verify(s, 1);
  CHECK(r.num_bad == 2 && r.num_removed == 2 && r.num_good == 5);
  r = verify(s, 0);
  CHECK(r.num_blocks == 5 && r.num_bad == 0 && r.first_bad_problem[0] == '\0');
  CHECK(access(path, F_OK) != 0);

  uint64_t removed = 0;
  CHECK_OK(pkv_store_clear(s, &removed));
  CHECK_EQ_INT(removed, 5);
  in = info(s);
  CHECK(in.num_blocks == 0 && in.total_bytes == 0);
  cursor = 0;
  len = 9;
  CHECK_OK(pkv_store_list(s, &cursor, 0, e, sizeof *e, 4, &len));
  CHECK(len == 0 && cursor == 0);
  CHECK_OK(pkv_store_clear(s, &removed));
  CHECK_EQ_INT(removed, 0);
  pkv_store_close(s);
}

static int no_get(void *user, const pkv_store_key *keys, uint32_t n, void *values,
                  uint64_t value_bytes, uint8_t *found, uint32_t timeout_ms, char *message,
                  uint32_t cap) {
  (void)user, (void)keys, (void)values, (void)value_bytes, (void)timeout_ms, (void)message,
      (void)cap;
  memset(found, 0, n);
  return 0;
}

static int no_put(void *user, const pkv_store_key *keys, uint32_t n, const void *values,
                  uint64_t value_bytes, char *message, uint32_t cap) {
  (void)user, (void)keys, (void)n, (void)values, (void)value_bytes, (void)message, (void)cap;
  return 0;
}

/* Opening: a missing directory is an error (never made), a callback store is not pkv's to list. */
static void test_open_errors(void) {
  pkv_store *s = NULL;
  char missing[300];
  snprintf(missing, sizeof missing, "%s/missing", dir);
  pkv_store_params sp = file_params(PKV_STORE_WRITE_THROUGH);
  sp.path = missing;
  CHECK_STATUS(pkv_store_open(&sp, &s), PKV_ERR_STORE);
  CHECK(strstr(pkv_last_error(), "missing") != NULL);
  CHECK(access(missing, F_OK) != 0 && s == NULL);
  sp.path = NULL;
  CHECK_STATUS(pkv_store_open(&sp, &s), PKV_ERR_INVALID_ARGUMENT);
  pkv_store_callbacks cb;
  memset(&cb, 0, sizeof cb);
  cb.struct_size = sizeof cb;
  cb.get = no_get;
  cb.put = no_put;
  pkv_store_params_init(&sp, sizeof sp);
  sp.kind = PKV_STORE_CALLBACK;
  sp.callbacks = &cb;
  CHECK_STATUS(pkv_store_open(&sp, &s), PKV_ERR_UNSUPPORTED);
  sp.kind = PKV_STORE_NONE;
  CHECK_STATUS(pkv_store_open(&sp, &s), PKV_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(pkv_store_open(NULL, &s), PKV_ERR_INVALID_ARGUMENT);
  sp = file_params(PKV_STORE_WRITE_THROUGH);
  CHECK_STATUS(pkv_store_open(&sp, NULL), PKV_ERR_INVALID_ARGUMENT);
  CHECK(s == NULL);
  struct pkv_store_info in;
  memset(&in, 0, sizeof in);
  in.struct_size = sizeof in;
  CHECK_STATUS(pkv_store_info(NULL, &in), PKV_ERR_INVALID_ARGUMENT);
  uint64_t removed = 0;
  CHECK_STATUS(pkv_store_clear(NULL, &removed), PKV_ERR_INVALID_ARGUMENT);
  pkv_store_close(NULL);
}

int main(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/pkv-store-admin-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  TU_RUN(test_admin);
  TU_RUN(test_open_errors);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return tu_summary();
}
