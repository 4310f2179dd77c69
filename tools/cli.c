/*
 * cli.c - flag parsing, sizes and small helpers shared by the pkv tool's commands (see cli.h).
 */
#define _POSIX_C_SOURCE 200809L

#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

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

/* The multiplier of a size unit, 0 if unknown. */
static double size_unit(const char *u) {
  static const struct { const char *name; double mult; } units[] = {
      {"", 1.0},          {"b", 1.0},
      {"k", 1024.0},      {"kib", 1024.0},  {"kb", 1e3},
      {"m", 1048576.0},   {"mib", 1048576.0}, {"mb", 1e6},
      {"g", 1073741824.0}, {"gib", 1073741824.0}, {"gb", 1e9},
      {"t", 1099511627776.0}, {"tib", 1099511627776.0}, {"tb", 1e12},
  };
  while (*u == ' ') u++;
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
    if (strcasecmp(u, units[i].name) == 0) return units[i].mult;
  return 0.0;
}

int cli_parse_size(const char *s, uint64_t *out) {
  if (s == NULL || !(isdigit((unsigned char)s[0]) || s[0] == '.')) return -1;
  errno = 0;
  char *end = NULL;
  double v = strtod(s, &end);
  if (errno != 0 || end == s || !isfinite(v) || v < 0) return -1;
  double mult = size_unit(end);
  if (mult == 0.0) return -1;
  double bytes = floor(v * mult);
  if (bytes >= 18446744073709551616.0) return -1; /* 2^64 */
  *out = (uint64_t)bytes;
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

/* Stores text into fl's destination; 0 or -1 (malformed). */
static int store_value(cli_flag *fl, const char *text) {
  switch (fl->kind) {
    case CLI_U32: return cli_parse_u32(text, (uint32_t *)fl->dst);
    case CLI_U64: return cli_parse_u64(text, (uint64_t *)fl->dst);
    case CLI_DOUBLE: return cli_parse_double(text, (double *)fl->dst);
    case CLI_SIZE: return cli_parse_size(text, (uint64_t *)fl->dst);
    case CLI_STRING: *(const char **)fl->dst = text; return 0;
    default: return -1;
  }
}

static const char *kind_expects(int kind) {
  switch (kind) {
    case CLI_U32: return "a whole number (0 .. 4294967295)";
    case CLI_U64: return "a whole number";
    case CLI_DOUBLE: return "a number";
    case CLI_SIZE: return "a size such as 80GiB, 512MiB, 1.5GB or 4096";
    default: return "a value";
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
      fprintf(stderr, "pkv %s: option '--%s' needs %s\n", cmd->name, fl->name, kind_expects(fl->kind));
      return usage_error(cmd);
    }
    if (store_value(fl, value) != 0) {
      fprintf(stderr, "pkv %s: bad value '%s' for --%s: expected %s\n", cmd->name, value, fl->name,
              kind_expects(fl->kind));
      return usage_error(cmd);
    }
  }
  return CLI_PARSED;
}

/* ---------------------------------------------------------------- files and time */

int cli_read_file(const char *path, char **out, size_t *out_len) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    fprintf(stderr, "pkv: %s: %s\n", path, strerror(errno));
    return -1;
  }
  size_t cap = 4096, len = 0;
  char *buf = malloc(cap);
  while (buf != NULL) {
    len += fread(buf + len, 1, cap - len - 1, f);
    if (ferror(f)) {
      fprintf(stderr, "pkv: %s: %s\n", path, strerror(errno));
      break;
    }
    if (feof(f)) {
      fclose(f);
      buf[len] = '\0';
      *out = buf;
      *out_len = len;
      return 0;
    }
    if (cap > ((size_t)1 << 30)) {
      fprintf(stderr, "pkv: %s: larger than 1 GiB, not a config file\n", path);
      break;
    }
    char *bigger = realloc(buf, cap * 2);
    if (bigger == NULL) free(buf);
    buf = bigger;
    cap *= 2;
  }
  if (buf == NULL) fprintf(stderr, "pkv: %s: out of memory\n", path);
  free(buf);
  fclose(f);
  return -1;
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
