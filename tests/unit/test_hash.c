/* The canonical block hash against the reference vectors (tests/data/hash_vectors.txt, computed
 * with the reference xxHash), and with adapters and extra keys (tests/data/hash_vectors_extra.txt,
 * computed from pkv.h's byte description). Usage: test_hash PATH_TO_VECTORS [PATH_TO_EXTRA] */
#include "test_util.h"

#include <errno.h>

enum { MAX_BLOCKS = 8, MAX_TOKENS = 64 };

typedef struct {
  uint64_t seed;
  unsigned char salt[64];
  uint32_t salt_len;
  int32_t tokens[MAX_BLOCKS][MAX_TOKENS];
  uint32_t num_tokens[MAX_BLOCKS];
  uint32_t num_blocks;
  uint64_t root;
  uint64_t hashes[MAX_BLOCKS];
} vector;

static int parse_salt(const char *hex, vector *v) {
  v->salt_len = 0;
  if (strcmp(hex, "-") == 0) return 1;
  size_t n = strlen(hex);
  if (n % 2 || n / 2 > sizeof v->salt) return 0;
  for (size_t i = 0; i < n; i += 2) {
    unsigned int byte = 0;
    if (sscanf(hex + i, "%2x", &byte) != 1) return 0;
    v->salt[v->salt_len++] = (unsigned char)byte;
  }
  return 1;
}

static int parse_blocks(char *text, vector *v) {
  v->num_blocks = 0;
  for (char *blk = strtok(text, ";"); blk; blk = strtok(NULL, ";")) {
    if (v->num_blocks == MAX_BLOCKS) return 0;
    uint32_t *n = &v->num_tokens[v->num_blocks];
    *n = 0;
    for (char *p = blk; *p;) {
      char *end = NULL;
      errno = 0;
      long tok = strtol(p, &end, 10);
      if (end == p || errno || *n == MAX_TOKENS) return 0;
      v->tokens[v->num_blocks][(*n)++] = (int32_t)tok;
      p = *end == ',' ? end + 1 : end;
    }
    v->num_blocks++;
  }
  return v->num_blocks > 0;
}

/* "seed salt blocks -> root h0 h1 ..." */
static int parse_line(char *line, vector *v) {
  char salt[160], blocks[2048], arrow[4];
  int used = 0;
  unsigned long long seed = 0;
  if (sscanf(line, "%llu %159s %2047s %3s %n", &seed, salt, blocks, arrow, &used) != 4 ||
      strcmp(arrow, "->") != 0)
    return 0;
  v->seed = seed;
  if (!parse_salt(salt, v) || !parse_blocks(blocks, v)) return 0;
  char *p = line + used, *end = NULL;
  v->root = strtoull(p, &end, 16);
  if (end == p) return 0;
  for (uint32_t i = 0; i < v->num_blocks; i++) {
    p = end;
    v->hashes[i] = strtoull(p, &end, 16);
    if (end == p) return 0;
  }
  return 1;
}

static void check_vector(const vector *v, int line_no) {
  uint64_t h = 0;
  if (!CHECK_OK(pkv_block_hash_root(v->seed, v->salt_len ? v->salt : NULL, v->salt_len, &h)))
    return;
  if (!CHECK(h == v->root))
    fprintf(stderr, "  line %d: root %#llx, want %#llx\n", line_no, (unsigned long long)h,
            (unsigned long long)v->root);
  for (uint32_t i = 0; i < v->num_blocks; i++) {
    uint64_t parent = h;
    if (!CHECK_OK(pkv_block_hash(v->seed, parent, v->tokens[i], v->num_tokens[i], &h))) return;
    if (!CHECK(h == v->hashes[i]))
      fprintf(stderr, "  line %d block %u: %#llx, want %#llx\n", line_no, i, (unsigned long long)h,
              (unsigned long long)v->hashes[i]);
  }
}

/* ---------------------------------------------------------------- adapters and extra keys */
enum { MAX_KEYS = 8 };

