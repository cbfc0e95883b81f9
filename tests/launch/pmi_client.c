/* tests/launch: a small PMI client, written apart from pier's own codec (as
 * MPICH's simple PMI clients talk) so that the launch tests check pier-run's
 * PMI server against an independent reading of the wire protocols.
 *
 *   pmi_client v1            PMI-1: init, maxes, appnum, kvsname, put, barrier,
 *                            get of every rank's value, process mapping, a
 *                            missing key, finalize
 *   pmi_client v2            PMI-2: the same through fullinit, kvs-put,
 *                            kvs-fence, kvs-get, info-getjobattr; a value
 *                            holding ';' checks the escape
 *   pmi_client abort R       rank R calls abort (exit code 7); the others
 *                            enter a barrier, which must fail, not hang
 *   pmi_client abort0 R      the same with exit code 0: the job still ends
 *   pmi_client leave R       rank R exits 0 without PMI; the others' barrier
 *                            must fail
 *   pmi_client names1        PMI-1 name service: rank 0 publishes, everyone
 *                            looks it up, a second publish and a lookup after
 *                            unpublish fail; a spawn (mcmd block) is refused
 *   pmi_client names2        the same in PMI-2 (name-publish, name-lookup,
 *                            name-unpublish, spawn)
 *   pmi_client flood         PMI-1 requests for 1.5 s, no answer read;
 *                            prints how much pier-run grew meanwhile
 *
 * Every read has a 20 s deadline. Prints "pmi rank R: ..." lines; exits 0 on
 * success, 3 when a barrier failed as the server closed the connection, 1 on
 * any other error. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int fd = -1;
static int rank = -1;
static int size = -1;
static char inbuf[65536];
static size_t inlen = 0;

static void fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("pmi rank %d: error: ", rank);
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  fflush(stdout);
  exit(1);
}

static void write_all(const char* s, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, s, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail("write: %s", strerror(errno));
    s += w;
    n -= (size_t)w;
  }
}

/* 0 on data, -1 when the server closed the connection. */
static int fill(void) {
  struct pollfd p = {fd, POLLIN, 0};
  int r = poll(&p, 1, 20000);
  if (r == 0) fail("no answer within 20 s");
  if (r < 0) fail("poll: %s", strerror(errno));
  if (inlen == sizeof inbuf) fail("answer too long");
  ssize_t n = read(fd, inbuf + inlen, sizeof inbuf - inlen);
  if (n <= 0) return -1;
  inlen += (size_t)n;
  return 0;
}

static void consume(size_t n) {
  memmove(inbuf, inbuf + n, inlen - n);
  inlen -= n;
}

/* PMI-1: one line, without its newline. NULL when the connection closed. */
static char* read_line(void) {
  static char line[65536];
  for (;;) {
    char* nl = memchr(inbuf, '\n', inlen);
    if (nl) {
      size_t n = (size_t)(nl - inbuf);
      memcpy(line, inbuf, n);
      line[n] = 0;
      consume(n + 1);
      return line;
    }
    if (fill() < 0) return NULL;
  }
}

/* The value of " key=" in a PMI-1 line (up to the next space), or NULL. */
static const char* v1_get(const char* line, const char* key, char* out, size_t cap) {
  size_t k = strlen(key);
  for (const char* p = line; *p; ++p) {
    if ((p == line || p[-1] == ' ') && strncmp(p, key, k) == 0 && p[k] == '=') {
      const char* v = p + k + 1;
      size_t n = strcspn(v, " ");
      if (n >= cap) fail("value of %s too long", key);
      memcpy(out, v, n);
      out[n] = 0;
      return out;
    }
  }
  return NULL;
}

static char* v1_call(const char* request, const char* expect_cmd) {
  write_all(request, strlen(request));
  char* line = read_line();
  if (!line) return NULL;
  char cmd[64];
  if (!v1_get(line, "cmd", cmd, sizeof cmd) || strcmp(cmd, expect_cmd) != 0)
    fail("asked '%.*s', got '%s'", (int)strcspn(request, "\n"), request, line);
  return line;
}

static void v1_expect_rc0(const char* line, const char* what) {
  char rc[16];
  if (!line) fail("%s: connection closed", what);
  if (v1_get(line, "rc", rc, sizeof rc) && strcmp(rc, "0") != 0) fail("%s: %s", what, line);
}

