/*
 * store.c - `pkv store stats|ls|verify|clear`: a store tier's directory or Redis server, for its
 * administrator, through the pkv_store_* calls of pkv.h (no engine, no model: each value
 * describes itself).
 *
 *   stats   how many blocks, how many bytes
 *   ls      every block: key, size, and from its header tokens, parent and model fingerprint
 *   verify  reads every value and checks it (checksums, key); --remove-bad removes the bad ones
 *   clear   removes every block (--yes required)
 *
 * Exit codes as every command's (cli.h); verify also exits 1 when bad blocks remain.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <pkv/pkv.h>

#include "cli.h"
#include "commands.h"

typedef struct store_opts {
  const char *dir, *redis, *password, *prefix;
  uint32_t db, timeout_ms, limit;
  int json, keys_only, remove_bad, yes;
  char host[256];
  uint32_t port;
  char where[600]; /* "directory D" or "redis H:P (prefix "p:", db N)", for messages */
} store_opts;

enum { SUB_STATS, SUB_LS, SUB_VERIFY, SUB_CLEAR };
static const char *const sub_names[] = {"stats", "ls", "verify", "clear"};

static void print_store_usage(FILE *f) {
  fprintf(f, "usage: pkv store stats|ls|verify|clear (--dir DIR | --redis HOST:PORT) [options]\n"
             "\n"
             "A store tier's blocks, for its administrator (no engine, no model needed):\n"
             "  stats   how many blocks and bytes the store holds\n"
             "  ls      every block: key, bytes, and from its header tokens, parent, fingerprint\n"
             "  verify  read every value and check it; --remove-bad removes the bad ones\n"
             "  clear   remove every block (--yes required)\n"
             "\n"
             "'pkv store <subcommand> --help' lists its options.\n"
             "examples:\n"
             "  pkv store stats --dir /var/cache/pkv\n"
             "  pkv store verify --redis 127.0.0.1:6379 --prefix pkv: --json\n");
}

static void hex(const uint8_t *b, size_t n, char *out) {
  for (size_t i = 0; i < n; i++) snprintf(out + 2 * i, 3, "%02x", b[i]);
}

static const char *state_name(uint32_t s) {
  return s == PKV_STORE_VALUE_GOOD ? "good" : s == PKV_STORE_VALUE_BAD ? "bad" : "unread";
}

/* HOST:PORT (the last ':' splits them; [v6]:PORT takes the brackets off). 0 or -1. */
static int parse_host_port(const char *s, store_opts *o) {
  const char *colon = strrchr(s, ':');
  if (colon == NULL || colon == s || cli_parse_u32(colon + 1, &o->port) != 0 || o->port == 0 ||
      o->port > 65535)
    return -1;
  size_t len = (size_t)(colon - s);
  if (len >= 2 && s[0] == '[' && s[len - 1] == ']') s++, len -= 2;
  if (len == 0 || len >= sizeof o->host) return -1;
  memcpy(o->host, s, len);
  o->host[len] = '\0';
  return 0;
}

/* Checks the flags and fills p; an exit code (CLI_EXIT_OK to go on). */
static int build_params(const char *name, int sub, store_opts *o, pkv_store_params *p) {
  if ((o->dir == NULL) == (o->redis == NULL)) {
    fprintf(stderr, "pkv %s: give the store: --dir DIR or --redis HOST:PORT (one of them)\n", name);
    return CLI_EXIT_USAGE;
  }
  if (o->dir != NULL && (o->password || o->prefix || o->db)) {
    fprintf(stderr, "pkv %s: --password, --prefix and --db are for --redis\n", name);
    return CLI_EXIT_USAGE;
  }
  if (o->redis != NULL && parse_host_port(o->redis, o) != 0) {
    fprintf(stderr, "pkv %s: bad --redis '%s': expected HOST:PORT, e.g. 127.0.0.1:6379\n", name,
            o->redis);
    return CLI_EXIT_USAGE;
  }
  pkv_store_params_init(p, sizeof *p);
  /* Only what removes needs write access: the others open read-only. */
  const int removes = sub == SUB_CLEAR || (sub == SUB_VERIFY && o->remove_bad);
  p->write_mode = removes ? PKV_STORE_WRITE_THROUGH : PKV_STORE_READ_ONLY;
  if (o->dir != NULL) {
    p->kind = PKV_STORE_FILE;
    p->path = o->dir;
    snprintf(o->where, sizeof o->where, "directory %s", o->dir);
    return CLI_EXIT_OK;
  }
  if (o->password == NULL) o->password = getenv("PKV_REDIS_PASSWORD");
  p->kind = PKV_STORE_REDIS;
  p->host = o->host;
  p->port = o->port;
  p->database = o->db;
  p->password = o->password;
  p->key_prefix = o->prefix; /* NULL: pkv's default, "pkv:" */
  p->connect_timeout_ms = p->io_timeout_ms = o->timeout_ms ? o->timeout_ms : 5000;
  snprintf(o->where, sizeof o->where, "redis %s:%u (prefix \"%s\", db %u)", o->host, o->port,
           o->prefix ? o->prefix : "pkv:", o->db);
  return CLI_EXIT_OK;
}

