/* tests/launch: a real PMI-2 client library, Slurm's libpmi2 (a descendant of
 * MPICH's simple PMI-2 client), against pier-run's PMI server. Built only
 * where libpmi2 is installed (Debian: libpmi2-0-dev).
 *
 * Every rank: PMI2_Init, job id, put its key, fence, read every rank's key,
 * the process mapping, node attributes, finalize. Prints
 * "slurm pmi2 rank R/N: ok"; exits 1 on any failure (the call named). */
#include <slurm/pmi2.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank = -1;

static void check(int rc, const char* what) {
  if (rc == PMI2_SUCCESS) return;
  printf("slurm pmi2 rank %d: %s failed with %d\n", rank, what, rc);
  fflush(stdout);
  exit(1);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int spawned = -1, size = -1, appnum = -1;
  check(PMI2_Init(&spawned, &size, &rank, &appnum), "PMI2_Init");
  char jobid[256];
  check(PMI2_Job_GetId(jobid, sizeof jobid), "PMI2_Job_GetId");
  char key[PMI2_MAX_KEYLEN], value[PMI2_MAX_VALLEN], want[PMI2_MAX_VALLEN];
  snprintf(key, sizeof key, "slurm-key-%d", rank);
  snprintf(value, sizeof value, "value;of=%d", rank);
  check(PMI2_KVS_Put(key, value), "PMI2_KVS_Put");
  if (rank == 0) check(PMI2_Info_PutNodeAttr("node-attr", "from-rank-0"), "PMI2_Info_PutNodeAttr");
  check(PMI2_KVS_Fence(), "PMI2_KVS_Fence");
  for (int r = 0; r < size; ++r) {
    int len = 0;
    snprintf(key, sizeof key, "slurm-key-%d", r);
    snprintf(want, sizeof want, "value;of=%d", r);
    check(PMI2_KVS_Get(jobid, r, key, value, sizeof value, &len), "PMI2_KVS_Get");
    if (strcmp(value, want) != 0) {
      printf("slurm pmi2 rank %d: rank %d's value is '%s'\n", rank, r, value);
      return 1;
    }
  }
  int found = 0;
  check(PMI2_Info_GetJobAttr("PMI_process_mapping", value, sizeof value, &found),
        "PMI2_Info_GetJobAttr");
  snprintf(want, sizeof want, "(vector,(0,1,%d))", size);
  if (!found || strcmp(value, want) != 0) {
    printf("slurm pmi2 rank %d: process mapping '%s' (found %d)\n", rank, value, found);
    return 1;
  }
  check(PMI2_Info_GetNodeAttr("node-attr", value, sizeof value, &found, 1),
        "PMI2_Info_GetNodeAttr");
  if (!found || strcmp(value, "from-rank-0") != 0) {
    printf("slurm pmi2 rank %d: node attribute '%s' (found %d)\n", rank, value, found);
    return 1;
  }
  check(PMI2_Finalize(), "PMI2_Finalize");
  printf("slurm pmi2 rank %d/%d: ok, spawned %d, appnum %d\n", rank, size, spawned, appnum);
  return 0;
}