/* PMI-2: sends "cmd=...;" with its 6-character length. */
static void v2_send(const char* body) {
  char prefix[8];
  snprintf(prefix, sizeof prefix, "%-6u", (unsigned)strlen(body));
  write_all(prefix, 6);
  write_all(body, strlen(body));
}

/* PMI-2: one command body, NUL-terminated. NULL when the connection closed. */
static char* v2_read(void) {
  static char body[65536];
  while (inlen < 6)
    if (fill() < 0) return NULL;
  char len_text[7];
  memcpy(len_text, inbuf, 6);
  len_text[6] = 0;
  char* end;
  long n = strtol(len_text, &end, 10);
  if (n <= 0 || n >= (long)sizeof body) fail("bad PMI-2 length '%s'", len_text);
  while (inlen < 6 + (size_t)n)
    if (fill() < 0) return NULL;
  memcpy(body, inbuf + 6, (size_t)n);
  body[n] = 0;
  consume(6 + (size_t)n);
  return body;
}

/* The unescaped value of "key=" in a PMI-2 body, or NULL. */
static const char* v2_get(const char* body, const char* key, char* out, size_t cap) {
  size_t k = strlen(key);
  const char* p = body;
  while (*p) {
    int match = strncmp(p, key, k) == 0 && p[k] == '=';
    const char* v = strchr(p, '=');
    if (!v) return NULL;
    ++v;
    size_t o = 0;
    while (*v) {
      if (v[0] == ';' && v[1] == ';') {
        if (match && o + 1 < cap) out[o++] = ';';
        v += 2;
        continue;
      }
      if (*v == ';') break;
      if (match && o + 1 < cap) out[o++] = *v;
      ++v;
    }
    if (match) {
      out[o] = 0;
      return out;
    }
    p = *v ? v + 1 : v;
  }
  return NULL;
}

static char* v2_call(const char* body, const char* expect_cmd) {
  v2_send(body);
  char* answer = v2_read();
  if (!answer) return NULL;
  char cmd[64], rc[16];
  if (!v2_get(answer, "cmd", cmd, sizeof cmd) || strcmp(cmd, expect_cmd) != 0)
    fail("asked '%s', got '%s'", body, answer);
  if (!v2_get(answer, "rc", rc, sizeof rc) || strcmp(rc, "0") != 0)
    fail("'%s' answered '%s'", body, answer);
  return answer;
}

static int env_int(const char* name) {
  const char* v = getenv(name);
  if (!v) fail("%s is not set", name);
  return atoi(v);
}

static void v1_barrier_or_exit(void) {
  char* line = v1_call("cmd=barrier_in\n", "barrier_out");
  if (!line) {
    printf("pmi rank %d: barrier failed: connection closed\n", rank);
    exit(3);
  }
}

static void v1_init(void) {
  v1_expect_rc0(v1_call("cmd=init pmi_version=1 pmi_subversion=1\n", "response_to_init"), "init");
}

static int run_v1(void) {
  char buf[1100], kvs[300], value[1100];
  v1_init();
  char* line = v1_call("cmd=get_maxes\n", "maxes");
  v1_expect_rc0(line, "get_maxes");
  if (!v1_get(line, "vallen_max", value, sizeof value) || atoi(value) < 256)
    fail("maxes: %s", line);
  line = v1_call("cmd=get_appnum\n", "appnum");
  if (!line || !v1_get(line, "appnum", value, sizeof value) || strcmp(value, "0") != 0)
    fail("appnum: %s", line ? line : "closed");
  line = v1_call("cmd=get_my_kvsname\n", "my_kvsname");
  if (!line || !v1_get(line, "kvsname", kvs, sizeof kvs)) fail("kvsname");
  snprintf(buf, sizeof buf, "cmd=put kvsname=%s key=key-%d value=value-of-%d\n", kvs, rank, rank);
  v1_expect_rc0(v1_call(buf, "put_result"), "put");
  v1_barrier_or_exit();
  for (int r = 0; r < size; ++r) {
    snprintf(buf, sizeof buf, "cmd=get kvsname=%s key=key-%d\n", kvs, r);
    line = v1_call(buf, "get_result");
    v1_expect_rc0(line, "get");
    char want[64];
    snprintf(want, sizeof want, "value-of-%d", r);
    if (!v1_get(line, "value", value, sizeof value) || strcmp(value, want) != 0)
      fail("get of rank %d: %s", r, line);
  }
  snprintf(buf, sizeof buf, "cmd=get kvsname=%s key=PMI_process_mapping\n", kvs);
  line = v1_call(buf, "get_result");
  v1_expect_rc0(line, "get PMI_process_mapping");
  snprintf(buf, sizeof buf, "(vector,(0,1,%d))", size);
  if (!v1_get(line, "value", value, sizeof value) || strcmp(value, buf) != 0)
    fail("process mapping: %s", line);
  snprintf(buf, sizeof buf, "cmd=get kvsname=%s key=no-such-key\n", kvs);
  line = v1_call(buf, "get_result");
  if (!line || !v1_get(line, "rc", value, sizeof value) || strcmp(value, "0") == 0)
    fail("a missing key was found: %s", line ? line : "closed");
  v1_barrier_or_exit();
  v1_expect_rc0(v1_call("cmd=finalize\n", "finalize_ack"), "finalize");
  printf("pmi rank %d: v1 ok, size %d, kvsname %s\n", rank, size, kvs);
  return 0;
}