typedef struct {
  vector v;
  uint64_t lora_id;
  pkv_extra_key keys[MAX_KEYS];
  unsigned char key_bytes[MAX_KEYS][PKV_MAX_EXTRA_KEY_BYTES];
  uint32_t num_keys;
} extra_vector;

/* "start:end:hex,..." or "-" */
static int parse_keys(char *text, extra_vector *x) {
  x->num_keys = 0;
  if (strcmp(text, "-") == 0) return 1;
  for (char *item = strtok(text, ","); item; item = strtok(NULL, ",")) {
    unsigned int start = 0, end = 0;
    int used = 0;
    if (x->num_keys == MAX_KEYS || sscanf(item, "%u:%u:%n", &start, &end, &used) != 2) return 0;
    const char *hex = item + used;
    const size_t n = strlen(hex);
    if (n % 2 || n / 2 > PKV_MAX_EXTRA_KEY_BYTES) return 0;
    unsigned char *bytes = x->key_bytes[x->num_keys];
    for (size_t i = 0; i < n; i += 2) {
      unsigned int byte = 0;
      if (sscanf(hex + i, "%2x", &byte) != 1) return 0;
      bytes[i / 2] = (unsigned char)byte;
    }
    pkv_extra_key *k = &x->keys[x->num_keys++];
    memset(k, 0, sizeof *k);
    k->start_token = start, k->end_token = end;
    k->key = bytes;
    k->key_len = (uint32_t)(n / 2);
  }
  return 1;
}

/* "seed salt lora_id keys blocks -> root h0 h1 ..." */
static int parse_extra_line(char *line, extra_vector *x) {
  char salt[160], keys[1024], blocks[2048], arrow[4];
  int used = 0;
  unsigned long long seed = 0, lora = 0;
  if (sscanf(line, "%llu %159s %llu %1023s %2047s %3s %n", &seed, salt, &lora, keys, blocks, arrow,
             &used) != 6 ||
      strcmp(arrow, "->") != 0)
    return 0;
  /* The rest is a plain vector's: "seed salt blocks -> hashes". */
  char plain[4096];
  snprintf(plain, sizeof plain, "%llu %s %s -> %s", seed, salt, blocks, line + used);
  x->lora_id = lora;
  return parse_line(plain, &x->v) && parse_keys(keys, x);
}

static void check_extra_vector(const extra_vector *x, int line_no) {
  const vector *v = &x->v;
  uint64_t h = 0;
  if (!CHECK_OK(pkv_block_hash_root_lora(v->seed, v->salt_len ? v->salt : NULL, v->salt_len,
                                         x->lora_id, &h)))
    return;
  if (!CHECK(h == v->root))
    fprintf(stderr, "  line %d: root %#llx, want %#llx\n", line_no, (unsigned long long)h,
            (unsigned long long)v->root);
  uint32_t first = 0; /* block i's first token in the prompt */
  for (uint32_t i = 0; i < v->num_blocks; first += v->num_tokens[i], i++) {
    const uint64_t parent = h;
    if (!CHECK_OK(pkv_block_hash_extra(v->seed, parent, v->tokens[i], v->num_tokens[i], first,
                                       x->keys, x->num_keys, sizeof(pkv_extra_key), &h)))
      return;
    if (!CHECK(h == v->hashes[i]))
      fprintf(stderr, "  line %d block %u: %#llx, want %#llx\n", line_no, i, (unsigned long long)h,
              (unsigned long long)v->hashes[i]);
  }
}

/* Checks each case of the file (plain or extra vectors); returns how many it read. */
static int read_cases(const char *path, int extra) {
  FILE *f = path ? fopen(path, "r") : NULL;
  if (!CHECK(f != NULL)) {
    fprintf(stderr, "  cannot open vectors file %s\n", path ? path : "(none)");
    return 0;
  }
  char line[4096];
  int line_no = 0, checked = 0;
  static vector v;
  static extra_vector x;
  while (fgets(line, sizeof line, f)) {
    line_no++;
    if (line[0] == '#' || line[0] == '\n') continue;
    if (!CHECK(extra ? parse_extra_line(line, &x) : parse_line(line, &v))) {
      fprintf(stderr, "  cannot parse line %d of %s\n", line_no, path);
      continue;
    }
    if (extra)
      check_extra_vector(&x, line_no);
    else
      check_vector(&v, line_no);
    checked++;
  }
  fclose(f);
  return checked;
}

