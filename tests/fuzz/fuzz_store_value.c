/*
 * fuzz_store_value.c - libFuzzer harness for the store's value format, as the store's
 * administration reads it (pkv_store_list, pkv_store_verify on a FILE store): the input's first
 * byte picks the file's size, the rest is the value, written as a block file under the key its
 * header names (so the checks past "stored under another key" are reached).
 *
 * Byte 0: bit 0 set = the file is extended (sparse zeros) past the 16 MiB a batch reads whole,
 * by the next two bytes, so the piece-at-a-time reader (header first, then tokens, then the
 * payload in chunks) runs; clear = the value is the file. Every size a header declares is
 * checked without overflow (issue 26: a header whose sizes wrapped 64 bits made the checksum
 * read 4 GiB past the value): ASan sees any read past the buffer. A listed value is GOOD or BAD
 * with a reason; a GOOD one's sizes add up to the file's; verify counts what list judged.
 */
#include <fcntl.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_util.h"

static char dir[64];
static char path[160];

static void remove_dir(void) {
  if (path[0]) unlink(path);
  char shard[80];
  for (int i = 0; i < 256; i++) {
    snprintf(shard, sizeof shard, "%s/%02x", dir, i);
    rmdir(shard);
  }
  char usage[80];
  snprintf(usage, sizeof usage, "%s/.pkv-usage", dir);
  unlink(usage);
  rmdir(dir);
}

static void make_dir(void) {
  if (dir[0]) return;
  snprintf(dir, sizeof dir, "%s/pkv-fuzz-store-XXXXXX",
           access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
  FZ_CHECK(mkdtemp(dir) != NULL, "mkdtemp %s", dir);
  atexit(remove_dir);
}

/* Writes the value as <dir>/<hh>/<key hex>.blk, the key from header bytes 48 .. 79 (zeros when
 * shorter), size bytes long. */
static void write_block(const uint8_t *value, size_t n, uint64_t size) {
  uint8_t key[32] = {0};
  for (size_t i = 0; i < 32 && 48 + i < n; i++) key[i] = value[48 + i];
  char hex[65];
  for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", key[i]);
  char shard[80];
  snprintf(shard, sizeof shard, "%s/%.2s", dir, hex);
  mkdir(shard, 0755);
  if (path[0]) unlink(path);
  snprintf(path, sizeof path, "%s/%s.blk", shard, hex);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  FZ_CHECK(fd >= 0, "open %s", path);
  FZ_CHECK(n == 0 || write(fd, value, n) == (ssize_t)n, "write");
  FZ_CHECK(ftruncate(fd, (off_t)size) == 0, "ftruncate");
  close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  make_dir();
  const uint8_t mode = data[0];
  const uint8_t *value = data + 1;
  size_t n = size - 1;
  uint64_t file_bytes = n;
  if (mode & 1) {
    const uint64_t extra = n >= 2 ? (uint64_t)value[0] << 8 | value[1] : 0;
    value += n >= 2 ? 2 : n, n -= n >= 2 ? 2 : n;
    file_bytes = ((uint64_t)16 << 20) + 1 + extra;
    if (file_bytes < n) file_bytes = n;
  }
  write_block(value, n, file_bytes);

  pkv_store_params sp;
  FZ_CHECK(pkv_store_params_init(&sp, sizeof sp) == PKV_OK, "init");
  sp.kind = PKV_STORE_FILE;
  sp.path = dir;
  sp.write_mode = PKV_STORE_READ_ONLY;
  pkv_store *s = NULL;
  FZ_CHECK(pkv_store_open(&sp, &s) == PKV_OK, "open");
  pkv_store_entry e[2];
  uint64_t cursor = 0;
  uint32_t len = 9;
  FZ_CHECK(pkv_store_list(s, &cursor, 0, e, sizeof e[0], 2, &len) == PKV_OK, "list");
  FZ_CHECK(len == 1 && cursor == 0, "listed %u values", len);
  FZ_CHECK(e[0].value_bytes == file_bytes, "listed size %llu",
           (unsigned long long)e[0].value_bytes);
  if (e[0].state == PKV_STORE_VALUE_GOOD) {
    FZ_CHECK(e[0].num_tokens >= 1 && e[0].num_tokens <= PKV_MAX_BLOCK_SIZE, "tokens %u",
             e[0].num_tokens);
    FZ_CHECK(152 + 4 * (uint64_t)e[0].num_tokens + e[0].payload_bytes == file_bytes,
             "sizes do not add up");
    FZ_CHECK(e[0].problem[0] == '\0', "a good value with a problem");
  } else {
    FZ_CHECK(e[0].state == PKV_STORE_VALUE_BAD, "state %u", e[0].state);
    FZ_CHECK(e[0].problem[0] != '\0', "a bad value without a reason");
  }
  pkv_store_verify_result r;
  memset(&r, 0, sizeof r);
  r.struct_size = sizeof r;
  FZ_CHECK(pkv_store_verify(s, 0, &r) == PKV_OK, "verify");
  FZ_CHECK(r.num_blocks == 1 && r.num_good + r.num_bad == 1, "verify counted %llu",
           (unsigned long long)r.num_blocks);
  FZ_CHECK((r.num_good == 1) == (e[0].state == PKV_STORE_VALUE_GOOD), "verify and list disagree");
  pkv_store_close(s);
  return 0;
}
