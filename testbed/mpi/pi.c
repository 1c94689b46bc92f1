/* pi: the testbed's MPI smoke program, built into each MPI image at /home/mpiuser/pi.
 *
 * Every rank prints "rank R of N on HOST", then rank 0 prints "pi is approximately 3.14159265". HOST is the
 * kernel's host name (gethostname: the pod's own, where the rank really ran), not MPI_Get_processor_name,
 * which under PMIx is the name mpirun was given for the host it sent the rank to.
 *
 * Why that line does not depend on -n: pi is the midpoint-rule integral of 4/(1+x^2) over [0,1] with a fixed
 * number of intervals, the intervals dealt out to the ranks round-robin and the partial sums added with
 * MPI_Reduce. The rule's own error at 10^7 intervals is ~1e-15, and a different split or reduction order
 * changes only the last few bits of the double, so the value printed with 8 decimals is the same for any
 * number of ranks (pi = 3.1415926535..., far from a rounding boundary at the 8th decimal). A test can assert
 * the one string.
 */
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>

#define INTERVALS 10000000L

int main(int argc, char **argv)
{
    int rank, size;
    char host[256];

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (gethostname(host, sizeof host) != 0)
        snprintf(host, sizeof host, "unknown");
    host[sizeof host - 1] = '\0';
    printf("rank %d of %d on %s\n", rank, size, host);
    fflush(stdout); /* the launcher forwards each rank's output line by line; do not hold it until exit */

    const double h = 1.0 / INTERVALS;
    double sum = 0.0;
    for (long i = rank; i < INTERVALS; i += size) {
        double x = h * ((double)i + 0.5);
        sum += 4.0 / (1.0 + x * x);
    }
    double part = sum * h, pi = 0.0;
    MPI_Reduce(&part, &pi, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("pi is approximately %.8f\n", pi);
        fflush(stdout);
    }
    MPI_Finalize();
    return 0;
}