/* MPI_LOCALNRANKS and MPI_LOCALRANKID, as hydra sets them: one node. */
static void check_local_env(void) {
  if (env_int("MPI_LOCALNRANKS") != size || env_int("MPI_LOCALRANKID") != rank)
    fail("MPI_LOCALNRANKS=%s MPI_LOCALRANKID=%s", getenv("MPI_LOCALNRANKS"),
         getenv("MPI_LOCALRANKID"));
}

static int run_names1(void) {
  char buf[600], value[600];
  check_local_env();
  v1_init();
  if (rank == 0)
    v1_expect_rc0(
        v1_call("cmd=publish_name service=pier-svc port=tcp://10.0.0.1:7\n", "publish_result"),
        "publish_name");
  v1_barrier_or_exit();
  char* line = v1_call("cmd=lookup_name service=pier-svc\n", "lookup_result");
  v1_expect_rc0(line, "lookup_name");
  if (!v1_get(line, "port", value, sizeof value) || strcmp(value, "tcp://10.0.0.1:7") != 0)
    fail("lookup_name: %s", line);
  v1_barrier_or_exit();
  if (rank == 1) {
    line = v1_call("cmd=publish_name service=pier-svc port=other\n", "publish_result");
    if (!line || !v1_get(line, "rc", value, sizeof value) || strcmp(value, "0") == 0)
      fail("a second publish of one name succeeded: %s", line ? line : "closed");
  }
  v1_barrier_or_exit();
  if (rank == 0)
    v1_expect_rc0(v1_call("cmd=unpublish_name service=pier-svc\n", "unpublish_result"),
                  "unpublish_name");
  v1_barrier_or_exit();
  line = v1_call("cmd=lookup_name service=pier-svc\n", "lookup_result");
  if (!line || !v1_get(line, "rc", value, sizeof value) || strcmp(value, "0") == 0)
    fail("an unpublished name was found: %s", line ? line : "closed");
  if (rank == 0) {
    /* PMI_Spawn_multiple's wire form: one block per spawn, then one answer. */
    snprintf(buf, sizeof buf,
             "mcmd=spawn\nnprocs=2\nexecname=/bin/true\ntotspawns=1\nspawnssofar=1\n"
             "argcnt=1\narg1=hello world\npreput_num=0\ninfo_num=0\nendcmd\n");
    line = v1_call(buf, "spawn_result");
    if (!line || !v1_get(line, "rc", value, sizeof value) || strcmp(value, "0") == 0)
      fail("spawn was not refused: %s", line ? line : "closed");
    if (!v1_get(line, "msg", value, sizeof value) || !strstr(value, "not_supported"))
      fail("spawn refused without a reason: %s", line);
    printf("pmi rank %d: spawn refused: %s\n", rank, value);
  }
  v1_barrier_or_exit();
  v1_expect_rc0(v1_call("cmd=finalize\n", "finalize_ack"), "finalize");
  printf("pmi rank %d: names v1 ok\n", rank);
  return 0;
}

/* A PMI-2 call whose rc may be anything. */
static char* v2_call_any(const char* body, const char* expect_cmd) {
  v2_send(body);
  char* answer = v2_read();
  char cmd[64];
  if (!answer || !v2_get(answer, "cmd", cmd, sizeof cmd) || strcmp(cmd, expect_cmd) != 0)
    fail("asked '%s', got '%s'", body, answer ? answer : "closed");
  return answer;
}

