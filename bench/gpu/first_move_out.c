/* A program's first move out of managed memory, made by several programs at once as in a start
 * rush (notebooks that all allocate in the same second), timed on a real card, four ways:
 *   migrate   the driver's migration to the host (slow as the machine's first, once)
 *   pageable  a copy into host memory faulted in beforehand but not pinned, then a discard
 *   pin_now   host memory faulted in and pinned at the move, then a copy and a discard
 *   pin_pieces  the same, pinned 256 MiB at a time (as libnvs pins, to answer between pieces)
 * Each of PROCS processes allocates GIB of managed memory, fills it, waits for the others, then
 * moves it out; each prints one JSON line with its rate, and checks its contents after bringing
 * them back. With BUSY, that many more processes start CUDA at the same moment and fill BUSY_GIB
 * of managed memory each, again and again until the movers are done, as programs starting
 * beside the one that moves do.
 *
 *   cc -O2 -I/usr/local/cuda/include first_move_out.c -o first_move_out -lcuda -lpthread
 *   ./first_move_out GIB PROCS WAY [BUSY BUSY_GIB]   (keep all their memory far below free)
 */
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "managed_moves.h"

/* Host memory with its pages faulted in by several threads (huge pages where the host gives
 * them). */
static char *faulted_in(size_t size)
{
    char *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    madvise(base, size, MADV_HUGEPAGE);
    fault_in(base, size);
    return base;
}

/* A program starting beside the movers: CUDA, then its memory filled until `done_fd` closes. */
static void busy_program(size_t size, int go_fd, int done_fd)
{
    char byte;
    if (read(go_fd, &byte, 1) != 1)
        exit(1);
    fcntl(done_fd, F_SETFL, O_NONBLOCK); /* read: -1 while the movers move, 0 once they are done */
    start_cuda();
    CUdeviceptr p;
    check(cuMemAllocManaged(&p, size, CU_MEM_ATTACH_GLOBAL), "cuMemAllocManaged");
    int fills = 0;
    do {
        fill(p, size);
        fills++;
    } while (read(done_fd, &byte, 1) != 0);
    printf("{\"busy\": true, \"fills\": %d}\n", fills);
}

/* Host memory pinned 256 MiB at a time. */
static void register_in_pieces(char *host, size_t size)
{
    for (size_t off = 0; off < size; off += CHUNK)
        check(cuMemHostRegister(host + off, CHUNK, 0), "cuMemHostRegister");
}

static void one_program(int index, size_t size, const char *way, int ready_fd, int go_fd)
{
    start_cuda();
    CUdeviceptr p;
    check(cuMemAllocManaged(&p, size, CU_MEM_ATTACH_GLOBAL), "cuMemAllocManaged");
    fill(p, size);
    char *host = strcmp(way, "pageable") == 0 ? faulted_in(size) : NULL;
    char byte = 1;
    if (write(ready_fd, &byte, 1) != 1 || read(go_fd, &byte, 1) != 1)
        exit(1);
    double t = now_s(), pinned_s = 0;
    if (strcmp(way, "migrate") == 0) {
        prefetch(p, size, 1);
    } else {
        if (host == NULL) {
            host = faulted_in(size);
            if (strcmp(way, "pin_pieces") == 0)
                register_in_pieces(host, size);
            else
                check(cuMemHostRegister(host, size, 0), "cuMemHostRegister");
            pinned_s = now_s() - t;
        }
        copy_out(host, p, size);
        discard(p, size, 0);
    }
    double out_s = now_s() - t;
    prefetch(p, size, 0);
    if (host != NULL) /* the discarded pages hold nothing until copied back */
        copy_in(p, host, size);
    printf("{\"way\": \"%s\", \"programs\": %s, \"program\": %d, \"gib\": %.2f, \"out_s\": %.3f, "
           "\"gb_per_s\": %.2f, \"pinning_s\": %.3f, \"intact\": %d}\n",
           way, getenv("PROGRAMS"), index, size / (double)GIB, out_s, size / out_s / 1e9,
           pinned_s, intact(p, size));
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (argc != 4 && argc != 6) {
        fprintf(stderr, "usage: %s GIB PROCS migrate|pageable|pin_now|pin_pieces [BUSY BUSY_GIB]\n",
                argv[0]);
        return 2;
    }
    size_t size = (size_t)(atof(argv[1]) * GIB);
    size -= size % CHUNK;
    int procs = atoi(argv[2]), busy = argc == 6 ? atoi(argv[4]) : 0;
    size_t busy_size = argc == 6 ? (size_t)(atof(argv[5]) * GIB) / CHUNK * CHUNK : 0;
    setenv("PROGRAMS", argv[2], 1);
    int ready[2], go[2], done[2];
    if (procs < 1 || busy < 0 || pipe(ready) || pipe(go) || pipe(done))
        return 2;
    pid_t movers[procs];
    for (int i = 0; i < procs; i++)
        if ((movers[i] = fork()) == 0) {
            close(done[1]);
            one_program(i, size, argv[3], ready[1], go[0]);
            return 0;
        }
    for (int i = 0; i < busy; i++)
        if (fork() == 0) {
            close(done[1]);
            busy_program(busy_size, go[0], done[0]);
            return 0;
        }
    close(done[0]);
    char byte = 1;
    for (int i = 0; i < procs; i++)
        if (read(ready[0], &byte, 1) != 1)
            return 1;
    for (int i = 0; i < procs + busy; i++)
        if (write(go[1], &byte, 1) != 1)
            return 1;
    int failed = 0, status;
    for (int i = 0; i < procs; i++) {
        waitpid(movers[i], &status, 0);
        failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    close(done[1]); /* the busy programs stop after their fill */
    while (wait(&status) > 0)
        failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    return failed;
}
