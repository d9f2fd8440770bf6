/*
 * fault_send.c - the send interposers of fault.h.
 *
 * MHD lives in a shared library, where the linker's --wrap cannot reach.
 * Symbol interposition can: libmicrohttpd.so.12 (0.9.75) imports send,
 * sendmsg, write and sendfile64, and because it does, the definitions here
 * are exported from the test executable's dynamic symbol table, and the
 * executable comes first in every lookup, so MHD's calls land here (and
 * libcurl's, which imports send too: the CORS proxy).
 * dlsym(RTLD_NEXT) finds the next definition, ASan's interceptor, which
 * checks the buffers and calls libc's.
 *
 * Only calls on the sockets of the server being watched count: a socket
 * whose local port is the watched port is one that server accepted (its
 * listener holds the port, so no client socket of this process can have
 * it), which leaves out the test client's own sends, stderr, eventfd
 * signals and save files, whichever thread writes, and needs no
 * bookkeeping of accepted and closed descriptors that the kernel reuses.
 * A connection whose peer port was exempted is left out too, so a
 * bystander can share the server untouched while its neighbours fail.
 * For the router's requests to its child the other side is watched: the
 * sockets connected to the child's port, which in this process only the
 * router's loopback client opens (the child is another process).
 *
 * The save files' writes are the project's own (src/save), so the same
 * definitions of write, and of fsync and rename, catch them without any
 * interposition; they count when the file lies in the watched directory
 * (its /proc/self/fd link names it), the directory's own fsync included.
 */
#include "fault.h"

#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

static ssize_t (*real_send)(int, const void *, size_t, int);
static ssize_t (*real_sendmsg)(int, const struct msghdr *, int);
static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_sendfile64)(int, int, off64_t *, size_t);
static int (*real_fsync)(int);
static int (*real_rename)(const char *, const char *);
static pthread_once_t resolved = PTHREAD_ONCE_INIT;

static atomic_int watch_port;     /* 0: nothing counts */
static atomic_int exempt_port;    /* a peer port whose connection never counts */
static atomic_int watch_peer;     /* 0, or the port the sockets that count are connected to */
static atomic_long countdown;     /* 0: disarmed; else counted sends left before the armed one */
static atomic_long n_sends;
static atomic_bool hit;
static atomic_int mode;           /* fault_send_mode */
static _Atomic(const char *) watch_dir;   /* NULL: no file counts; the caller's string */

