/* jacobi: the testbed's checkpointing MPI program, built into each MPI image at /home/mpiuser/jacobi.
 *
 * What it computes: a fixed number of Jacobi sweeps of the 2-D heat equation on a fixed SIZE x SIZE grid
 * whose border keeps fixed values (top 1, left falling from 1 to 0, bottom rising from 0 to 0.5, right 0) and
 * whose interior starts at 0. The rows are dealt out to however many ranks it runs with, in blocks (any count
 * from 1; SIZE need not divide, a rank beyond SIZE holds no row). Every cell's new value is
 * 0.25 * (((up + down) + left) + right) of the previous sweep's values, the same operations in the same order
 * whatever the decomposition, so the final grid is bitwise the same for any number of ranks and any
 * stop/resume history.
 *
 * Usage: jacobi [--size N] [--iterations T] [--checkpoint-dir DIR] [--checkpoint-every K] [--delay-ms MS]
 *   defaults 256, 20000, no directory (no checkpoint, no resume, no final.bin), 0 (no periodic checkpoint), 0.
 *   --delay-ms sleeps that long after each sweep, so a test or a demonstration can signal a small run midway.
 *
 * Checkpoints (need --checkpoint-dir): after every K-th sweep but the last (final.bin is written then), and at
 * the first sweep boundary after any rank got SIGUSR1 (the handler only sets a flag; all ranks learn of it with
 * an MPI_Allreduce at each boundary). DIR/checkpoint.bin holds the GLOBAL grid, so any rank count reads it:
 * the 8 bytes "JACOBI01", the int64 SIZE, the int64 iteration (sweeps done), then SIZE*SIZE native doubles row
 * by row. All ranks write it with MPI_File_write_at_all to DIR/checkpoint.bin.tmp; after MPI_File_sync, a close
 * and a barrier, rank 0 renames it over DIR/checkpoint.bin, so a run killed mid-write leaves the previous
 * checkpoint whole.
 *
 * SIGUSR1 means "checkpoint now and stop": the ranks write the checkpoint, rank 0 prints "stopped at iteration
 * I with N ranks", and every rank exits 75 (EX_TEMPFAIL: try again) after MPI_Finalize; mpirun then exits 75
 * too. The distinct code keeps a stopped run from passing for a finished one (0) or a crashed one (1, or a
 * signal). SIGUSR1 sent to mpirun reaches the ranks under OpenMPI 4.1 (orterun), OpenMPI 5 (prterun) and
 * MPICH 4.2 (hydra), each checked with this program; Intel MPI's hydra is MPICH's, whose mpiexec forwards
 * SIGUSR1 but not SIGUSR2 (HYDU_set_common_signals), hence SIGUSR1. A signal that arrives after the last sweep
 * is ignored: the run finishes instead. Without --checkpoint-dir, SIGUSR1 stops the run (75) with nothing saved.
 *
 * Resume: at start, if DIR/checkpoint.bin exists, every rank reads its rows of it (MPI-IO) and the sweeps go
 * on from its iteration; a checkpoint of another SIZE or length, or past T, is an error (exit 2).
 *
 * Output (rank 0, one line each): "starting at iteration I with N ranks"; "checkpoint at iteration I with N
 * ranks" per checkpoint; at the end "finished iteration T with N ranks: checksum XXXXXXXXXXXXXXXX", the 64-bit
 * FNV-1a of the final grid's SIZE*SIZE doubles as raw bytes, in hex; and, with a directory, the final grid
 * in DIR/final.bin, in the checkpoint's format (written the same atomic way). Exit 0.
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EXIT_STOPPED 75
#define HEADER 24 /* magic, size, iteration */
static const char MAGIC[8] = {'J', 'A', 'C', 'O', 'B', 'I', '0', '1'};

static volatile sig_atomic_t stop_requested = 0;
static void on_sigusr1(int sig) { (void)sig; stop_requested = 1; }

struct run {
    int rank, ranks;
    int64_t n, lo, rows; /* grid size; this rank's first global row and row count */
    int up, down;        /* neighbour ranks, or MPI_PROC_NULL */
    double *cur, *next;  /* (rows + 2) x n: a halo row above and below this rank's rows */
};

static double border(int64_t n, int64_t i, int64_t j)
{
    double last = (double)(n - 1);
    if (i == 0) return 1.0;
    if (j == 0) return 1.0 - (double)i / last;
    if (i == n - 1) return 0.5 * (double)j / last;
    return 0.0; /* right column and the interior */
}

