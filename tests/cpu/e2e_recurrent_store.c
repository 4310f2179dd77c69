/* The store directory of e2e_recurrent's restart story: a fresh one under /tmp, removed after. */
#define _XOPEN_SOURCE 700 /* mkdtemp, nftw under -std=c11 */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "e2e_recurrent.h"

int rec_store_dir(char out[64]) {
  return mkdtemp(strcpy(out, "/tmp/pkv-e2e-recurrent-XXXXXX")) != NULL;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

void rec_store_remove(const char *dir) { nftw(dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS); }
