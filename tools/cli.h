/*
 * cli.h - what the pkv tool's commands share: a table-driven flag parser (which also writes each
 * command's --help), size parsing ("80GiB", "1.5GB"), human-readable sizes, file reading.
 *
 * Exit codes of every command: 0 ok, 1 the work failed (pkv said no, a file is malformed),
 * 2 usage error (bad flag or value).
 */
#ifndef PKV_TOOLS_CLI_H
#define PKV_TOOLS_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum { CLI_EXIT_OK = 0, CLI_EXIT_FAIL = 1, CLI_EXIT_USAGE = 2 };

/* What cli_parse returns: go on, --help was printed (exit 0), or a usage error was printed. */
enum { CLI_PARSED = 0, CLI_HELP_SHOWN = 1, CLI_BAD_USAGE = 2 };

enum cli_kind {
  CLI_FLAG,   /* int: set to 1, takes no value */
  CLI_U32,    /* uint32_t */
  CLI_U64,    /* uint64_t */
  CLI_DOUBLE, /* double, finite */
  CLI_SIZE,   /* uint64_t bytes, exact: "80GiB", "512MiB", "1.5GB", "4096" (cli_parse_size) */
  CLI_STRING, /* const char *, points into argv */
};

typedef struct cli_flag {
  const char *name; /* without the leading "--" */
  int kind;         /* enum cli_kind */
  void *dst;        /* where the value goes */
  const char *arg;  /* the value's name in --help ("BYTES"); NULL for CLI_FLAG */
  const char *help; /* one line */
  int seen;         /* set to 1 by cli_parse when the flag was given */
} cli_flag;

typedef struct cli_command {
  const char *name;     /* "profile" */
  const char *synopsis; /* one line after "usage: pkv " */
  const char *about;    /* a paragraph for --help, may be NULL */
  cli_flag *flags;
  size_t num_flags;
} cli_command;

/* Parses argv[0 .. argc) (the words after the command name) into cmd's flags. Accepts
 * "--name value" and "--name=value"; "-h" / "--help" print the help to stdout. Errors are printed
 * to stderr with a hint to --help. */
int cli_parse(const cli_command *cmd, int argc, char **argv);
void cli_print_help(FILE *f, const cli_command *cmd);

/* Number parsers: 0 on success, -1 on malformed or out-of-range text (*out untouched). */
int cli_parse_u64(const char *s, uint64_t *out);
int cli_parse_u32(const char *s, uint32_t *out);
int cli_parse_double(const char *s, double *out);
/* A byte size, the one parser of every size flag: digits, optionally with decimals ("1.5"), then
 * an optional unit (spaces before it allowed), case-insensitive, binary only: B, KiB MiB GiB TiB
 * and K M G T alone (powers of 1024: 24G = 24GiB). KB MB GB TB are refused
 * (CLI_SIZE_DECIMAL_UNIT: 1000 or 1024 would be a guess). Exact integer arithmetic: the size must
 * come to a whole number of bytes (at most 18 significant decimals) and fit in 64 bits. 0 on
 * success, else a CLI_SIZE_* code (*out untouched). */
enum {
  CLI_SIZE_MALFORMED = -1,
  CLI_SIZE_TOO_LARGE = -2,
  CLI_SIZE_NOT_WHOLE = -3,
  CLI_SIZE_DECIMAL_UNIT = -4
};
int cli_parse_size(const char *s, uint64_t *out);

/* "80.00 GiB", "512 B": into buf[cap]; returns buf. */
const char *cli_format_size(uint64_t bytes, char *buf, size_t cap);

/* Reads a whole regular file of at most CLI_MAX_FILE_BYTES into a malloc'd buffer
 * (NUL-terminated; *out_len excludes the NUL). The type and size are checked before any read: a
 * directory, a device (/dev/zero), a FIFO or a larger file is refused unread. On failure prints
 * "pkv: PATH: reason" to stderr and returns -1. */
#define CLI_MAX_FILE_BYTES (16 << 20)
int cli_read_file(const char *path, char **out, size_t *out_len);

/* pkv's message msg in a command's terms: each whole word names[i][0] (a pkv_engine_params field,
 * say "tp_size") becomes names[i][1] (its flag, "--tp"), into buf[cap] (cut if longer). Returns
 * buf. So a refusal of a value given by flag names the flag, not the C field. */
const char *cli_in_flag_terms(const char *msg, const char *const (*names)[2], size_t num_names,
                              char *buf, size_t cap);

/* Writes s as a JSON string literal, quotes included. */
void cli_json_string(FILE *f, const char *s);

/* Seconds on CLOCK_MONOTONIC. */
double cli_now_s(void);

/* All n bytes to / from fd (a pipe between the demo's processes), through EINTR and short
 * transfers: 0, or -1 (an error, or the other end closed). */
int cli_write_all(int fd, const void *buf, size_t n);
int cli_read_all(int fd, void *buf, size_t n);

#endif /* PKV_TOOLS_CLI_H */
