/*
 * cli.c - flag parsing, sizes and small helpers shared by the pkv tool's commands (see cli.h).
 */
#define _POSIX_C_SOURCE 200809L

#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------- numbers and sizes */

int cli_parse_u64(const char *s, uint64_t *out) {
  if (s == NULL || !isdigit((unsigned char)s[0])) return -1; /* no sign, no blanks */
  errno = 0;
  char *end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0') return -1;
  *out = (uint64_t)v;
  return 0;
}

int cli_parse_u32(const char *s, uint32_t *out) {
  uint64_t v = 0;
  if (cli_parse_u64(s, &v) != 0 || v > UINT32_MAX) return -1;
  *out = (uint32_t)v;
  return 0;
}

int cli_parse_double(const char *s, double *out) {
  if (s == NULL || s[0] == '\0' || isspace((unsigned char)s[0])) return -1;
  errno = 0;
  char *end = NULL;
  double v = strtod(s, &end);
  if (errno != 0 || end == s || *end != '\0' || !isfinite(v)) return -1;
  *out = v;
  return 0;
}

/* The multiplier of a size unit: binary only (K = KiB = 2^10, as free -g and most of Linux
 * count memory); 0 if unknown, UINT64_MAX for KB MB GB TB, which some read as powers of 1000 and
 * others as powers of 1024: refused rather than guessed (issue 26: 24G and 24gb differed). */
static uint64_t size_unit(const char *u) {
  static const struct {
    const char *name;
    uint64_t mult;
  } units[] = {
      {"", 1},
      {"b", 1},
      {"k", 1ull << 10},
      {"kib", 1ull << 10},
      {"kb", UINT64_MAX},
      {"m", 1ull << 20},
      {"mib", 1ull << 20},
      {"mb", UINT64_MAX},
      {"g", 1ull << 30},
      {"gib", 1ull << 30},
      {"gb", UINT64_MAX},
      {"t", 1ull << 40},
      {"tib", 1ull << 40},
      {"tb", UINT64_MAX},
  };
  while (*u == ' ') u++;
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
    if (strcasecmp(u, units[i].name) == 0) return units[i].mult;
  return 0;
}

/* Exact: the digits are read as one integer (int part and decimals) and scaled in 128 bits, so
 * "1.5GiB" is 1610612736 bytes and "18446744073709551615" is 2^64-1, where going through double
 * rounded (2^64-1 became 2^64 and was refused; 16 digits and more lost their last ones). */
int cli_parse_size(const char *s, uint64_t *out) {
  __extension__ typedef unsigned __int128 u128;
  if (s == NULL || !(isdigit((unsigned char)s[0]) || (s[0] == '.' && isdigit((unsigned char)s[1]))))
    return CLI_SIZE_MALFORMED;
  u128 digits = 0, scale = 1; /* the value is digits / scale */
  int int_digits = 0, decimals = 0;
  const char *c = s;
  for (; isdigit((unsigned char)*c); c++) {
    if (digits != 0 || *c != '0') int_digits++;
    if (int_digits > 20) return CLI_SIZE_TOO_LARGE; /* >= 10^20 > 2^64 */
    digits = digits * 10 + (u128)(*c - '0');
  }
  if (*c == '.') {
    for (c++; isdigit((unsigned char)*c); c++) {
      if (*c == '0' && strspn(c, "0") == strspn(c, "0123456789")) continue; /* trailing zeros */
      if (++decimals > 18) return CLI_SIZE_NOT_WHOLE;
      digits = digits * 10 + (u128)(*c - '0');
      scale *= 10;
    }
  }
  const uint64_t mult = size_unit(c);
  if (mult == 0) return CLI_SIZE_MALFORMED;
  if (mult == UINT64_MAX) return CLI_SIZE_DECIMAL_UNIT;
  /* digits < 10^38 and mult <= 2^40: the product can pass 2^128 only for a value past 2^64 */
  u128 bytes = 0;
  if (__builtin_mul_overflow(digits, (u128)mult, &bytes)) return CLI_SIZE_TOO_LARGE;
  if (bytes / scale > UINT64_MAX) return CLI_SIZE_TOO_LARGE;
  if (bytes % scale != 0) return CLI_SIZE_NOT_WHOLE;
  *out = (uint64_t)(bytes / scale);
  return 0;
}

const char *cli_format_size(uint64_t bytes, char *buf, size_t cap) {
  static const char *names[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) {
    snprintf(buf, cap, "%llu B", (unsigned long long)bytes);
    return buf;
  }
  double v = (double)bytes;
  size_t i = 0;
  while (v >= 1024.0 && i + 1 < sizeof names / sizeof names[0]) {
    v /= 1024.0;
    i++;
  }
  snprintf(buf, cap, "%.2f %s", v, names[i]);
  return buf;
}