static void setup(struct run *r, int64_t n)
{
    MPI_Comm_rank(MPI_COMM_WORLD, &r->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &r->ranks);
    int64_t base = n / r->ranks, extra = n % r->ranks;
    r->n = n;
    r->rows = base + (r->rank < extra);
    r->lo = r->rank * base + (r->rank < extra ? r->rank : extra);
    int holders = r->ranks < n ? r->ranks : (int)n; /* the ranks that hold rows: 0 .. holders-1 */
    r->up = (r->rank > 0 && r->rank < holders) ? r->rank - 1 : MPI_PROC_NULL;
    r->down = (r->rank + 1 < holders) ? r->rank + 1 : MPI_PROC_NULL;
    size_t cells = (size_t)(r->rows + 2) * (size_t)n;
    r->cur = calloc(cells, sizeof(double));
    r->next = calloc(cells, sizeof(double));
    if (!r->cur || !r->next) MPI_Abort(MPI_COMM_WORLD, 1);
    for (int64_t k = 1; k <= r->rows; k++)
        for (int64_t j = 0; j < n; j++)
            r->cur[k * n + j] = r->next[k * n + j] = border(n, r->lo + k - 1, j);
}

static void sweep(struct run *r)
{
    int64_t n = r->n, rows = r->rows;
    /* Halo rows: my first row goes up while the one below me comes into row rows+1, and vice versa. */
    MPI_Sendrecv(r->cur + n, (int)n, MPI_DOUBLE, r->up, 0, r->cur + (rows + 1) * n, (int)n, MPI_DOUBLE,
                 r->down, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Sendrecv(r->cur + rows * n, (int)n, MPI_DOUBLE, r->down, 1, r->cur, (int)n, MPI_DOUBLE, r->up, 1,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    for (int64_t k = 1; k <= rows; k++) {
        int64_t i = r->lo + k - 1;
        if (i == 0 || i == n - 1) continue; /* border rows never change (next holds them already) */
        const double *a = r->cur + (k - 1) * n, *c = r->cur + k * n, *b = r->cur + (k + 1) * n;
        double *out = r->next + k * n;
        for (int64_t j = 1; j < n - 1; j++)
            out[j] = 0.25 * (((a[j] + b[j]) + c[j - 1]) + c[j + 1]);
    }
    double *t = r->cur; r->cur = r->next; r->next = t;
}

/* write_grid: the global grid and iteration to DIR/NAME, through DIR/NAME.tmp and a rename by rank 0. */
static void write_grid(const struct run *r, const char *dir, const char *name, int64_t iteration)
{
    char tmp[4096], path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s/%s.tmp", dir, name);
    MPI_File fh;
    MPI_File_open(MPI_COMM_WORLD, tmp, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
    MPI_File_set_size(fh, HEADER + (MPI_Offset)(r->n * r->n * 8)); /* a longer leftover tmp is cut */
    char header[HEADER];
    int64_t fields[2] = {r->n, iteration};
    memcpy(header, MAGIC, 8);
    memcpy(header + 8, fields, 16);
    MPI_File_write_at_all(fh, 0, header, r->rank == 0 ? HEADER : 0, MPI_BYTE, MPI_STATUS_IGNORE);
    MPI_File_write_at_all(fh, HEADER + (MPI_Offset)(r->lo * r->n * 8), r->cur + r->n, (int)(r->rows * r->n),
                          MPI_DOUBLE, MPI_STATUS_IGNORE);
    MPI_File_sync(fh); /* the data is on disk before the rename makes it the checkpoint */
    MPI_File_close(&fh);
    MPI_Barrier(MPI_COMM_WORLD);
    int failed = 0;
    if (r->rank == 0 && rename(tmp, path) != 0) {
        fprintf(stderr, "jacobi: rename %s: %s\n", tmp, strerror(errno));
        failed = 1;
    }
    MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (failed) MPI_Abort(MPI_COMM_WORLD, 1);
}

/* resume: the iteration of DIR/checkpoint.bin with this rank's rows read from it, 0 if there is none, or -1
 * if it does not fit this run. */
static int64_t resume(struct run *r, const char *dir, int64_t iterations)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/checkpoint.bin", dir);
    int exists = r->rank == 0 && access(path, F_OK) == 0;
    MPI_Bcast(&exists, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!exists) return 0;
    MPI_File fh;
    MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
    char header[HEADER];
    int64_t fields[2];
    MPI_Offset bytes;
    MPI_File_get_size(fh, &bytes);
    MPI_File_read_at_all(fh, 0, header, HEADER, MPI_BYTE, MPI_STATUS_IGNORE);
    memcpy(fields, header + 8, 16);
    int fits = bytes == HEADER + (MPI_Offset)(r->n * r->n * 8) && memcmp(header, MAGIC, 8) == 0 &&
               fields[0] == r->n && fields[1] >= 0 && fields[1] <= iterations;
    if (fits)
        MPI_File_read_at_all(fh, HEADER + (MPI_Offset)(r->lo * r->n * 8), r->cur + r->n, (int)(r->rows * r->n),
                             MPI_DOUBLE, MPI_STATUS_IGNORE);
    MPI_File_close(&fh);
    if (!fits) {
        if (r->rank == 0)
            fprintf(stderr, "jacobi: %s is not a checkpoint of a %" PRId64 "-grid at most %" PRId64
                    " sweeps in\n", path, r->n, iterations);
        return -1;
    }
    return fields[1];
}

/* checksum: FNV-1a (64 bit) over the global grid's bytes, rows in order, computed on rank 0. */
static uint64_t checksum(const struct run *r)
{
    int counts[r->ranks], displs[r->ranks], mine = (int)(r->rows * r->n);
    MPI_Gather(&mine, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD);
    double *all = NULL;
    if (r->rank == 0) {
        for (int q = 0, at = 0; q < r->ranks; at += counts[q], q++) displs[q] = at;
        all = malloc((size_t)(r->n * r->n) * sizeof(double));
        if (!all) MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Gatherv(r->cur + r->n, mine, MPI_DOUBLE, all, counts, displs, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    uint64_t h = 14695981039346656037ULL;
    if (r->rank == 0) {
        const unsigned char *p = (const unsigned char *)all;
        for (size_t k = 0; k < (size_t)(r->n * r->n) * sizeof(double); k++) h = (h ^ p[k]) * 1099511628211ULL;
        free(all);
    }
    return h;
}

static int64_t number(const char *flag, const char *text)
{
    char *end;
    long long v = text ? strtoll(text, &end, 10) : -1;
    if (!text || *end || v < 0) {
        fprintf(stderr, "jacobi: %s needs a number >= 0\n", flag);
        exit(2); /* every rank parses the same arguments, so every rank stops here */
    }
    return v;
}

static void say(const struct run *r, const char *what, int64_t iteration)
{
    if (r->rank != 0) return;
    printf("%s at iteration %" PRId64 " with %d ranks\n", what, iteration, r->ranks);
    fflush(stdout); /* the launcher forwards output line by line: show each event as it happens */
}

int main(int argc, char **argv)
{
    int64_t n = 256, iterations = 20000, every = 0, delay_ms = 0;
    const char *dir = NULL;
    /* Before MPI_Init: a SIGUSR1 that comes early must set the flag, not kill the rank. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigusr1;
    sa.sa_flags = SA_RESTART; /* a system call under MPI goes on after the handler */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    for (int a = 1; a < argc; a++) { /* before MPI_Init, so a bad argument exits without MPI */
        const char *v = a + 1 < argc ? argv[a + 1] : NULL;
        if (!strcmp(argv[a], "--size")) n = number(argv[a], v);
        else if (!strcmp(argv[a], "--iterations")) iterations = number(argv[a], v);
        else if (!strcmp(argv[a], "--checkpoint-every")) every = number(argv[a], v);
        else if (!strcmp(argv[a], "--delay-ms")) delay_ms = number(argv[a], v);
        else if (!strcmp(argv[a], "--checkpoint-dir") && v) dir = v;
        else { fprintf(stderr, "jacobi: unknown argument %s\n", argv[a]); exit(2); }
        a++;
    }
    if (n < 3 || n > 46340) { /* 46340^2 still fits the int counts MPI takes */
        fprintf(stderr, "jacobi: --size must be 3..46340\n");
        exit(2);
    }
    MPI_Init(&argc, &argv);
    struct run r;
    setup(&r, n);
    MPI_File_set_errhandler(MPI_FILE_NULL, MPI_ERRORS_ARE_FATAL); /* an I/O error aborts the run */
    if (dir && r.rank == 0 && mkdir(dir, 0777) != 0 && errno != EEXIST)
        fprintf(stderr, "jacobi: mkdir %s: %s\n", dir, strerror(errno)); /* MPI_File_open then fails */
    int64_t it = dir ? resume(&r, dir, iterations) : 0;
    if (it < 0) { MPI_Finalize(); return 2; }
    say(&r, "starting", it);
    const struct timespec pause = {(time_t)(delay_ms / 1000), (long)(delay_ms % 1000) * 1000000L};
    while (it < iterations) {
        sweep(&r);
        it++;
        if (delay_ms) nanosleep(&pause, NULL);
        if (it == iterations) break;
        int local = stop_requested, stop = 0;
        MPI_Allreduce(&local, &stop, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (dir && (stop || (every && it % every == 0))) {
            write_grid(&r, dir, "checkpoint.bin", it);
            say(&r, "checkpoint", it);
        }
        if (stop) {
            say(&r, "stopped", it);
            MPI_Finalize();
            return EXIT_STOPPED;
        }
    }
    uint64_t h = checksum(&r);
    if (dir) write_grid(&r, dir, "final.bin", it);
    if (r.rank == 0) {
        printf("finished iteration %" PRId64 " with %d ranks: checksum %016" PRIx64 "\n", it, r.ranks, h);
        fflush(stdout);
    }
    free(r.cur);
    free(r.next);
    MPI_Finalize();
    return 0;
}