static void v2_fence_or_exit(void) {
  if (!v2_call("cmd=kvs-fence;", "kvs-fence-response")) {
    printf("pmi rank %d: barrier failed: connection closed\n", rank);
    exit(3);
  }
}

static int run_names2(void) {
  char buf[600], value[600];
  check_local_env();
  v1_expect_rc0(v1_call("cmd=init pmi_version=2 pmi_subversion=0\n", "response_to_init"), "init");
  snprintf(buf, sizeof buf, "cmd=fullinit;pmirank=%d;threaded=FALSE;", rank);
  if (!v2_call(buf, "fullinit-response")) fail("fullinit: connection closed");
  if (rank == 0 &&
      !v2_call("cmd=name-publish;name=pier-svc2;port=tag;;x;", "name-publish-response"))
    fail("name-publish: connection closed");
  v2_fence_or_exit();
  char* a = v2_call("cmd=name-lookup;name=pier-svc2;", "name-lookup-response");
  if (!a || !v2_get(a, "port", value, sizeof value) || strcmp(value, "tag;x") != 0)
    fail("name-lookup: %s", a ? a : "closed");
  v2_fence_or_exit();
  if (rank == 0 && !v2_call("cmd=name-unpublish;name=pier-svc2;", "name-unpublish-response"))
    fail("name-unpublish: connection closed");
  v2_fence_or_exit();
  a = v2_call_any("cmd=name-lookup;name=pier-svc2;", "name-lookup-response");
  if (!v2_get(a, "rc", value, sizeof value) || strcmp(value, "0") == 0)
    fail("an unpublished name was found: %s", a);
  if (rank == 0) {
    a = v2_call_any(
        "cmd=spawn;thrid=5;ncmds=1;preputcount=0;ppkey0=;ppval0=;subcmd=/bin/true;"
        "maxprocs=2;argc=0;infokeycount=0;",
        "spawn-response");
    if (!v2_get(a, "rc", value, sizeof value) || strcmp(value, "0") == 0)
      fail("spawn was not refused: %s", a);
    if (!v2_get(a, "thrid", value, sizeof value) || strcmp(value, "5") != 0)
      fail("spawn answer lost the thrid: %s", a);
    if (!v2_get(a, "errmsg", value, sizeof value) || !strstr(value, "not supported"))
      fail("spawn refused without a reason: %s", a);
    printf("pmi rank %d: spawn refused: %s\n", rank, value);
  }
  v2_fence_or_exit();
  if (!v2_call("cmd=finalize;", "finalize-response")) fail("finalize: connection closed");
  printf("pmi rank %d: names v2 ok\n", rank);
  return 0;
}

static int run_v2(void) {
  char buf[1100], value[1100], jobid[300];
  {
    char* line = v1_call("cmd=init pmi_version=2 pmi_subversion=0\n", "response_to_init");
    v1_expect_rc0(line, "init");
    if (!v1_get(line, "pmi_version", value, sizeof value) || strcmp(value, "2") != 0)
      fail("init did not accept PMI-2: %s", line);
  }
  snprintf(buf, sizeof buf, "cmd=fullinit;pmirank=%d;threaded=FALSE;", rank);
  char* a = v2_call(buf, "fullinit-response");
  if (!a) fail("fullinit: connection closed");
  if (!v2_get(a, "rank", value, sizeof value) || atoi(value) != rank) fail("fullinit rank: %s", a);
  if (!v2_get(a, "size", value, sizeof value) || atoi(value) != size) fail("fullinit size: %s", a);
  a = v2_call("cmd=job-getid;", "job-getid-response");
  if (!a || !v2_get(a, "jobid", jobid, sizeof jobid)) fail("job-getid");
  snprintf(buf, sizeof buf, "cmd=kvs-put;key=key-%d;value=a;;b=c %d;", rank, rank);
  if (!v2_call(buf, "kvs-put-response")) fail("kvs-put: connection closed");
  if (!v2_call("cmd=kvs-fence;", "kvs-fence-response")) {
    printf("pmi rank %d: barrier failed: connection closed\n", rank);
    exit(3);
  }
  for (int r = 0; r < size; ++r) {
    snprintf(buf, sizeof buf, "cmd=kvs-get;jobid=%s;srcid=-1;key=key-%d;", jobid, r);
    a = v2_call(buf, "kvs-get-response");
    char want[64];
    snprintf(want, sizeof want, "a;b=c %d", r);
    if (!a || !v2_get(a, "found", value, sizeof value) || strcmp(value, "TRUE") != 0 ||
        !v2_get(a, "value", value, sizeof value) || strcmp(value, want) != 0)
      fail("kvs-get of rank %d: %s", r, a ? a : "closed");
  }
  a = v2_call("cmd=kvs-get;jobid=;srcid=-1;key=no-such-key;", "kvs-get-response");
  if (!a || !v2_get(a, "found", value, sizeof value) || strcmp(value, "FALSE") != 0)
    fail("a missing key was found: %s", a ? a : "closed");
  a = v2_call("cmd=info-getjobattr;key=PMI_process_mapping;", "info-getjobattr-response");
  snprintf(buf, sizeof buf, "(vector,(0,1,%d))", size);
  if (!a || !v2_get(a, "value", value, sizeof value) || strcmp(value, buf) != 0)
    fail("process mapping: %s", a ? a : "closed");
  if (!v2_call("cmd=finalize;", "finalize-response")) fail("finalize: connection closed");
  printf("pmi rank %d: v2 ok, size %d, jobid %s\n", rank, size, jobid);
  return 0;
}