/* pkv's message, without pkv_status_string's words for a store error (they name the C struct
 * pkv_store_params, which a user of the tool never saw). */
static int failed(const char *name, const char *what, pkv_status s) {
  if (s == PKV_ERR_STORE)
    fprintf(stderr, "pkv %s: %s: %s\n", name, what, pkv_last_error());
  else
    fprintf(stderr, "pkv %s: %s: %s (%s)\n", name, what, pkv_last_error(), pkv_status_string(s));
  return CLI_EXIT_FAIL;
}

/* --dir must name an existing directory: pkv store never makes one (engines make it on their first
 * write), so a missing one is most likely a wrong path. CLI_EXIT_OK to go on. */
static int check_dir(const char *name, const char *dir) {
  struct stat st;
  if (stat(dir, &st) != 0) {
    if (errno == ENOENT)
      fprintf(stderr,
              "pkv %s: --dir %s: no such directory. Give the directory the engines' file store "
              "writes to (an engine makes it when it first writes a block)\n",
              name, dir);
    else
      fprintf(stderr, "pkv %s: --dir %s: %s\n", name, dir, strerror(errno));
    return CLI_EXIT_FAIL;
  }
  if (!S_ISDIR(st.st_mode)) {
    fprintf(stderr,
            "pkv %s: --dir %s: not a directory; give the store's directory, not a file in it\n",
            name, dir);
    return CLI_EXIT_FAIL;
  }
  return CLI_EXIT_OK;
}

static void json_head(const store_opts *o) {
  printf("{\n  \"store\": \"%s\",\n  \"where\": ", o->dir ? "file" : "redis");
  cli_json_string(stdout, o->dir ? o->dir : o->redis);
  printf(",\n");
}

static int run_stats(const char *name, const store_opts *o, pkv_store *s) {
  struct pkv_store_info in;
  memset(&in, 0, sizeof in);
  in.struct_size = sizeof in;
  const pkv_status st = pkv_store_info(s, &in);
  if (st != PKV_OK) return failed(name, o->where, st);
  char h[32];
  if (o->json) {
    json_head(o);
    printf("  \"num_blocks\": %llu,\n  \"total_bytes\": %llu\n}\n",
           (unsigned long long)in.num_blocks, (unsigned long long)in.total_bytes);
    return CLI_EXIT_OK;
  }
  printf("pkv store stats: %s\n", o->where);
  printf("  %-12s %llu\n", "blocks", (unsigned long long)in.num_blocks);
  printf("  %-12s %s (%llu bytes)\n", "bytes", cli_format_size(in.total_bytes, h, sizeof h),
         (unsigned long long)in.total_bytes);
  if (in.num_blocks != 0)
    printf("  %-12s %s\n", "per block",
           cli_format_size(in.total_bytes / in.num_blocks, h, sizeof h));
  return CLI_EXIT_OK;
}

static void print_entry(const store_opts *o, const pkv_store_entry *e, int first) {
  char key[65], parent[65], fp[65];
  hex(e->key.bytes, 32, key);
  hex(e->parent.bytes, 32, parent);
  hex(e->fingerprint, 32, fp);
  const int good = e->state == PKV_STORE_VALUE_GOOD;
  if (o->json) {
    printf("%s    {\"key\": \"%s\", \"value_bytes\": %llu, \"state\": \"%s\"", first ? "" : ",\n",
           key, (unsigned long long)e->value_bytes, state_name(e->state));
    if (good)
      printf(
          ", \"num_tokens\": %u, \"payload_bytes\": %llu, \"parent\": \"%s\", \"fingerprint\": \"%s\"",
          e->num_tokens, (unsigned long long)e->payload_bytes, parent, fp);
    if (e->state == PKV_STORE_VALUE_BAD) {
      printf(", \"problem\": ");
      cli_json_string(stdout, e->problem);
    }
    printf("}");
  } else if (o->keys_only) {
    printf("%s %10llu\n", key, (unsigned long long)e->value_bytes);
  } else if (good) {
    printf("%s %10llu %6u  good  %.16s  %.16s\n", key, (unsigned long long)e->value_bytes,
           e->num_tokens, parent, fp);
  } else {
    printf("%s %10llu %6s  bad   %s\n", key, (unsigned long long)e->value_bytes, "-", e->problem);
  }
}

