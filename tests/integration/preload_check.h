/* Shared by the integration helper programs (C and C++).
 *
 * The helpers are built without the shim and run under LD_PRELOAD. ld.so only *warns* when a
 * preload library cannot be loaded and then runs the program natively, so on a host with the rds
 * kernel module a broken shim could go unnoticed. rds_require_preloaded() makes that loud: every
 * LD_PRELOAD entry must be mapped in this process, else the program exits with status 2.
 * Without LD_PRELOAD it does nothing (the helpers can then be pointed at kernel RDS).
 */
#ifndef RDS_IT_PRELOAD_CHECK_H
#define RDS_IT_PRELOAD_CHECK_H

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rds_it_mapped(const char *path_or_name) {
  char want[PATH_MAX + 2];
  if (strchr(path_or_name, '/')) {
    if (!realpath(path_or_name, want)) return 0;
  } else {
    snprintf(want, sizeof want, "/%s", path_or_name);
  }
  FILE *maps = fopen("/proc/self/maps", "r");
  if (!maps) return 1; /* cannot tell: do not fail on that */
  char line[PATH_MAX + 256];
  int found = 0;
  size_t wl = strlen(want);
  while (!found && fgets(line, sizeof line, maps)) {
    char *nl = strchr(line, '\n');
    if (nl) *nl = '\0';
    char *path = strchr(line, '/');
    if (!path) continue;
    size_t pl = strlen(path);
    if (strchr(path_or_name, '/')) found = strcmp(path, want) == 0;
    else found = pl >= wl && strcmp(path + pl - wl, want) == 0;
  }
  fclose(maps);
  return found;
}

static void rds_require_preloaded(const char *prog) {
  const char *env = getenv("LD_PRELOAD");
  if (!env || !*env) return;
  char *copy = strdup(env);
  char *save = NULL;
  for (char *tok = strtok_r(copy, " :", &save); tok; tok = strtok_r(NULL, " :", &save)) {
    if (!rds_it_mapped(tok)) {
      fprintf(stderr, "%s: FATAL: LD_PRELOAD entry '%s' is not loaded in this process\n", prog, tok);
      printf("fatal preload-not-loaded %s\n", tok);
      fflush(stdout);
      exit(2);
    }
  }
  free(copy);
}

#endif
