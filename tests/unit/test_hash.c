/* The canonical block hash against the reference vectors (tests/data/hash_vectors.txt, computed
 * with the reference xxHash). Usage: test_hash PATH_TO_VECTORS */
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

static const char *vectors_path;

static void test_vectors(void) {
  FILE *f = vectors_path ? fopen(vectors_path, "r") : NULL;
  if (!CHECK(f != NULL)) {
    fprintf(stderr, "  cannot open vectors file %s\n", vectors_path ? vectors_path : "(none)");
    return;
  }
  char line[4096];
  int line_no = 0, checked = 0;
  static vector v;
  while (fgets(line, sizeof line, f)) {
    line_no++;
    if (line[0] == '#' || line[0] == '\n') continue;
    if (!CHECK(parse_line(line, &v))) {
      fprintf(stderr, "  cannot parse line %d\n", line_no);
      continue;
    }
    check_vector(&v, line_no);
    checked++;
  }
  fclose(f);
  CHECK(checked >= 7);
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
  TU_RUN(test_vectors);
  TU_RUN(test_hash_arguments);
  return tu_summary();
}
