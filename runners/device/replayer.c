/* StoreTune's trace replayer: replays I/Os on a block device with O_DIRECT through io_uring and
 * times each one from its submission to the moment its completion is reaped, as fio does.
 *
 * Written by hand because no replayer in Debian reports one latency per trace line (fio's iolog
 * replay logs latencies by completion, not by line). Built on first use by runners/device/replay.py.
 *
 *   replayer DEVICE IN OUT QUEUE_DEPTH
 *
 * IN:  n records of struct io_in (offset, due time in ns from the start, length, 1 for a write);
 *      offsets and lengths are already aligned to the device's logical block.
 * OUT: n records of struct io_out (submit time in ns from the start, latency in ns, the result:
 *      bytes moved or -errno).
 * At most QUEUE_DEPTH I/Os are in flight; an I/O is submitted once it is due and a slot is free.
 * Exit status 0 when every I/O was issued (a failed I/O is a negative result, not an exit),
 * 2 for bad arguments or input, 3 when the device, the ring or the memory cannot be had.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct io_in { uint64_t offset; uint64_t due_ns; uint32_t length; uint32_t write; };
struct io_out { int64_t submit_ns; int64_t latency_ns; int64_t result; };

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void *read_all(const char *path, size_t *size) {
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) { perror(path); return NULL; }
    char *data = malloc(st.st_size ? st.st_size : 1);
    size_t got = 0;
    while (data && got < (size_t)st.st_size) {
        ssize_t r = read(fd, data + got, st.st_size - got);
        if (r <= 0) { perror(path); free(data); data = NULL; break; }
        got += r;
    }
    close(fd);
    *size = got;
    return data;
}

int main(int argc, char **argv) {
    if (argc != 5) { fprintf(stderr, "usage: replayer DEVICE IN OUT QUEUE_DEPTH\n"); return 2; }
    int depth = atoi(argv[4]);
    size_t size;
    struct io_in *in = read_all(argv[2], &size);
    if (!in || depth < 1 || size % sizeof *in) { fprintf(stderr, "bad input or queue depth\n"); return 2; }
    size_t n = size / sizeof *in;
    struct io_out *out = calloc(n ? n : 1, sizeof *out);
    uint32_t longest = 4096;
    for (size_t i = 0; i < n; i++) if (in[i].length > longest) longest = in[i].length;

    int fd = open(argv[1], O_RDWR | O_DIRECT);
    if (fd < 0) { fprintf(stderr, "cannot open %s: %s\n", argv[1], strerror(errno)); return 3; }
    struct io_uring ring;
    int err = io_uring_queue_init(depth, &ring, 0);
    if (err < 0) { fprintf(stderr, "io_uring: %s\n", strerror(-err)); return 3; }
    char **buffers = calloc(depth, sizeof *buffers);
    int *free_slots = calloc(depth, sizeof *free_slots);
    for (int s = 0; s < depth; s++) {
        if (posix_memalign((void **)&buffers[s], 4096, longest)) { fprintf(stderr, "out of memory\n"); return 3; }
        memset(buffers[s], 0xa5, longest);
        free_slots[s] = s;
    }
    int nfree = depth;
    size_t next = 0, done = 0;
    int64_t start = now_ns();
    while (done < n) {
        /* submit every due I/O that has a free slot */
        while (next < n && nfree > 0 && start + (int64_t)in[next].due_ns <= now_ns()) {
            struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
            int slot = free_slots[--nfree];
            if (in[next].write)
                io_uring_prep_write(sqe, fd, buffers[slot], in[next].length, in[next].offset);
            else
                io_uring_prep_read(sqe, fd, buffers[slot], in[next].length, in[next].offset);
            io_uring_sqe_set_data64(sqe, ((uint64_t)next << 16) | (uint64_t)slot);
            out[next].submit_ns = now_ns() - start;
            err = io_uring_submit(&ring);
            if (err < 0) { fprintf(stderr, "io_uring_submit: %s\n", strerror(-err)); return 3; }
            next++;
        }
        /* wait for a completion, or until the next I/O is due */
        struct io_uring_cqe *cqe = NULL;
        if (nfree < depth) {
            if (next < n && nfree > 0) {
                int64_t wait = start + (int64_t)in[next].due_ns - now_ns();
                if (wait <= 0) continue;
                struct __kernel_timespec ts = { wait / 1000000000LL, wait % 1000000000LL };
                err = io_uring_wait_cqe_timeout(&ring, &cqe, &ts);
            } else {
                err = io_uring_wait_cqe(&ring, &cqe);
            }
            if (err < 0 && err != -ETIME && err != -EINTR) {
                fprintf(stderr, "io_uring_wait_cqe: %s\n", strerror(-err));
                return 3;
            }
        } else if (next < n) {
            int64_t wait = start + (int64_t)in[next].due_ns - now_ns();
            if (wait > 0) {
                struct timespec ts = { wait / 1000000000LL, wait % 1000000000LL };
                nanosleep(&ts, NULL);
            }
            continue;
        }
        /* reap everything that has completed, each timed when it is seen */
        while (io_uring_peek_cqe(&ring, &cqe) == 0) {
            int64_t t = now_ns() - start;
            uint64_t data = io_uring_cqe_get_data64(cqe);
            size_t i = data >> 16;
            out[i].latency_ns = t - out[i].submit_ns;
            out[i].result = cqe->res;
            free_slots[nfree++] = (int)(data & 0xffff);
            io_uring_cqe_seen(&ring, cqe);
            done++;
        }
    }
    io_uring_queue_exit(&ring);
    close(fd);
    FILE *f = fopen(argv[3], "wb");
    if (!f || fwrite(out, sizeof *out, n, f) != n || fclose(f)) { perror(argv[3]); return 3; }
    return 0;
}