static int run_ls(const char *name, const store_opts *o, pkv_store *s) {
  enum { PAGE = 256 };
  static pkv_store_entry page[PAGE];
  const uint32_t flags = o->keys_only ? PKV_STORE_LIST_KEYS_ONLY : 0;
  uint64_t cursor = 0, shown = 0, bad = 0;
  if (o->json) {
    json_head(o);
    printf("  \"entries\": [\n");
  } else if (o->keys_only) {
    printf("%-64s %10s\n", "key", "bytes");
  } else {
    printf("%-64s %10s %6s  %-5s %-16s  %-16s\n", "key", "bytes", "tokens", "state", "parent",
           "fingerprint");
  }
  do {
    uint32_t cap = PAGE, len = 0;
    if (o->limit && o->limit - shown < cap) cap = (uint32_t)(o->limit - shown);
    const pkv_status st = pkv_store_list(s, &cursor, flags, page, sizeof page[0], cap, &len);
    if (st != PKV_OK) {
      if (o->json) printf("\n  ]\n}\n"); /* what was listed stays well-formed */
      return failed(name, o->where, st);
    }
    for (uint32_t i = 0; i < len; i++, shown++) {
      print_entry(o, &page[i], shown == 0);
      bad += page[i].state == PKV_STORE_VALUE_BAD;
    }
  } while (cursor != 0 && (o->limit == 0 || shown < o->limit));
  const int complete = cursor == 0;
  if (o->json) {
    printf("%s  ],\n  \"num_entries\": %llu,\n  \"num_bad\": %llu,\n  \"complete\": %s\n}\n",
           shown ? "\n" : "", (unsigned long long)shown, (unsigned long long)bad,
           complete ? "true" : "false");
  } else {
    printf("(%llu blocks%s%s)\n", (unsigned long long)shown,
           bad ? ", some bad: see 'pkv store verify'" : "",
           complete ? "" : "; --limit reached, more not shown");
  }
  return CLI_EXIT_OK;
}

static int run_verify(const char *name, const store_opts *o, pkv_store *s) {
  pkv_store_verify_result r;
  memset(&r, 0, sizeof r);
  r.struct_size = sizeof r;
  const pkv_status st = pkv_store_verify(s, o->remove_bad ? 1 : 0, &r);
  char key[65], g[32], b[32];
  hex(r.first_bad_key.bytes, 32, key);
  if (st != PKV_OK) {
    if (r.num_removed)
      fprintf(stderr, "pkv %s: removed %llu bad blocks before the failure\n", name,
              (unsigned long long)r.num_removed);
    return failed(name, o->where, st);
  }
  if (o->json) {
    json_head(o);
    printf(
        "  \"num_blocks\": %llu,\n  \"num_good\": %llu,\n  \"num_bad\": %llu,\n  \"num_removed\": %llu,\n"
        "  \"num_gone\": %llu,\n  \"good_bytes\": %llu,\n  \"bad_bytes\": %llu,\n  \"first_bad\": ",
        (unsigned long long)r.num_blocks, (unsigned long long)r.num_good,
        (unsigned long long)r.num_bad, (unsigned long long)r.num_removed,
        (unsigned long long)r.num_gone, (unsigned long long)r.good_bytes,
        (unsigned long long)r.bad_bytes);
    if (r.num_bad) {
      printf("{\"key\": \"%s\", \"problem\": ", key);
      cli_json_string(stdout, r.first_bad_problem);
      printf("}\n}\n");
    } else {
      printf("null\n}\n");
    }
  } else {
    printf("pkv store verify: %s\n", o->where);
    printf("  %-10s %llu\n", "read", (unsigned long long)r.num_blocks);
    printf("  %-10s %llu (%s)\n", "good", (unsigned long long)r.num_good,
           cli_format_size(r.good_bytes, g, sizeof g));
    printf("  %-10s %llu (%s)\n", "bad", (unsigned long long)r.num_bad,
           cli_format_size(r.bad_bytes, b, sizeof b));
    printf("  %-10s %llu\n", "removed", (unsigned long long)r.num_removed);
    if (r.num_gone)
      printf("  %-10s %llu (evicted or rewritten while verify ran)\n", "gone",
             (unsigned long long)r.num_gone);
    if (r.num_bad) printf("  %-10s %s: %s\n", "first bad", key, r.first_bad_problem);
  }
  if (r.num_bad > r.num_removed) {
    fprintf(stderr,
            "pkv %s: %llu bad blocks (engines never use them); 'pkv store ls' shows each, "
            "--remove-bad removes them\n",
            name, (unsigned long long)(r.num_bad - r.num_removed));
    return CLI_EXIT_FAIL;
  }
  return CLI_EXIT_OK;
}