/* ---------------------------------------------------------------- flags */

void cli_print_help(FILE *f, const cli_command *cmd) {
  fprintf(f, "usage: pkv %s\n", cmd->synopsis);
  if (cmd->about != NULL) fprintf(f, "\n%s\n", cmd->about);
  fprintf(f, "\noptions:\n");
  for (size_t i = 0; i < cmd->num_flags; i++) {
    const cli_flag *fl = &cmd->flags[i];
    char left[64];
    if (fl->arg != NULL)
      snprintf(left, sizeof left, "--%s %s", fl->name, fl->arg);
    else
      snprintf(left, sizeof left, "--%s", fl->name);
    fprintf(f, "  %-28s %s\n", left, fl->help);
  }
  fprintf(f, "  %-28s %s\n", "-h, --help", "show this help");
}

static cli_flag *find_flag(const cli_command *cmd, const char *name, size_t name_len) {
  for (size_t i = 0; i < cmd->num_flags; i++) {
    const char *n = cmd->flags[i].name;
    if (strlen(n) == name_len && strncmp(n, name, name_len) == 0) return &cmd->flags[i];
  }
  return NULL;
}

/* Stores text into fl's destination; 0, or a negative code (-1 malformed; CLI_SIZE_* for sizes). */
static int store_value(cli_flag *fl, const char *text) {
  switch (fl->kind) {
    case CLI_U32:
      return cli_parse_u32(text, (uint32_t *)fl->dst);
    case CLI_U64:
      return cli_parse_u64(text, (uint64_t *)fl->dst);
    case CLI_DOUBLE:
      return cli_parse_double(text, (double *)fl->dst);
    case CLI_SIZE:
      return cli_parse_size(text, (uint64_t *)fl->dst);
    case CLI_STRING:
      *(const char **)fl->dst = text;
      return 0;
    default:
      return -1;
  }
}

static const char *kind_expects(int kind) {
  switch (kind) {
    case CLI_U32:
      return "a whole number (0 .. 4294967295)";
    case CLI_U64:
      return "a whole number";
    case CLI_DOUBLE:
      return "a number";
    case CLI_SIZE:
      return "a size such as 80GiB (= 80G), 512MiB, 1.5GiB or 4096 (bytes)";
    default:
      return "a value";
  }
}

static int usage_error(const cli_command *cmd) {
  fprintf(stderr, "run 'pkv %s --help' for the options\n", cmd->name);
  return CLI_BAD_USAGE;
}

int cli_parse(const cli_command *cmd, int argc, char **argv) {
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      cli_print_help(stdout, cmd);
      return CLI_HELP_SHOWN;
    }
    if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
      fprintf(stderr, "pkv %s: unexpected argument '%s'\n", cmd->name, a);
      return usage_error(cmd);
    }
    const char *name = a + 2;
    const char *eq = strchr(name, '=');
    size_t name_len = eq != NULL ? (size_t)(eq - name) : strlen(name);
    cli_flag *fl = find_flag(cmd, name, name_len);
    if (fl == NULL) {
      fprintf(stderr, "pkv %s: unknown option '--%.*s'\n", cmd->name, (int)name_len, name);
      return usage_error(cmd);
    }
    fl->seen = 1;
    if (fl->kind == CLI_FLAG) {
      if (eq != NULL) {
        fprintf(stderr, "pkv %s: option '--%s' takes no value\n", cmd->name, fl->name);
        return usage_error(cmd);
      }
      *(int *)fl->dst = 1;
      continue;
    }
    const char *value = eq != NULL ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
    if (value == NULL) {
      fprintf(stderr, "pkv %s: option '--%s' needs %s\n", cmd->name, fl->name,
              kind_expects(fl->kind));
      return usage_error(cmd);
    }
    const int stored = store_value(fl, value);
    if (stored == CLI_SIZE_DECIMAL_UNIT) {
      fprintf(
          stderr,
          "pkv %s: bad value '%s' for --%s: sizes are binary; write KiB, MiB, GiB, TiB or K, M, G, T "
          "(powers of 1024, e.g. 24GiB = 24G = 25769803776 bytes), or the bytes (KB, MB, GB and TB "
          "are refused: powers of 1000 or of 1024?)\n",
          cmd->name, value, fl->name);
      return usage_error(cmd);
    }
    if (stored != 0) {
      const char *why = stored == CLI_SIZE_TOO_LARGE   ? "more than 2^64-1 bytes"
                        : stored == CLI_SIZE_NOT_WHOLE ? "not a whole number of bytes"
                                                       : NULL;
      if (why != NULL)
        fprintf(stderr, "pkv %s: bad value '%s' for --%s: %s\n", cmd->name, value, fl->name, why);
      else
        fprintf(stderr, "pkv %s: bad value '%s' for --%s: expected %s\n", cmd->name, value,
                fl->name, kind_expects(fl->kind));
      return usage_error(cmd);
    }
  }
  return CLI_PARSED;
}