static void resolve(void)
{
    real_send = (ssize_t (*)(int, const void *, size_t, int))dlsym(RTLD_NEXT, "send");
    real_sendmsg = (ssize_t (*)(int, const struct msghdr *, int))dlsym(RTLD_NEXT, "sendmsg");
    real_write = (ssize_t (*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    real_sendfile64 = (ssize_t (*)(int, int, off64_t *, size_t))dlsym(RTLD_NEXT, "sendfile64");
    real_fsync = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    real_rename = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
}

void fault_send_watch(int port) { atomic_store(&watch_port, port); }
void fault_send_watch_peer(int port) { atomic_store(&watch_peer, port); }

void fault_file_watch(const char *dir) { atomic_store(&watch_dir, dir); }

void fault_send_exempt(int peer_port) { atomic_store(&exempt_port, peer_port); }

void fault_send_arm(long n, fault_send_mode m)
{
    atomic_store(&hit, false);
    atomic_store(&mode, m);
    atomic_store(&countdown, n);
}

long fault_sends(void) { return atomic_load(&n_sends); }
bool fault_send_hit(void) { return atomic_load(&hit); }

static int port_of(const struct sockaddr_storage *a)
{
    if (a->ss_family == AF_INET) return ntohs(((const struct sockaddr_in *)a)->sin_port);
    if (a->ss_family == AF_INET6) return ntohs(((const struct sockaddr_in6 *)a)->sin6_port);
    return -1;
}

static bool in_dir(const char *path)
{
    const char *dir = atomic_load(&watch_dir);
    size_t n = dir ? strlen(dir) : 0;
    return n && !strncmp(path, dir, n) && (path[n] == '/' || !path[n]);
}

static bool watched_file(int fd)
{
    char link[64], path[4096];
    if (!atomic_load(&watch_dir)) return false;
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0) return false;
    path[n] = 0;
    return in_dir(path);
}

static bool watched(int fd)
{
    int port = atomic_load(&watch_port), peer = atomic_load(&watch_peer);
    struct sockaddr_storage a;
    socklen_t n = sizeof a;
    if (peer) return getpeername(fd, (struct sockaddr *)&a, &n) == 0 && port_of(&a) == peer;
    if (!port) return watched_file(fd);
    if (getsockname(fd, (struct sockaddr *)&a, &n) != 0 || port_of(&a) != port) return false;
    int exempt = atomic_load(&exempt_port);
    n = sizeof a;
    return !exempt || getpeername(fd, (struct sockaddr *)&a, &n) != 0 || port_of(&a) != exempt;
}

/* True for the armed call among the counted ones. */
static bool fail_counted(void)
{
    long k = atomic_fetch_add(&n_sends, 1) + 1;
    long c = atomic_load(&countdown);
    while (c > 0 && !atomic_compare_exchange_weak(&countdown, &c, c - 1)) {}
    if (c != 1) return false;
    atomic_store(&hit, true);
    /* Both errors a peer that left produces, so both paths get a turn. */
    errno = k % 2 ? EPIPE : ECONNRESET;
    return true;
}

/* True for the armed send on a watched socket or file. */
static bool fail_now(int fd)
{
    pthread_once(&resolved, resolve);
    return watched(fd) && fail_counted();
}

/* The short mode's length: half, at least one byte. */
static size_t shorter(size_t n) { return n > 1 ? n / 2 : n; }

ssize_t send(int fd, const void *buf, size_t n, int flags)
{
    if (!fail_now(fd)) return real_send(fd, buf, n, flags);
    if (atomic_load(&mode) == FAULT_SEND_FAIL) return -1;
    return real_send(fd, buf, shorter(n), flags);
}

/* A file's write fails as a full disk's does. */
ssize_t write(int fd, const void *buf, size_t n)
{
    if (!fail_now(fd)) return real_write(fd, buf, n);
    if (atomic_load(&mode) == FAULT_SEND_SHORT) return real_write(fd, buf, shorter(n));
    if (!atomic_load(&watch_port)) errno = ENOSPC;
    return -1;
}

int fsync(int fd)
{
    if (!fail_now(fd)) return real_fsync(fd);
    errno = EIO;
    return -1;
}

int rename(const char *from, const char *to)
{
    pthread_once(&resolved, resolve);
    if (!in_dir(from) || !fail_counted()) return real_rename(from, to);
    errno = EIO;
    return -1;
}

ssize_t sendfile64(int out, int in, off64_t *off, size_t n)
{
    if (!fail_now(out)) return real_sendfile64(out, in, off, n);
    if (atomic_load(&mode) == FAULT_SEND_FAIL) return -1;
    return real_sendfile64(out, in, off, shorter(n));
}

/* MHD sends a reply's headers and the first part of its body in one
 * sendmsg; the short mode cuts that gather list to half its bytes (of its
 * first 64 entries at most: still a short send, which is all it must be). */
ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
    if (!fail_now(fd)) return real_sendmsg(fd, msg, flags);
    if (atomic_load(&mode) == FAULT_SEND_FAIL) return -1;
    struct iovec iov[64];
    struct msghdr m = *msg;
    size_t total = 0, left;
    for (size_t i = 0; i < msg->msg_iovlen; i++) total += msg->msg_iov[i].iov_len;
    left = shorter(total);
    m.msg_iov = iov;
    m.msg_iovlen = 0;
    for (size_t i = 0; i < msg->msg_iovlen && i < 64 && left; i++) {
        iov[i] = msg->msg_iov[i];
        if (iov[i].iov_len > left) iov[i].iov_len = left;
        left -= iov[i].iov_len;
        m.msg_iovlen = i + 1;
    }
    return real_sendmsg(fd, &m, flags);
}