static const char *vectors_path, *extra_vectors_path;

static void test_vectors(void) { CHECK(read_cases(vectors_path, 0) >= 7); }
static void test_extra_vectors(void) { CHECK(read_cases(extra_vectors_path, 1) >= 7); }

/* Without an adapter and keys the new calls are the old ones; keys are checked as pkv_allocate
 * checks them, with nothing written. */
static void test_extra_arguments(void) {
  const int32_t t[4] = {1, 2, 3, 4};
  uint64_t a = 0, b = 1;
  CHECK_OK(pkv_block_hash_root_lora(5, "s", 1, 0, &a));
  CHECK_OK(pkv_block_hash_root(5, "s", 1, &b));
  CHECK(a == b);
  pkv_extra_key k[2];
  memset(k, 0, sizeof k);
  k[0].start_token = 10, k[0].end_token = 12, k[0].key = "k", k[0].key_len = 1;
  k[1] = k[0];
  CHECK_OK(pkv_block_hash_extra(5, a, t, 4, 0, k, 1, sizeof k[0], &b)); /* not overlapping */
  CHECK_OK(pkv_block_hash(5, a, t, 4, &a));
  CHECK(a == b);
  uint64_t keep = 7;
  CHECK_STATUS(pkv_block_hash_extra(5, a, t, 4, 0, k, 2, sizeof k[0], &keep),
               PKV_ERR_INVALID_ARGUMENT); /* key 1 overlaps key 0 */
  CHECK(strstr(pkv_last_error(), "extra key 1") != NULL);
  CHECK_STATUS(pkv_block_hash_extra(5, a, t, 4, UINT32_MAX - 2, NULL, 0, 0, &keep),
               PKV_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(pkv_block_hash_extra(5, a, t, 4, 0, NULL, 1, sizeof k[0], &keep),
               PKV_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(pkv_block_hash_extra(5, a, t, 4, 0, k, 1, 12, &keep), PKV_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(pkv_block_hash_root_lora(5, NULL, 2, 1, &keep), PKV_ERR_INVALID_ARGUMENT);
  CHECK_EQ_INT(keep, 7);
}

/* A salt of length 0 is no salt whatever the pointer; bad arguments fail. */
static void test_hash_arguments(void) {
  uint64_t a = 1, b = 2;
  CHECK_OK(pkv_block_hash_root(0, NULL, 0, &a));
  CHECK_OK(pkv_block_hash_root(0, "x", 0, &b));
  CHECK(a == b);
  CHECK_OK(pkv_block_hash_root(0, "x", 1, &b));
  CHECK(a != b);
  uint64_t keep = 7;
  CHECK_STATUS(pkv_block_hash_root(0, NULL, 3, &keep), PKV_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(pkv_block_hash_root(0, NULL, 0, NULL), PKV_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(pkv_block_hash(0, a, NULL, 4, &keep), PKV_ERR_INVALID_ARGUMENT);
  const int32_t t[2] = {1, 2};
  CHECK_STATUS(pkv_block_hash(0, a, t, 2, NULL), PKV_ERR_INVALID_ARGUMENT);
  CHECK_EQ_INT(keep, 7);
  /* the parent is part of the hash */
  CHECK_OK(pkv_block_hash(0, 1, t, 2, &a));
  CHECK_OK(pkv_block_hash(0, 2, t, 2, &b));
  CHECK(a != b);
}

int main(int argc, char **argv) {
  vectors_path = argc > 1 ? argv[1] : NULL;
  extra_vectors_path = argc > 2 ? argv[2] : NULL;
  TU_RUN(test_vectors);
  TU_RUN(test_extra_vectors);
  TU_RUN(test_hash_arguments);
  TU_RUN(test_extra_arguments);
  return tu_summary();
}
