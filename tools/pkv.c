/*
 * pkv.c - the pkv command-line tool: dispatch to its commands.
 *
 *   pkv demo      a tiny transformer served through pkv, against contiguous KV
 *   pkv profile   how many KV blocks (tokens, sequences) fit, from a Hugging Face config.json
 *   pkv simulate  a serving workload through the block manager, with its numbers
 *   pkv soak      millions of random operations with invariant checks (not part of CI)
 *   pkv store     a store tier's blocks: stats, ls, verify, clear
 *
 * Written in C against pkv.h only, as any host would be.
 */
#include <stdio.h>
#include <string.h>

#include <pkv/pkv.h>

#include "cli.h"
#include "commands.h"

typedef struct command {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *summary;
} command;

static const command commands[] = {
    {"demo", cmd_demo, "serve a tiny built-in transformer through pkv, vs contiguous KV"},
    {"profile", cmd_profile, "KV budget: blocks, tokens and sequences that fit in memory"},
    {"simulate", cmd_simulate, "run a synthetic serving workload through the block manager"},
    {"soak", cmd_soak, "millions of random operations on one engine, checked as they go"},
    {"store", cmd_store, "a store tier's blocks (directory or Redis): stats, ls, verify, clear"},
};

static void print_version(void) {
  uint32_t v = pkv_version();
  printf("pkv %u.%u.%u (ABI %u; header %d.%d.%d, ABI %d)\n", v / 10000, v / 100 % 100, v % 100,
         pkv_abi_version(), PKV_VERSION_MAJOR, PKV_VERSION_MINOR, PKV_VERSION_PATCH,
         PKV_ABI_VERSION);
}

static void print_usage(FILE *f) {
  fprintf(f, "usage: pkv <command> [options]\n"
             "       pkv --version | --help\n"
             "\n"
             "pkv is a paged KV-cache runtime for LLM inference. Commands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
  fprintf(f, "\n'pkv <command> --help' lists a command's options. Sizes are whole byte counts in\n"
             "binary units, written like 80GiB (= 80G), 512MiB (= 512M), 1.5GiB or 4096 (bytes);\n"
             "KB, MB, GB and TB are refused (powers of 1000 or of 1024?).\n"
             "\n"
             "examples:\n"
             "  pkv demo\n"
             "  pkv profile --config tools/configs/llama-3-8b.json --memory 80GiB --tp 1\n"
             "  pkv simulate --requests 400 --seed 1\n"
             "  pkv store stats --dir /var/cache/pkv\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    print_usage(stderr);
    return CLI_EXIT_USAGE;
  }
  const char *name = argv[1];
  if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || strcmp(name, "help") == 0) {
    print_usage(stdout);
    return CLI_EXIT_OK;
  }
  if (strcmp(name, "--version") == 0 || strcmp(name, "-V") == 0 || strcmp(name, "version") == 0) {
    print_version();
    return CLI_EXIT_OK;
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (strcmp(name, commands[i].name) == 0) return commands[i].run(argc - 2, argv + 2);
  fprintf(stderr, "pkv: unknown command '%s'\n\n", name);
  print_usage(stderr);
  return CLI_EXIT_USAGE;
}