static long rss_kib(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE* f = fopen(path, "r");
  if (!f) return -1;
  long kib = -1;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, "VmRSS:", 6) == 0) kib = strtol(line + 6, NULL, 10);
  fclose(f);
  return kib;
}

static double seconds_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Requests sent for 1.5 s without reading a single answer: pier-run must
 * stop reading this rank, not queue its answers without bound. */
static int run_flood(void) {
  v1_init();
  const pid_t server = getppid();
  usleep(100000);
  const long before = rss_kib(server);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  static char batch[14 * 256];
  for (int i = 0; i < 256; ++i) memcpy(batch + 14 * i, "cmd=get_maxes\n", 14);
  size_t at = 0;
  long sent = 0;
  const double end = seconds_now() + 1.5;
  double last_progress = seconds_now();
  while (seconds_now() < end && seconds_now() - last_progress < 0.5) {
    const ssize_t n = send(fd, batch + at, sizeof batch - at, MSG_NOSIGNAL);
    if (n > 0) {
      sent += n;
      at = (at + (size_t)n) % sizeof batch;
      last_progress = seconds_now();
    } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
      break;
    } else {
      usleep(1000);
    }
  }
  const long after = rss_kib(server);
  if (before < 0 || after < 0) fail("cannot read pier-run's memory use");
  printf("pmi rank %d: flood: %ld requests sent, pier-run grew by %ld KiB\n", rank, sent / 14,
         after - before);
  return 0;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 2) fail("usage: pmi_client v1|v2|names1|names2|abort R|leave R");
  fd = env_int("PMI_FD");
  rank = env_int("PMI_RANK");
  size = env_int("PMI_SIZE");
  if (strcmp(argv[1], "v1") == 0) return run_v1();
  if (strcmp(argv[1], "v2") == 0) return run_v2();
  if (strcmp(argv[1], "names1") == 0) return run_names1();
  if (strcmp(argv[1], "names2") == 0) return run_names2();
  if (strcmp(argv[1], "flood") == 0) return run_flood();
  if (argc < 3) fail("usage: pmi_client abort R|leave R");
  int target = atoi(argv[2]);
  if (strcmp(argv[1], "abort") == 0) {
    v1_init();
    if (rank == target) {
      const char* abort_line = "cmd=abort exitcode=7 message=test abort\n";
      write_all(abort_line, strlen(abort_line));
      printf("pmi rank %d: aborting\n", rank);
      exit(7);
    }
    v1_barrier_or_exit();
    fail("the barrier completed without the aborted rank");
  }
  if (strcmp(argv[1], "abort0") == 0) {
    /* MPI_Abort(comm, 0): the job still ends, though the rank exits 0. */
    v1_init();
    if (rank == target) {
      const char* abort_line = "cmd=abort exitcode=0 message=abort with zero\n";
      write_all(abort_line, strlen(abort_line));
      printf("pmi rank %d: aborting with 0\n", rank);
      exit(0);
    }
    v1_barrier_or_exit();
    fail("the barrier completed without the aborted rank");
  }
  if (strcmp(argv[1], "leave") == 0) {
    if (rank == target) return 0;
    v1_init();
    v1_barrier_or_exit();
    fail("the barrier completed without the rank that left");
  }
  fail("unknown mode %s", argv[1]);
  return 1;
}