/* ---------------------------------------------------------------- files and time */

static const char *file_kind(mode_t m) {
  return S_ISDIR(m)    ? "a directory"
         : S_ISCHR(m)  ? "a character device"
         : S_ISBLK(m)  ? "a block device"
         : S_ISFIFO(m) ? "a FIFO"
         : S_ISSOCK(m) ? "a socket"
                       : "not a regular file";
}

/* Reads all of fd, which fstat says holds size bytes; -1 (errno set, or 0 when the file is not
 * the size it said) on failure. */
static int read_exactly(int fd, char *buf, size_t size) {
  size_t len = 0;
  while (len <= size) { /* one byte past size: a file that grew since fstat is refused */
    ssize_t n = read(fd, buf + len, size + 1 - len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) break;
    len += (size_t)n;
  }
  errno = 0;
  return len == size ? 0 : -1;
}

int cli_read_file(const char *path, char **out, size_t *out_len) {
  /* O_NONBLOCK: opening a FIFO does not wait for a writer; fstat then refuses it. The size is
   * checked before anything is read: /dev/zero or a huge file is never read. */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    fprintf(stderr, "pkv: %s: %s\n", path, strerror(errno));
    return -1;
  }
  struct stat st;
  char *buf = NULL;
  if (fstat(fd, &st) != 0) {
    fprintf(stderr, "pkv: %s: %s\n", path, strerror(errno));
  } else if (!S_ISREG(st.st_mode)) {
    fprintf(stderr, "pkv: %s: is %s, not a regular file\n", path, file_kind(st.st_mode));
  } else if (st.st_size > CLI_MAX_FILE_BYTES) {
    fprintf(stderr, "pkv: %s: %lld bytes, more than the %d MiB a config file may have\n", path,
            (long long)st.st_size, CLI_MAX_FILE_BYTES >> 20);
  } else if ((buf = malloc((size_t)st.st_size + 2)) == NULL) {
    fprintf(stderr, "pkv: %s: out of memory\n", path);
  } else if (read_exactly(fd, buf, (size_t)st.st_size) != 0) {
    fprintf(stderr, "pkv: %s: %s\n", path,
            errno ? strerror(errno) : "changed size while being read");
  } else {
    close(fd);
    buf[st.st_size] = '\0';
    *out = buf;
    *out_len = (size_t)st.st_size;
    return 0;
  }
  free(buf);
  close(fd);
  return -1;
}

static int word_char(char c) { return isalnum((unsigned char)c) || c == '_'; }

const char *cli_in_flag_terms(const char *msg, const char *const (*names)[2], size_t num_names,
                              char *buf, size_t cap) {
  size_t at = 0;
  for (const char *c = msg; *c != '\0' && at + 1 < cap;) {
    const char *to = NULL;
    size_t len = 0;
    if (c == msg || !word_char(c[-1]))
      for (size_t i = 0; i < num_names && to == NULL; i++) {
        len = strlen(names[i][0]);
        if (strncmp(c, names[i][0], len) == 0 && !word_char(c[len])) to = names[i][1];
      }
    if (to == NULL) {
      buf[at++] = *c++;
      continue;
    }
    at += (size_t)snprintf(buf + at, cap - at, "%s", to);
    if (at >= cap) at = cap - 1;
    c += len;
  }
  buf[at] = '\0';
  return buf;
}

void cli_json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p < 0x20)
      fprintf(f, "\\u%04x", *p);
    else
      fputc(*p, f);
  }
  fputc('"', f);
}

double cli_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int cli_write_all(int fd, const void *buf, size_t n) {
  for (const char *p = buf; n > 0;) {
    const ssize_t k = write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    p += k, n -= (size_t)k;
  }
  return 0;
}

int cli_read_all(int fd, void *buf, size_t n) {
  for (char *p = buf; n > 0;) {
    const ssize_t k = read(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    p += k, n -= (size_t)k;
  }
  return 0;
}
