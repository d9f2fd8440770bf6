/*
 * fault.h - failing the N-th allocation or send, for tests/test_fault.c only.
 *
 * The fault build (`make test-fault`) links test_fault with the linker's
 * --wrap for malloc, calloc, realloc, strdup, aligned_alloc and
 * posix_memalign, so every call to them from the project's objects (the
 * library included) goes through tests/fault.c; jansson's allocations are
 * routed there too (json_set_alloc_funcs), except inside its parser
 * (json_loadb, json_loads: see fault.c).  Calls from inside libc, MHD
 * and other libraries are not counted.  One shot, as sqlite's and
 * libbacktrace's fault tests: the armed allocation fails, those before
 * and after succeed.  The counters are atomic: any thread may allocate.
 *
 * tests/fault_send.c does the same for the server's sends: it defines
 * send, sendmsg, write and sendfile64 (and fsync and rename, for files)
 * in the test executable, which
 * libmicrohttpd's calls resolve to (symbol interposition: --wrap cannot
 * reach into a shared library), and counts only the calls on sockets the
 * watched server accepted, or on those connected to a watched port, or on
 * the files of a watched directory (save files, which the project writes
 * itself).  The armed one fails with EPIPE (odd N) or ECONNRESET (even
 * N), ENOSPC or EIO for a file, or in the short mode sends half its bytes.
 */
#ifndef TEST_FAULT_H
#define TEST_FAULT_H

#include <stdbool.h>

/* The n-th counted allocation from now fails (n >= 1); 0 disarms. */
void fault_arm(long n);
/* Counted allocations since the start. */
long fault_allocs(void);
/* True once the armed allocation has failed (reset by fault_arm). */
bool fault_hit(void);
/* Routes jansson's allocations through the counted ones. */
void fault_route_jansson(void);

typedef enum fault_send_mode {
    FAULT_SEND_FAIL,             /* -1 with EPIPE or ECONNRESET: the peer left */
    FAULT_SEND_SHORT,            /* half the bytes go: the sender must send the rest */
} fault_send_mode;

/* Sends count on the sockets whose local port is port (those the server
 * listening there accepted); 0 stops counting. */
void fault_send_watch(int port);
/* Instead, sends count on the sockets connected to port (a router's
 * requests to its child there); 0 stops it. */
void fault_send_watch_peer(int port);
/* The connection whose peer (client) port is peer_port never counts; 0: none. */
void fault_send_exempt(int peer_port);
/* The n-th counted send from now fails as m says (n >= 1); 0 disarms. */
void fault_send_arm(long n, fault_send_mode m);
/* Writes, fsyncs and renames of files in dir (an absolute path without
 * symbolic links, kept alive by the caller) count too, while no port is
 * watched (the save area); a failing write gives ENOSPC, fsync and rename
 * EIO.  NULL stops it. */
void fault_file_watch(const char *dir);
/* Counted sends since the start. */
long fault_sends(void);
/* True once the armed send has failed (reset by fault_send_arm). */
bool fault_send_hit(void);

#endif