static int run_clear(const char *name, const store_opts *o, pkv_store *s) {
  uint64_t removed = 0;
  const pkv_status st = pkv_store_clear(s, &removed);
  if (st != PKV_OK) {
    fprintf(stderr, "pkv %s: removed %llu blocks, then failed\n", name,
            (unsigned long long)removed);
    return failed(name, o->where, st);
  }
  printf("pkv store clear: removed %llu blocks from %s\n", (unsigned long long)removed, o->where);
  return CLI_EXIT_OK;
}

int cmd_store(int argc, char **argv) {
  if (argc < 1) {
    print_store_usage(stderr);
    return CLI_EXIT_USAGE;
  }
  if (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0 ||
      strcmp(argv[0], "help") == 0) {
    print_store_usage(stdout);
    return CLI_EXIT_OK;
  }
  int sub = -1;
  for (int i = 0; i < 4; i++)
    if (strcmp(argv[0], sub_names[i]) == 0) sub = i;
  if (sub < 0) {
    fprintf(stderr, "pkv store: unknown subcommand '%s'\n\n", argv[0]);
    print_store_usage(stderr);
    return CLI_EXIT_USAGE;
  }
  store_opts o;
  memset(&o, 0, sizeof o);
  cli_flag flags[12] = {
      {"dir", CLI_STRING, &o.dir, "DIR", "a file store: its directory", 0},
      {"redis", CLI_STRING, &o.redis, "HOST:PORT", "a Redis or Valkey store", 0},
      {"password", CLI_STRING, &o.password, "P",
       "Redis AUTH password (default: $PKV_REDIS_PASSWORD)", 0},
      {"prefix", CLI_STRING, &o.prefix, "P", "Redis key prefix of the blocks (pkv:)", 0},
      {"db", CLI_U32, &o.db, "N", "Redis database (0)", 0},
      {"timeout-ms", CLI_U32, &o.timeout_ms, "MS", "Redis connect and command timeout (5000)", 0},
  };
  size_t n = 6;
  if (sub != SUB_CLEAR) flags[n++] = (cli_flag){"json", CLI_FLAG, &o.json, NULL, "print JSON", 0};
  if (sub == SUB_LS) {
    flags[n++] = (cli_flag){
        "keys-only", CLI_FLAG, &o.keys_only, NULL, "keys and sizes only: read no value", 0};
    flags[n++] = (cli_flag){"limit", CLI_U32, &o.limit, "N", "list at most N blocks (0: all)", 0};
  }
  if (sub == SUB_VERIFY)
    flags[n++] =
        (cli_flag){"remove-bad", CLI_FLAG, &o.remove_bad, NULL, "remove each bad block found", 0};
  if (sub == SUB_CLEAR)
    flags[n++] = (cli_flag){"yes", CLI_FLAG, &o.yes, NULL, "really remove every block", 0};
  static const char *const abouts[] = {
      "Counts the blocks of a store and their bytes (no value is read).",
      "Lists every block: key, bytes, and from its header (checked whole) tokens, parent key and\n"
      "model fingerprint (first 16 hex digits; --json gives all); 'bad' ones say why.",
      "Reads every value and checks its header, tokens and payload checksums, and that it is stored\n"
      "under its own key. Exits 1 when bad blocks remain. Engines never use a bad block; removing\n"
      "them frees the space.",
      "Removes every block of the store (other files, or keys outside the prefix, stay). Engines\n"
      "using the store miss, then write blocks again.",
  };
  char name[32], synopsis[128];
  snprintf(name, sizeof name, "store %s", sub_names[sub]);
  snprintf(synopsis, sizeof synopsis, "store %s (--dir DIR | --redis HOST:PORT) [options]",
           sub_names[sub]);
  cli_command cmd = {name, synopsis, abouts[sub], flags, n};
  int rc = cli_parse(&cmd, argc - 1, argv + 1);
  if (rc != CLI_PARSED) return rc == CLI_HELP_SHOWN ? CLI_EXIT_OK : CLI_EXIT_USAGE;
  pkv_store_params p;
  rc = build_params(name, sub, &o, &p);
  if (rc != CLI_EXIT_OK) return rc;
  if (sub == SUB_CLEAR && !o.yes) {
    fprintf(stderr, "pkv %s: this removes every block of %s; add --yes to do it\n", name, o.where);
    return CLI_EXIT_USAGE;
  }
  if (o.dir != NULL && (rc = check_dir(name, o.dir)) != CLI_EXIT_OK) return rc;
  pkv_store *s = NULL;
  const pkv_status st = pkv_store_open(&p, &s);
  if (st != PKV_OK) return failed(name, "cannot open the store", st);
  switch (sub) {
    case SUB_STATS:
      rc = run_stats(name, &o, s);
      break;
    case SUB_LS:
      rc = run_ls(name, &o, s);
      break;
    case SUB_VERIFY:
      rc = run_verify(name, &o, s);
      break;
    default:
      rc = run_clear(name, &o, s);
      break;
  }
  pkv_store_close(s);
  return rc;
}
